"""`moderator console`, added to the CLI through the `moderator.commands` entry point. The web
stack (Starlette, uvicorn) is imported only when the command runs: it is the console extra's."""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

from moderator import loop
from moderator.commandline import (
    KAFKA_CONNECTION,
    add_setting_flags,
    command,
    log_flags,
    say,
    settings_from_args,
)
from moderator.config import Settings
from moderator.errors import ConfigError
from moderator.redaction import protect

# What the console reads of the moderator's settings: Kafka, Redis (claims) and the loop's topics.
MODERATOR_SETTINGS = (*KAFKA_CONNECTION, "review_topic", "verdict_topic", "out_topic", "redis_url",
                      "override_topic", "audit_topic", "shadow_topic")  # fmt: skip
EXTRA_MODULES = ("starlette", "uvicorn", "sse_starlette", "itsdangerous", "multipart", "jwt",
                 "cryptography")  # fmt: skip
EXTRA_HINT = "pip install . './tools[console]'"


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `console` to the `moderator` command line."""
    from console.config import add_console_flags

    cmd = command(sub, "console", "the review console for human moderators, a web page (the "
                  "console extra)", """
        MODERATOR_CONSOLE_TOKENS=alice:s3cret-token moderator console
        moderator console --host 127.0.0.1 --oidc-issuer https://idp.example.com \\
            --oidc-audience console-client-id --oidc-key-file /etc/console/oidc/jwks.json
        moderator console --kafka-bootstrap kafka:9092 --redis-url redis://cache:6379/0
    """, description="""\
A web page for human moderators: the held messages of the review topic, live, with their
context; claim, allow / nudge / block (a verdict on the verdict topic); history, filters and an
overview of the decision topic; the shadow model's disagreements with the primary. Log in with a
token, or run it behind an OIDC proxy (oauth2-proxy) whose ID tokens the console verifies against
the identity provider's pinned key. No header is trusted by itself.""")  # fmt: skip
    add_setting_flags(cmd, MODERATOR_SETTINGS)
    add_console_flags(cmd)
    log_flags(cmd, argparse.SUPPRESS)
    cmd.set_defaults(command=run_console)


def run_console(args: argparse.Namespace) -> int:
    missing = [m for m in EXTRA_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"moderator console needs the console extra ({EXTRA_HINT}); "
                          f"missing: {', '.join(missing)}")  # fmt: skip
    from console.config import ConsoleSettings

    settings = settings_from_args(args)
    console = ConsoleSettings.from_env(**{k: v for k, v in vars(args).items() if v is not None})
    protect([*settings.secrets(), *console.secrets()])
    console.check()
    return loop.run(serve(settings, console))


async def serve(settings: Settings, console: Any) -> int:
    import uvicorn

    from console.app import create_app
    from console.board import Board
    from console.claims import Claims
    from console.feed import Feed
    from console.overrides import OverrideDesk

    board = Board(
        undo_grace_s=console.undo_grace_s,
        overview_minutes=console.overview_minutes,
        disagreements_kept=console.disagreements_kept if settings.shadow_topic else 0,
    )
    feed = Feed(
        board,
        settings.kafka_options(),
        review_topic=settings.review_topic,
        verdict_topic=settings.verdict_topic,
        decision_topic=settings.out_topic,
        max_record_bytes=settings.max_record_bytes,
        shadow_topic=settings.shadow_topic,
    )
    overrides = OverrideDesk(
        board, feed, settings.kafka_options(), override_topic=settings.override_topic,
        audit_topic=settings.audit_topic, global_moderators=console.global_moderator_ids(),
        send_timeout_s=console.send_timeout_s,
    )  # fmt: skip
    app = create_app(
        console,
        board,
        feed,
        Claims(settings.redis_url, console.claim_ttl_s, verdict_topic=settings.verdict_topic),
        overrides,
    )
    config = uvicorn.Config(
        app,
        host=console.host,
        port=console.port,
        log_config=None,  # moderator's logging (cli.py) applies
        access_log=False,
        timeout_graceful_shutdown=3,
    )
    shadow = f", disagreements of {settings.shadow_topic}" if settings.shadow_topic else ""
    say(f"console  http://{console.host}:{console.port}/  ({settings.review_topic} → "
        f"{settings.verdict_topic}, overview of {settings.out_topic}{shadow}); "
        "Ctrl+C to stop")  # fmt: skip
    await uvicorn.Server(config).serve()
    return 0
