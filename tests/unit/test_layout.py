"""The runtime package stands alone: the dev stack, the harnesses and the model builder stay out."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import moderator
from moderator.cli import main

RUNTIME = Path(moderator.__file__).parent
OUTSIDE = ("devstack", "loadgen", "models", "bench", "chaos", "tests")


def imported(path: Path) -> set[str]:
    """Top-level names of every module `path` imports (lazily or not)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_runtime_module_imports_dev_or_harness_code() -> None:
    offenders = {path.name: sorted(imported(path) & set(OUTSIDE)) for path in RUNTIME.glob("*.py")}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_importing_every_runtime_module_loads_nothing_from_outside() -> None:
    code = (
        "import importlib, pkgutil, sys, moderator\n"
        "for m in pkgutil.iter_modules(moderator.__path__):\n"
        "    if m.name != '__main__':\n"
        "        importlib.import_module('moderator.' + m.name)\n"
        f"print(sorted({{n for n in sys.modules if n.split('.')[0] in {OUTSIDE!r}}}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_runtime_module_is_over_400_lines() -> None:
    sizes = {path.name: len(path.read_text().splitlines()) for path in RUNTIME.glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 400} == {}


def test_dev_demo_and_model_reach_the_cli_through_entry_points(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    listed = capsys.readouterr().out
    for command in ("run", "score", "dev", "demo", "model"):
        assert f"    {command} " in listed
