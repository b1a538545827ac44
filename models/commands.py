"""`moderator model …`, added to the CLI through the `moderator.commands` entry point: the
runtime never imports the model-building code (or torch)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from models.subcommands import EXTRA_HINT, MODEL_EXTRA_MODULES, SUBCOMMANDS, USAGE


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `model` to the `moderator` command line."""
    from moderator.commandline import command

    listed = "\n".join(f"  {name:<12} {text}" for name, text in SUBCOMMANDS.items())
    model = command(sub, "model", " | ".join(SUBCOMMANDS) + " (the model extra)", """
        make model                                   # build, evaluate and ship the default model
        moderator model build --out models/build/chat-minilm
        moderator model evaluate --model models/build/chat-minilm
        moderator model export ./my-hf-checkpoint ./my-model
        moderator model ship --check
        moderator model COMMAND --help               # a command's options
    """, description=f"""\
Build, evaluate and ship models. Every command but ship needs the model extra:
{EXTRA_HINT}.

commands:
{listed}""")  # fmt: skip
    model.usage = USAGE
    model.add_argument(
        "args", nargs=argparse.REMAINDER, metavar="COMMAND ...", help="a command, then its options"
    )
    model.set_defaults(command=run_model)


def run_model(args: argparse.Namespace) -> int:
    rest = list(args.args)
    if not rest:
        from moderator.config import DEFAULT_MODEL_DIR

        print(f"usage: {USAGE} (default model: {DEFAULT_MODEL_DIR}; "
              "moderator model --help lists them)", file=sys.stderr)  # fmt: skip
        return 2
    try:
        from models import cli

        result: int = cli.main(rest)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in MODEL_EXTRA_MODULES:
            raise
        print(
            f"moderator model {rest[0]} needs the model extra (no module {exc.name!r}): "
            + EXTRA_HINT,
            file=sys.stderr,
        )
        return 2
    return result
