"""Names as architecture: a module's `_private` names stay in it, and one idea has one name in
the runtime (issue 38: two `Verdict`s, three `parse_verdict`s, two `Producer`s once)."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("moderator", "console", "models", "devstack", "loadgen", "bench", "chaos")
# Defined by every module that adds a command (the `register(sub)` convention of the CLI), and
# policy_admin's read_state: compacted.read_state with the policies' book, one idea at two floors.
CONVENTIONS = {"register", "read_state"}
# Names the issue found defined more than once; none may be defined twice in the runtime and the
# console together (the console reuses the runtime's).
ONCE = {"Verdict", "Ruling", "Producer", "Sender", "Stoppable", "parse_verdict", "VERDICTS"}


def sources(*packages: str) -> dict[str, Path]:
    """Dotted module name -> path, of every module in `packages` (build outputs left out)."""
    out: dict[str, Path] = {}
    for package in packages:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if "build" not in parts:
                out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def package_of(module: str, path: Path) -> str:
    """The package a relative import in `module` starts from."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reads(module: str, tree: ast.AST, modules: set[str], package: str) -> list[str]:
    """Every `from X import _name` and `X._name` in `tree` (`module`, in `package`) where X is
    another of `modules`."""
    aliases: dict[str, str] = {}  # local name -> the project module it is bound to
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                bound = a.name if a.asname else a.name.split(".")[0]
                aliases[a.asname or bound] = bound
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for a in node.names:
                if f"{base}.{a.name}" in modules:
                    aliases[a.asname or a.name] = f"{base}.{a.name}"
                elif is_private(a.name) and base in modules and base != module:
                    found.append(f"{module}:{node.lineno} from {base} import {a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in aliases:
                target = ".".join([aliases[value.id], *chain])
                if target in modules and target != module:
                    found.append(f"{module}:{node.lineno} {target}.{node.attr}")
    return found


def top_level_names(path: Path, *, assigned: bool) -> Iterator[str]:
    """The classes and functions `path` defines at its top level (and its assigned names)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name
        elif assigned and isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            yield from (t.id for t in targets if isinstance(t, ast.Name))


def definitions(*packages: str, assigned: bool = False) -> dict[str, list[str]]:
    """Public top-level name -> the modules of `packages` defining it."""
    where: dict[str, list[str]] = defaultdict(list)
    for module, path in sources(*packages).items():
        for name in top_level_names(path, assigned=assigned):
            if not is_private(name) and not name.startswith("__"):
                where[name].append(module)
    return where


def test_no_module_reads_another_modules_private_name() -> None:
    found = sources(*PACKAGES)
    reads = [
        read
        for module, path in found.items()
        for read in private_reads(
            module, ast.parse(path.read_text()), set(found), package_of(module, path)
        )
    ]
    assert reads == []


def test_the_private_name_check_sees_imports_and_attribute_reads() -> None:
    modules = {"pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c"}
    code = (
        "from pkg.a import _hidden, shown\n"
        "from pkg import b\n"
        "import pkg.sub.c as c\n"
        "from .. import a\n"
        "def f():\n"
        "    return b._table, c._GARAK[1], a._fill(), b.public, shown._x, _own\n"
    )
    assert private_reads("pkg.sub.d", ast.parse(code), modules, "pkg.sub") == [
        "pkg.sub.d:1 from pkg.a import _hidden",
        "pkg.sub.d:6 pkg.b._table",
        "pkg.sub.d:6 pkg.sub.c._GARAK",
        "pkg.sub.d:6 pkg.a._fill",
    ]
    own = ast.parse("from pkg import a\na._self_read\n")
    assert private_reads("pkg.a", own, modules, "pkg") == []


def test_a_runtime_class_or_function_is_defined_in_one_module() -> None:
    twice = {
        name: modules
        for name, modules in definitions("moderator").items()
        if len(modules) > 1 and name not in CONVENTIONS
    }
    assert twice == {}


def test_the_console_reuses_the_runtimes_verdict_parser_and_types() -> None:
    where = definitions("moderator", "console", assigned=True)
    assert {name: where[name] for name in ONCE if len(where.get(name, [])) > 1} == {}
    assert "parse_verdict" in where  # the check looks where the names are
