"""The runtime package stands alone: the dev stack, the harnesses and the model builder stay out,
of its imports and of its distribution (chat-moderator); the dev tools are the second
distribution (chat-moderator-tools, tools/pyproject.toml)."""

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

RUNTIME = Path(moderator.__file__).parent
REPO = RUNTIME.parent
OUTSIDE = ("devstack", "loadgen", "models", "bench", "chaos", "tests")
MAX_IMPORT_DEPTH = 8  # modules on the longest chain of runtime modules importing one another
MAX_FORMATTER_ESCAPES = 10
TOOLS = ("console", "devstack", "loadgen", "models")  # the dev-tools distribution's packages
RUNTIME_COMMANDS = {"run", "score", "policy", "override", "verdicts"}
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


def test_no_runtime_module_is_over_350_lines() -> None:
    sizes = {path.name: len(path.read_text().splitlines()) for path in RUNTIME.glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 350} == {}


def function_lines(path: Path) -> dict[str, int]:
    """`module.function` (methods and nested functions too) → its lines, `def` to last line."""
    return {
        f"{path.stem}.{node.name}:{node.lineno}": node.end_lineno - node.lineno + 1
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno
    }


def test_no_runtime_function_is_over_60_lines() -> None:
    lines = {k: n for path in RUNTIME.glob("*.py") for k, n in function_lines(path).items()}
    assert any(name.startswith("pipeline.process:") for name in lines), "async methods count"
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
        for pattern in ("*.py", "data/*", "corpus/*", "static/*", "py.typed")
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
