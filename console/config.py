"""The console's own settings (`MODERATOR_CONSOLE_*`), each with a flag. Kafka, Redis and the
topics (review, verdict, decision, shadow) are the moderator's settings (moderator/config.py
`Settings`, read by `moderator console` too), so one environment configures both and they cannot
disagree."""

from __future__ import annotations

import argparse
import dataclasses
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moderator.errors import ConfigError


@dataclass(frozen=True)
class ConsoleSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    tokens: str = ""
    tokens_file: str = ""
    oidc_issuer: str = ""
    oidc_audience: str = ""
    oidc_key_file: str = ""
    oidc_claim: str = "email"
    oidc_header: str = "Authorization"
    oidc_algorithms: str = "RS256"
    oidc_leeway_s: float = 30.0
    secret: str = ""
    secure_cookies: bool = False
    undo_grace_s: float = 10.0
    claim_ttl_s: float = 300.0
    overview_minutes: int = 15
    send_timeout_s: float = 5.0
    global_moderators: str = ""
    disagreements_kept: int = 200

    def global_moderator_ids(self) -> frozenset[str]:
        """The moderators who may make and revoke global overrides (console/overrides.py)."""
        return frozenset(filter(None, (m.strip() for m in self.global_moderators.split(","))))

    def logins(self) -> dict[str, str]:
        """token -> moderator id, from `tokens` (`id:token,id:token`) and `tokens_file` (one
        `id token` per line, `#` comments)."""
        pairs: list[tuple[str, str]] = []
        for part in filter(None, (p.strip() for p in self.tokens.split(","))):
            who, sep, token = part.partition(":")
            if not sep:
                raise ConfigError("MODERATOR_CONSOLE_TOKENS: each entry is moderator_id:token")
            pairs.append((who.strip(), token.strip()))
        if self.tokens_file:
            try:
                lines = Path(self.tokens_file).read_text().splitlines()
            except OSError as exc:
                raise ConfigError(f"MODERATOR_CONSOLE_TOKENS_FILE: {exc.strerror}") from None
            for n, line in enumerate(lines, 1):
                words = line.split("#", 1)[0].split()
                if not words:
                    continue
                if len(words) != 2:
                    raise ConfigError(
                        f"MODERATOR_CONSOLE_TOKENS_FILE line {n}: expected `moderator_id token`"
                    )
                pairs.append((words[0], words[1]))
        logins: dict[str, str] = {}
        for who, token in pairs:
            if not who or len(token) < 8:
                raise ConfigError(f"console token of {who!r}: at least 8 characters")
            logins[token] = who
        return logins

    def check(self) -> None:
        """Refuse to start with no way to log in, or a half-made OIDC set-up."""
        from console.auth import verifier_from  # the console extra's PyJWT

        if self.disagreements_kept < 0:
            raise ConfigError("MODERATOR_CONSOLE_DISAGREEMENTS_KEPT: 0 or more")

        if verifier_from(self) is None and not self.logins():
            raise ConfigError(
                "the console has no way to log in: set MODERATOR_CONSOLE_TOKENS (or _TOKENS_FILE) "
                "or MODERATOR_CONSOLE_OIDC_ISSUER, _AUDIENCE and _KEY_FILE (the ID tokens your "
                "OIDC proxy passes, verified)"
            )

    def secrets(self) -> list[str]:
        return [self.secret, *self.logins()]

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> ConsoleSettings:
        environ = os.environ if environ is None else environ
        if environ.get(DROPPED) or overrides.get("identity_header"):
            raise ConfigError(
                f"{DROPPED} is no longer read: a header alone is not authentication (anyone "
                "who reaches the console can send it). Set MODERATOR_CONSOLE_OIDC_* to verify "
                "your proxy's ID tokens, or give moderators tokens (README, the review console)"
            )
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = overrides.get(f.name)
            if raw is None:
                raw = environ.get(env_name(f.name))
            if raw is None:
                continue
            kind: type[Any] = type(f.default)
            try:
                if kind is bool:
                    values[f.name] = str(raw).lower() in ("1", "true", "yes", "on")
                else:
                    values[f.name] = kind(raw)
            except ValueError:
                raise ConfigError(f"{env_name(f.name)}: not a {kind.__name__}: {raw!r}") from None
        return cls(**values)


DROPPED = "MODERATOR_CONSOLE_IDENTITY_HEADER"  # a bare trusted header, refused since issue 43


def env_name(name: str) -> str:
    return "MODERATOR_CONSOLE_" + name.upper()


HELP = {
    "host": "address the console binds to",
    "port": "the console's HTTP port",
    "tokens": "logins, moderator_id:token,... (a secret)",
    "tokens_file": "logins, a file of `moderator_id token` lines (a secret)",
    "oidc_issuer": "issuer (`iss`) of the ID tokens an OIDC proxy passes (e.g. oauth2-proxy's "
    "--oidc-issuer-url); with _audience and _key_file, the proxy mode",
    "oidc_audience": "audience (`aud`) the ID tokens must name: the proxy's OAuth client id",
    "oidc_key_file": "the identity provider's public key, pinned: a PEM file or a JWKS file",
    "oidc_claim": "the ID token's claim that is the moderator id",
    "oidc_header": "header carrying the ID token (Authorization: `Bearer <jwt>`, or a header "
    "holding the bare token)",
    "oidc_algorithms": "signature algorithms accepted, comma-separated (asymmetric only)",
    "oidc_leeway_s": "seconds of clock skew allowed on `exp` and `nbf`",
    "secret": "key signing the session cookies (random per process if unset: sessions end "
    "with it, and several replicas need the same one)",
    "secure_cookies": "mark cookies Secure (served over HTTPS)",
    "undo_grace_s": "seconds a verdict waits in the console before it is produced, during "
    "which its moderator may undo it (0: produced at once, no undo)",
    "claim_ttl_s": "seconds a claim lasts unless renewed",
    "overview_minutes": "minutes of decisions the overview covers",
    "send_timeout_s": "seconds a verdict waits for the broker before the page is told 'queued'",
    "global_moderators": "moderator ids, comma-separated, who may make and revoke overrides "
    "for every channel (a verdict's scope global); nobody else may",
    "disagreements_kept": "the shadow model's disagreements the disagreements view keeps, the "
    "newest (the shadow topic is MODERATOR_SHADOW_TOPIC; empty: no view)",
}


def add_console_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("console settings")
    for f in dataclasses.fields(ConsoleSettings):
        flag, shown = (
            "--" + f.name.replace("_", "-"),
            f"[{env_name(f.name)}, default: {f.default!r}]",
        )
        if isinstance(f.default, bool):  # a switch: given means on
            group.add_argument(flag, dest=f.name, action="store_const", const="1",
                               help=f"{HELP[f.name]} {shown}")  # fmt: skip
            continue
        group.add_argument(
            flag,
            dest=f.name,
            default=None,
            metavar=f.name.split("_")[-1].upper(),
            help=f"{HELP[f.name]} {shown}",
        )


def token_matches(given: str, logins: Mapping[str, str]) -> str | None:
    """The moderator whose token `given` is, comparing in constant time."""
    found = None
    for token, who in logins.items():
        if hmac.compare_digest(given.encode(), token.encode()):
            found = who
    return found
