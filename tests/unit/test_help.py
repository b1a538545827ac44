"""Every command's --help, walked: examples, what each argument means, and only the settings
that apply to it."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

import pytest

from devstack.commands import EMBEDDED, dev_settings
from loadgen.cli import build_parser as loadgen_parser
from models import cli as models_cli
from models.subcommands import SUBCOMMANDS, USAGE
from moderator.admin.override_admin import SETTINGS as OVERRIDE_SETTINGS
from moderator.admin.score import SCORE_INPUT
from moderator.cli import KAFKA_CONNECTION, _parser
from moderator.config import ENV_PREFIX, Settings


def subcommands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(prog, parser) of `parser` and of every subcommand under it, depth first."""
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from subcommands(child)


def every_parser() -> dict[str, argparse.ArgumentParser]:
    parsers = dict(subcommands(_parser()))
    # Behind `moderator model COMMAND` (`moderator model --help` itself is the stub above).
    parsers.update((prog, p) for prog, p in subcommands(models_cli._parser()) if prog in
                   {f"moderator model {c}" for c in SUBCOMMANDS})  # fmt: skip
    parsers["loadgen"] = loadgen_parser()
    return parsers


PARSERS = every_parser()


def flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")}


def setting_flags(names: object) -> set[str]:
    assert isinstance(names, tuple | list)
    return {"--" + n.replace("_", "-") for n in names if n in Settings.__dataclass_fields__}


def test_the_walk_reaches_every_command() -> None:
    expected = {"moderator run", "moderator score", "moderator policy", "moderator dev",
                "moderator demo", "moderator model", "loadgen",
                *(f"moderator policy {a}" for a in ("put", "get", "list", "delete")),
                "moderator override list", "moderator override delete",
                *(f"moderator model {c}" for c in SUBCOMMANDS)}  # fmt: skip
    assert expected <= set(PARSERS)


@pytest.mark.parametrize("prog", sorted(PARSERS))
def test_every_help_has_examples_and_says_what_each_argument_is(prog: str) -> None:
    parser = PARSERS[prog]
    assert issubclass(parser.formatter_class, argparse.RawDescriptionHelpFormatter), prog
    text = parser.format_help()
    examples = text.split("\nexamples:\n")
    assert len(examples) == 2, f"{prog} --help has no examples"
    assert examples[1].strip(), prog
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        assert action.help, f"{prog}: {action.option_strings or action.dest} has no help"


def test_score_help_says_what_input_it_expects() -> None:
    text = PARSERS["moderator score"].format_help()
    assert f"input (stdin): {SCORE_INPUT}" in text
    assert '{"line": N, "error"' in text


@pytest.mark.parametrize("action", ["put", "get", "list", "delete"])
def test_policy_commands_offer_only_the_settings_they_read(action: str) -> None:
    parser = PARSERS[f"moderator policy {action}"]
    offered = flags(parser) - {"--help", "--log-format", "--log-level"}
    allowed = setting_flags([*KAFKA_CONNECTION, "policy_topic", "policy", "topic_replication"])
    assert setting_flags([*KAFKA_CONNECTION, "policy_topic"]) <= offered <= allowed
    assert ("--policy" in offered) == (action in ("put", "list")), "the base they judge over"
    assert {"--threads", "--redis-url", "--budget-ms", "--group-id"}.isdisjoint(offered)
    positional = [a for a in parser._actions if not a.option_strings]
    assert [a.dest for a in positional] == {"put": ["channel", "file"], "list": []}.get(
        action, ["channel"]
    )


@pytest.mark.parametrize("action", ["list", "delete", "expire", "audit"])
def test_override_commands_offer_only_the_settings_they_read(action: str) -> None:
    parser = PARSERS[f"moderator override {action}"]
    own = {"--help", "--log-format", "--log-level", "--text", "--channel", "--by", "--expires-in"}
    offered = flags(parser) - own
    assert offered == setting_flags(OVERRIDE_SETTINGS[action])
    read = "audit_topic" if action == "audit" else "override_topic"
    assert setting_flags([*KAFKA_CONNECTION, read]) <= offered
    writes = action in ("delete", "expire")
    assert ("--topic-replication" in offered) == writes, "a write creates the topics"
    assert ("--audit-topic" in offered) == (action != "list"), "a write is audited first"


def test_dev_offers_no_setting_its_embedded_stack_ignores() -> None:
    offered = flags(PARSERS["moderator dev"])
    assert offered.isdisjoint(setting_flags(EMBEDDED))
    assert {"--kafka-bootstrap", "--redis-url", "--kafka-security-protocol"}.isdisjoint(offered)
    assert {"--kafka-port", "--redis-port", "--budget-ms", "--policy"} <= offered


def test_dev_ignores_the_environment_of_the_settings_it_sets_itself() -> None:
    """A shell with production MODERATOR_KAFKA_* set still gets the plaintext embedded stack."""
    args = PARSERS["moderator dev"].parse_args([])
    environ = {**os.environ, ENV_PREFIX + "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
               ENV_PREFIX + "KAFKA_BOOTSTRAP": "kafka.prod:9093",
               ENV_PREFIX + "BUDGET_MS": "30"}  # fmt: skip
    settings = dev_settings(args, environ)
    assert settings.kafka_security_protocol == "PLAINTEXT"
    assert settings.kafka_bootstrap == Settings().kafka_bootstrap
    assert settings.budget_ms == 30


def test_model_usage_lists_every_model_command() -> None:
    stub = PARSERS["moderator model"]
    commands = {prog.split()[-1] for prog, _ in subcommands(models_cli._parser())} - {"model"}
    assert commands == set(SUBCOMMANDS)
    text = stub.format_help()
    assert text.startswith(f"usage: {USAGE}")
    for name in commands:
        assert f"\n  {name} " in text, name
