"""The runtime package stands alone: the dev stack, the harnesses and the model builder stay out,
of its imports and of its distribution (chat-moderator); the dev tools are the second
distribution (chat-moderator-tools, tools/pyproject.toml). Inside, the runtime stands on floors:
the base, the wings that follow a message's path (kafka/, policy/, decide/, users/, review/, then
the operators' admin/), and the pipeline and the commands on top; a module imports only from its
own floor or the ones below, never in a cycle, a function's imports included."""

from __future__ import annotations

import ast
import configparser
import email.parser
import functools
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import moderator
from moderator.cli import main
from tests.imports import cycle, import_graph, imports_of, module_files, upward

RUNTIME = Path(moderator.__file__).parent
REPO = RUNTIME.parent
OUTSIDE = ("devstack", "loadgen", "models", "bench", "chaos", "tests")
# The runtime by floors, bottom first: a module imports only from its own floor or the floors
# below it. A module in a wing (a subpackage, named here) stands on its wing's floor; the modules
# at the top of moderator/ are named here one by one, so a new module's room is a choice.
BASE = (  # below every wing: errors, records, settings, logging, the loop, tasks, metrics
    *("errors", "normalize", "records", "config", "redaction", "logs", "loop", "tasks", "threads"),
    *("turns", "metric_families", "metric_wings", "metric_models", "metrics", "commandline"),
)
FLOORS = (
    BASE,
    ("kafka",),  # the broker's side: clients, topics, the input's intake, the publisher
    ("policy",),  # what a policy says, and which policy decides a channel
    ("decide",),  # a text to the policy's ruling: the model, the score cache, the screen
    ("users",),  # escalation by user, and the users' state
    ("review",),  # held messages, verdicts, final decisions, overrides, the audit trail
    ("shadow",),  # a candidate model scoring beside the primary, compared with it
    ("admin",),  # the operators' commands beside `moderator run`
    ("pipeline", "service", "workers", "cli", "__main__"),  # the one place that orders the wings
)
FLOOR = {name: floor for floor, names in enumerate(FLOORS) for name in names}
# Modules on the longest chain of one floor's modules importing one another: 3 in the base and in
# every wing, 4 on the top floor (`__main__` -> cli -> service -> pipeline). A wing with a chain of
# 5 has grown floors of its own and wants splitting in two.
MAX_FLOOR_DEPTH = 4
MAX_FORMATTER_ESCAPES = 10
TOOLS = ("console", "devstack", "loadgen", "models")  # the dev-tools distribution's packages
RUNTIME_COMMANDS = {"run", "score", "policy", "override", "verdicts", "rollout"}
# What a copy of the checkout for a wheel build leaves out: VCS, venvs, build outputs, caches.
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", "build", "mutants", "node_modules", "__pycache__", "*.egg-info", ".*_cache"
)


def imported(path: Path) -> set[str]:
    """Top-level names of every module `path` imports (lazily or not)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def floor_of(module: str) -> int | None:
    parts = module.split(".")
    return FLOOR.get(parts[1]) if len(parts) > 1 else None


def longest_chain_within_a_floor(graph: Mapping[str, set[str]]) -> list[str]:
    """The longest chain of modules of one floor each importing the next; raises ValueError on a
    cycle."""

    @functools.cache
    def chain(module: str, seen: frozenset[str] = frozenset()) -> tuple[str, ...]:
        if module in seen:
            raise ValueError(f"import cycle through {module}")
        same = [t for t in sorted(graph.get(module, ())) if floor_of(t) == floor_of(module)]
        return (module, *max((chain(t, seen | {module}) for t in same), key=len, default=()))

    return list(max((chain(m) for m in sorted(graph)), key=len, default=()))


def runtime_files() -> dict[str, Path]:
    return module_files(RUNTIME)


@functools.cache
def graph() -> dict[str, set[str]]:
    return import_graph(RUNTIME)


def formatter_escapes() -> dict[str, int]:
    counts = {
        p.relative_to(RUNTIME).as_posix(): p.read_text().count("# fmt: skip")
        for p in RUNTIME.rglob("*.py")
    }
    return {name: n for name, n in counts.items() if n}


def test_every_runtime_module_stands_on_a_declared_floor() -> None:
    assert sorted(m for m in graph() if m != RUNTIME.name and floor_of(m) is None) == []


def test_the_runtime_modules_import_one_another_in_no_cycle() -> None:
    assert cycle(graph()) == []


def test_no_runtime_module_imports_from_a_wing_above_its_own() -> None:
    assert upward(graph(), floor_of) == []


def test_each_floors_modules_import_one_another_at_most_a_few_deep() -> None:
    chain = longest_chain_within_a_floor(graph())
    assert len(chain) <= MAX_FLOOR_DEPTH, " -> ".join(chain)


def test_each_wing_is_a_subpackage_that_says_what_it_owns_and_imports_nothing() -> None:
    """Importing one module of a wing loads that module's imports, not the whole wing."""
    wings = {p.parent.name: p for p in RUNTIME.glob("*/__init__.py")}
    assert {name for name in FLOOR if (RUNTIME / name).is_dir()} == set(wings)
    trees = {name: ast.parse(path.read_text()) for name, path in wings.items()}
    assert [name for name, tree in trees.items() if not ast.get_docstring(tree)] == []
    assert [name for name, tree in trees.items() if len(tree.body) != 1] == []


def test_the_checks_see_a_cycle_an_upward_import_and_a_lazy_one(tmp_path: Path) -> None:
    package = tmp_path / RUNTIME.name
    for wing in ("kafka", "review"):
        (package / wing).mkdir(parents=True)
        (package / wing / "__init__.py").write_text('"""A wing."""\n')
    (package / "__init__.py").write_text('__version__ = "0"\n')
    (package / "errors.py").write_text("from moderator import __version__\n")
    (package / "kafka" / "ledger.py").write_text(
        "def f():\n    from moderator.kafka import intake\n"
    )
    (package / "kafka" / "intake.py").write_text("from moderator.kafka.ledger import f\n")
    (package / "review" / "held.py").write_text("from moderator.kafka import ledger\n")
    found = import_graph(package)
    assert found["moderator.errors"] == set()  # the package itself
    assert found["moderator.review.held"] == {"moderator.kafka.ledger"}
    assert found["moderator.kafka.ledger"] == {"moderator.kafka.intake"}  # inside a function
    assert cycle(found) in (
        ["moderator.kafka.intake", "moderator.kafka.ledger", "moderator.kafka.intake"],
        ["moderator.kafka.ledger", "moderator.kafka.intake", "moderator.kafka.ledger"],
    )
    assert upward(found, floor_of) == []
    found["moderator.kafka.intake"] = {"moderator.review.held"}
    assert upward(found, floor_of) == ["moderator.kafka.intake -> moderator.review.held"]
    found = {"moderator.kafka.a": {"moderator.kafka.b"}, "moderator.kafka.b": {"moderator.errors"}}
    assert longest_chain_within_a_floor(found) == ["moderator.kafka.a", "moderator.kafka.b"]
    found["moderator.kafka.b"] = {"moderator.kafka.a"}
    with pytest.raises(ValueError, match="cycle"):
        longest_chain_within_a_floor(found)
    cli = imports_of("moderator.cli", RUNTIME / "cli.py", set(graph()))
    assert {"moderator.logs", "moderator.admin.policy_admin"} <= cli  # `from moderator import`
    assert "moderator.workers" in cli  # inside a function


def test_the_package_escapes_the_formatter_only_a_few_times() -> None:
    escapes = formatter_escapes()
    assert sum(escapes.values()) <= MAX_FORMATTER_ESCAPES, escapes


def test_no_runtime_module_imports_dev_or_harness_code() -> None:
    offenders = {
        name: sorted(imported(path) & set(OUTSIDE)) for name, path in runtime_files().items()
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_importing_every_runtime_module_loads_nothing_from_outside() -> None:
    code = (
        "import importlib, pkgutil, sys, moderator\n"
        "for m in pkgutil.walk_packages(moderator.__path__, 'moderator.'):\n"
        "    if m.name != 'moderator.__main__':\n"
        "        importlib.import_module(m.name)\n"
        f"print(sorted({{n for n in sys.modules if n.split('.')[0] in {OUTSIDE!r}}}))\n"
        "print(len([n for n in sys.modules if n.startswith('moderator.')]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    outside, imported_count = out.stdout.split()
    assert outside == "[]"
    assert int(imported_count) == len(runtime_files()) - 2  # all but the package and __main__


def test_no_runtime_module_is_over_350_lines() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in runtime_files().items()}
    assert {name: n for name, n in sizes.items() if n > 350} == {}


def function_lines(path: Path) -> dict[str, int]:
    """`wing.module.function` (methods and nested functions too) → its lines, `def` to last
    line."""
    module = ".".join(path.relative_to(RUNTIME).with_suffix("").parts)
    return {
        f"{module}.{node.name}:{node.lineno}": node.end_lineno - node.lineno + 1
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno
    }


def test_no_runtime_function_is_over_60_lines() -> None:
    lines = {k: n for path in RUNTIME.rglob("*.py") for k, n in function_lines(path).items()}
    assert any(name.startswith("pipeline.process:") for name in lines), "async methods count"
    assert any(name.startswith("kafka.ledger.") for name in lines), "the wings' functions count"
    assert {name: n for name, n in lines.items() if n > 60} == {}


def commands(help_text: str) -> set[str]:
    """The subcommands `moderator --help` lists (argparse indents each by four spaces)."""
    return set(re.findall(r"^    (\S+)", help_text, flags=re.MULTILINE))


def test_dev_demo_model_and_console_reach_the_cli_through_entry_points(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    assert commands(capsys.readouterr().out) == RUNTIME_COMMANDS | {
        "console",
        "dev",
        "demo",
        "model",
    }


# -- the two distributions --------------------------------------------------------------------


def pyproject(folder: Path) -> dict[str, Any]:
    return tomllib.loads((folder / "pyproject.toml").read_text())


class Wheel:
    """A built wheel, read: its files, metadata and entry points."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with zipfile.ZipFile(path) as zf:
            self.files = [name for name in zf.namelist() if not name.endswith("/")]
            self.dist_info = next(n.split("/")[0] for n in self.files if ".dist-info/" in n)
            meta = zf.read(f"{self.dist_info}/METADATA").decode()
            eps = zf.read(f"{self.dist_info}/entry_points.txt").decode()
        self.metadata = email.parser.Parser().parsestr(meta)
        parser = configparser.ConfigParser(delimiters=("=",))
        parser.optionxform = str  # type: ignore[assignment,method-assign]  # names keep their case
        parser.read_string(eps)
        self.entry_points = {group: set(parser[group]) for group in parser.sections()}

    def top_level(self) -> set[str]:
        return {name.split("/")[0] for name in self.files}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Wheel]:
    """Both distributions built as `pip wheel` builds them, from a copy of the checkout: setuptools
    builds in place, and a build/ left by an earlier build could slip stale files in. The build
    backend is this environment's (the test extra's setuptools, checked against build-system):
    no package index needed."""
    tmp = tmp_path_factory.mktemp("wheels")
    src, out = tmp / "src", tmp / "dist"
    shutil.copytree(REPO, src, ignore=NOT_SOURCES)
    offline = ("--no-build-isolation", "--check-build-dependencies")
    pip_wheel = (sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", *offline)
    built = subprocess.run(
        [*pip_wheel, "--wheel-dir", str(out), str(src), str(src / "tools")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    found = [Wheel(path) for path in out.glob("*.whl")]
    return {wheel.metadata["Name"]: wheel for wheel in found}


def test_the_runtime_wheel_holds_the_runtime_package_only(wheels: dict[str, Wheel]) -> None:
    wheel = wheels[pyproject(REPO)["project"]["name"]]
    assert wheel.top_level() == {"moderator", wheel.dist_info}
    shipped = set(wheel.files)
    checkout = {
        path.relative_to(REPO).as_posix()
        for path in RUNTIME.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert checkout - shipped == set()  # the modules, the model, the schemas, the term list
    assert wheel.entry_points == {"console_scripts": {"moderator"}}  # no plugin, no loadgen
    assert wheel.metadata.get_all("Provides-Extra") is None  # extras are the tools' (below)


def test_the_tools_wheel_holds_the_dev_tools_and_their_data(wheels: dict[str, Wheel]) -> None:
    runtime = wheels[pyproject(REPO)["project"]["name"]]
    wheel = wheels[pyproject(REPO / "tools")["project"]["name"]]
    assert wheel.top_level() == {*TOOLS, wheel.dist_info}
    checkout = {
        path.relative_to(REPO).as_posix()
        for package in TOOLS
        for pattern in (
            "*.py",
            "data/*.*",
            "data/*/*.*",
            "data/*/*/*",
            "corpus/*",
            "static/*",
            "py.typed",
        )
        for path in (REPO / package).glob(pattern)
    }
    assert any(name.startswith("models/data/") for name in checkout)  # the training data
    assert checkout - set(wheel.files) == set()
    assert wheel.entry_points == {
        "console_scripts": {"loadgen"},
        "moderator.commands": {
            "console",
            "devstack",
            "models",
        },  # `console`; `dev`, `demo`; `model`
    }
    # Released together: the same version, and the tools need exactly that runtime.
    version = runtime.metadata["Version"]
    assert wheel.metadata["Version"] == version
    pins = [Requirement(r) for r in wheel.metadata.get_all("Requires-Dist") or ()]
    assert [str(r.specifier) for r in pins if r.name == runtime.metadata["Name"]] == [
        f"=={version}"
    ]


def runtime_only_site(wheel: Wheel, site: Path) -> None:
    """`site`: the runtime wheel unpacked, and linked from this environment the distributions it
    needs (transitively): what `pip install chat-moderator` puts into a fresh environment."""
    with zipfile.ZipFile(wheel.path) as zf:
        zf.extractall(site)
    todo = list(wheel.metadata.get_all("Requires-Dist") or ())
    seen: set[str] = set()
    while todo:
        requirement = Requirement(todo.pop())
        name = canonicalize_name(requirement.name)
        if name in seen or not (
            requirement.marker is None or requirement.marker.evaluate({"extra": ""})
        ):
            continue
        seen.add(name)
        dist = importlib.metadata.distribution(name)
        assert dist.files is not None, f"{name}: no RECORD"
        for top in {f.parts[0] for f in dist.files} - {"..", "__pycache__"}:
            if not (site / top).exists():
                (site / top).symlink_to(Path(str(dist.locate_file(top))))
        todo.extend(dist.requires or ())


def test_moderator_without_the_dev_tools_lists_only_what_it_can_run(
    wheels: dict[str, Wheel], tmp_path: Path
) -> None:
    runtime_only_site(wheels[pyproject(REPO)["project"]["name"]], tmp_path / "site")
    # -I -S: no site-packages, no PYTHONPATH, not the checkout: the runtime and its dependencies.
    code = (
        f"import importlib.util, sys; sys.path.append({str(tmp_path / 'site')!r})\n"
        f"print([n for n in {TOOLS!r} if importlib.util.find_spec(n)], file=sys.stderr)\n"
        "from importlib.metadata import entry_points\n"
        "(script,) = entry_points(group='console_scripts', name='moderator')\n"
        "sys.argv = ['moderator', '--help']\n"
        "script.load()()\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "[]\n")
    assert commands(done.stdout) == RUNTIME_COMMANDS


def test_the_runtime_declares_exactly_the_third_party_modules_it_imports() -> None:
    modules = set().union(*(imported(path) for path in RUNTIME.rglob("*.py")))
    third_party = modules - set(sys.stdlib_module_names) - {"moderator"}
    providers = importlib.metadata.packages_distributions()
    needed = {
        canonicalize_name(dist)
        for module in third_party
        for dist in providers.get(module, [module])
    }
    declared = {
        canonicalize_name(Requirement(r).name) for r in pyproject(REPO)["project"]["dependencies"]
    }
    assert needed == declared


def copied(dockerfile: Path) -> set[str]:
    """The build-context paths a Dockerfile's COPY instructions read (not `COPY --from`)."""
    sources: set[str] = set()
    for line in dockerfile.read_text().replace("\\\n", " ").splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources.update(w.rstrip("/") for w in words[1:-1] if not w.startswith("--"))
    return sources


def test_the_production_image_gets_the_runtime_and_the_loadgen_image_the_tools() -> None:
    tools = {
        (REPO / "tools" / folder).resolve().relative_to(REPO).as_posix()
        for folder in pyproject(REPO / "tools")["tool"]["setuptools"]["package-dir"].values()
    }
    assert tools == set(TOOLS)
    production = copied(REPO / "deploy" / "Dockerfile")
    assert "moderator" in production
    assert production & (tools | {"tools"}) == set()
    assert tools | {"tools", "moderator"} <= copied(REPO / "deploy" / "loadgen.Dockerfile")
    compose = yaml.safe_load((REPO / "deploy" / "compose.yaml").read_text())
    assert compose["services"]["loadgen"]["build"]["dockerfile"] == "deploy/loadgen.Dockerfile"


def test_make_test_runs_every_test_module_unit_tests_first() -> None:
    makefile = (REPO / "Makefile").read_text()
    recipes = re.findall(r"^(test-unit|test):.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    layers = [m for _, recipe in recipes for m in re.findall(r"\$\(BIN\)/pytest (\S+)", recipe)]
    assert layers == ["tests/unit", "tests/integration"]
    modules = [*REPO.glob("tests/**/test_*.py"), *REPO.glob("tests/**/*_test.py")]
    assert modules
    outside = [
        path for path in modules if not any(path.is_relative_to(REPO / layer) for layer in layers)
    ]
    assert outside == []
