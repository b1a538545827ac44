"""`python -m loadgen.bench.nospin run ...`: the moderator with ONNX Runtime's spin-waiting off.

A diagnostic for the benchmark, not a way to run the service: it sets the session option
`session.intra_op.allow_spinning = 0` on every `onnxruntime.SessionOptions` the process makes,
then runs the ordinary `moderator` command line. Comparing it with `moderator run` on the same
load shows what ONNX Runtime's busy-waiting intra-op threads cost a process that also runs an
event loop on the same cores.
"""

from __future__ import annotations

import sys
from typing import Any

import onnxruntime as ort

SPIN_KEY = "session.intra_op.allow_spinning"


def patch_session_options() -> None:
    """Make every new SessionOptions carry allow_spinning = 0."""
    original: Any = ort.SessionOptions

    class NoSpinOptions(original):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.add_session_config_entry(SPIN_KEY, "0")

    ort.SessionOptions = NoSpinOptions


def main() -> int:
    patch_session_options()
    from moderator.cli import main as moderator_main

    return moderator_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
