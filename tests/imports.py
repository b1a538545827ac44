"""A package's import graph, read from its source (no module is imported): what the layout tests
of the runtime (tests/unit/test_layout.py) and of the model builder (test_models_layout.py) hold
to their floors. Every import counts, a function's lazy one too."""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Mapping
from pathlib import Path


def module_files(package: Path) -> dict[str, Path]:
    """`package.x.y` → its file, for every module and subpackage (not walking into a `build/`
    folder, git-ignored output that can hold a whole environment's packages)."""
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(package):
        dirs[:] = [d for d in dirs if d not in ("build", "__pycache__")]
        for path in (Path(folder) / f for f in files if f.endswith(".py")):
            parts = path.relative_to(package.parent).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` imports, anywhere in it; the package itself
    (`from moderator import __version__`) is left out."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets.update(f"{node.module}.{alias.name}" for alias in node.names)
    root = name.split(".")[0]
    resolved: set[str] = set()
    for target in targets:
        while target and target not in known:  # `from moderator.kafka.ledger import Entry`
            target = target.rpartition(".")[0]
        if target and target not in (name, root):
            resolved.add(target)
    return resolved


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module → the modules of the same package it imports."""
    files = module_files(package)
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def cycle(graph: Mapping[str, set[str]]) -> list[str]:
    """One import cycle of `graph` as [a, b, ..., a], or [] when there is none."""
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


def upward(graph: Mapping[str, set[str]], floor_of: Callable[[str], int | None]) -> list[str]:
    """Every import of a module from a floor above the importer's, as `importer -> imported`."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if (low := floor_of(module)) is not None
        and (high := floor_of(target)) is not None
        and high > low
    )
