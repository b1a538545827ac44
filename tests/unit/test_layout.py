"""The runtime package stands alone: the dev stack, the harnesses and the model builder stay out."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

import moderator
from moderator.cli import main

RUNTIME = Path(moderator.__file__).parent
OUTSIDE = ("devstack", "loadgen", "models", "bench", "chaos", "tests")
MAX_IMPORT_DEPTH = 8  # modules on the longest chain of runtime modules importing one another
MAX_FORMATTER_ESCAPES = 10


def imported(path: Path) -> set[str]:
    """Top-level names of every module `path` imports (lazily or not)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def runtime_imports(path: Path) -> set[str]:
    """The runtime modules `path` imports, anywhere in it (a function's imports too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(
                a.name.split(".")[1] for a in node.names if a.name.startswith("moderator.")
            )
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "moderator":  # `from moderator import loop, logs`
                names.update(a.name for a in node.names if (RUNTIME / f"{a.name}.py").is_file())
            elif node.module.startswith("moderator."):
                names.add(node.module.split(".")[1])
    return names


def import_graph() -> dict[str, set[str]]:
    """Runtime module → the runtime modules it imports (the package itself left out)."""
    modules = {p.stem: p for p in RUNTIME.glob("*.py") if p.stem != "__init__"}
    return {name: runtime_imports(path) - {"__init__"} for name, path in modules.items()}


def longest_chain(graph: Mapping[str, set[str]]) -> list[str]:
    """The longest chain of modules each importing the next; raises ValueError on a cycle."""

    @functools.cache
    def chain(module: str, seen: frozenset[str] = frozenset()) -> tuple[str, ...]:
        if module in seen:
            raise ValueError(f"import cycle through {module}")
        below = [chain(m, seen | {module}) for m in sorted(graph.get(module, ()))]
        return (module, *max(below, key=len, default=()))

    return list(max((chain(m) for m in sorted(graph)), key=len))


def formatter_escapes() -> dict[str, int]:
    counts = {p.name: p.read_text().count("# fmt: skip") for p in RUNTIME.glob("*.py")}
    return {name: n for name, n in counts.items() if n}


def test_runtime_modules_import_one_another_at_most_a_few_floors_deep_and_never_in_a_cycle() -> (
    None
):
    chain = longest_chain(import_graph())
    assert len(chain) <= MAX_IMPORT_DEPTH, " -> ".join(chain)


def test_the_import_checks_see_a_cycle_and_every_kind_of_import() -> None:
    with pytest.raises(ValueError, match="cycle"):
        longest_chain({"a": {"b"}, "b": {"c"}, "c": {"a"}})
    assert longest_chain({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == ["a", "b", "c"]
    assert {"logs", "loop", "policy_admin"} <= runtime_imports(RUNTIME / "cli.py")  # the package's
    assert "workers" in runtime_imports(RUNTIME / "cli.py")  # inside a function


def test_the_package_escapes_the_formatter_only_a_few_times() -> None:
    escapes = formatter_escapes()
    assert sum(escapes.values()) <= MAX_FORMATTER_ESCAPES, escapes


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
