"""The model builder stands in layers, each importing only the ones below it and never in a
circle: the files the build reads, the lines made of them, training, export and quantization,
evaluation, the reports, and the command line on top. Every import counts, a function's too."""

from __future__ import annotations

import ast
import functools
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

import models

PACKAGE = Path(models.__file__).parent
REPO = PACKAGE.parent
# Bottom first. A module's layer is its first name under `models`; a new module (or subpackage)
# has to be placed here, so its room is a choice, not an accident.
LAYERS = (
    ("files",),  # where the build's files live, their sha256
    ("sources",),  # pinned PyPI archives, labelled research snapshots
    ("lines",),  # the template corpus, real lines and their splits, the teachers' targets
    ("training",),
    ("export",),  # ONNX graphs, int8, model directories, shipping one
    ("evaluation",),  # what a model decides on held-out and real lines; the policy tuned on them
    ("reports",),  # REPORT.md, DATA.md and the other generated documents
    ("subcommands", "cli", "commands", "__main__"),  # `moderator model`, `python -m models`
)
LAYER = {name: floor for floor, names in enumerate(LAYERS) for name in names}


def module_files(package: Path = PACKAGE) -> dict[str, Path]:
    """`models.x.y` → its file, for every module and subpackage (not walking into models/build/,
    the git-ignored build output, which can hold a whole environment's packages)."""
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(package):
        dirs[:] = [d for d in dirs if d not in ("build", "__pycache__")]
        for path in (Path(folder) / f for f in files if f.endswith(".py")):
            parts = path.relative_to(package.parent).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `name` imports, anywhere in it (a function's imports too)."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets.update(f"{node.module}.{alias.name}" for alias in node.names)
    resolved: set[str] = set()
    for target in targets:
        while target and target not in known:  # `from models.lines.corpus import LABELS`
            target = target.rpartition(".")[0]
        if target and target != name and target != "models":
            resolved.add(target)
    return resolved


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    files = module_files(package)
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def cycle(graph: Mapping[str, set[str]]) -> list[str]:
    """One import circle of `graph` as [a, b, ..., a], or [] when there is none."""
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> list[str]:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return []
        for nxt in sorted(graph.get(node, ())):
            if found := visit(nxt, (*path, node)):
                return found
        done.add(node)
        return []

    for start in sorted(graph):
        if found := visit(start, ()):
            return found
    return []


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    return LAYER.get(parts[1]) if len(parts) > 1 else None


def upward(graph: Mapping[str, set[str]]) -> list[str]:
    """Every import of a module from a layer above its own."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if (low := layer_of(module)) is not None
        and (high := layer_of(target)) is not None
        and high > low
    )


@functools.cache
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_every_model_module_stands_in_a_declared_layer() -> None:
    assert sorted(m for m in graph() if m != "models" and layer_of(m) is None) == []


def test_the_model_modules_import_one_another_in_no_circle() -> None:
    assert cycle(graph()) == []


def test_no_model_module_imports_from_a_layer_above_its_own() -> None:
    assert upward(graph()) == []


def test_each_layer_is_a_subpackage_that_says_what_it_owns() -> None:
    subpackages = {p.parent.name: p for p in PACKAGE.glob("*/__init__.py")}
    assert {name for name in LAYER if (PACKAGE / name).is_dir()} == set(subpackages)
    silent = [
        name for name, p in subpackages.items() if not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert silent == []


def test_the_tools_distribution_lists_every_model_subpackage() -> None:
    """setuptools installs only the packages it is told of: a layer left out of the list would
    be missing from `pip install chat-moderator-tools` while every test in the checkout passes."""
    listed = tomllib.loads((REPO / "tools" / "pyproject.toml").read_text())["tool"]["setuptools"]
    subpackages = {name for name, path in module_files().items() if path.name == "__init__.py"}
    assert subpackages <= set(listed["packages"])


def test_the_checks_see_a_circle_an_upward_import_and_a_lazy_one(tmp_path: Path) -> None:
    package = tmp_path / "models"
    for folder in ("lines", "evaluation"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text('"""A layer."""\n')
    (package / "__init__.py").write_text("")
    (package / "lines" / "corpus.py").write_text("def f():\n    from models.lines import split\n")
    (package / "lines" / "split.py").write_text("from models.lines.corpus import f\n")
    (package / "evaluation" / "judge.py").write_text("from models.lines import corpus\n")
    found = import_graph(package)
    assert found["models.evaluation.judge"] == {"models.lines.corpus"}
    assert cycle(found) in (
        ["models.lines.corpus", "models.lines.split", "models.lines.corpus"],
        ["models.lines.split", "models.lines.corpus", "models.lines.split"],
    )
    assert upward(found) == []
    found["models.lines.corpus"].add("models.evaluation.judge")
    assert upward(found) == ["models.lines.corpus -> models.evaluation.judge"]
