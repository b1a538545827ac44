"""`python -m bench.withspin run ...`: the moderator with ONNX Runtime's spin-waiting on.

A diagnostic for the benchmark, not a way to run the service. The moderator turns
`session.intra_op.allow_spinning` off (see `moderator/decide/classifier.py`); this wrapper forces
every session option that names spinning back to "1", ONNX Runtime's own default, then runs the
ordinary `moderator` command line, so the benchmark can show what the busy-waiting threads cost
a process that also runs an event loop on the same cores.
"""

from __future__ import annotations

import sys
from typing import Any

import onnxruntime as ort

SPIN_KEYS = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")


def patch_session_options() -> None:
    """Make every new SessionOptions keep spinning on, whatever the moderator asks."""
    original: Any = ort.SessionOptions

    class SpinOptions(original):  # type: ignore[misc]
        def add_session_config_entry(self, key: str, value: str) -> None:
            super().add_session_config_entry(key, "1" if key in SPIN_KEYS else value)

    ort.SessionOptions = SpinOptions


def main() -> int:
    patch_session_options()
    from moderator.cli import main as moderator_main

    return moderator_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
