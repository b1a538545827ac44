"""`make mutation`: mutmut over the modules that hold a decision or delivery rule, a score each.

The modules are named once, in the Makefile (`MUTATION_MODULES`), and passed here as paths; this
script hands them to mutmut as its `only_mutate` (so pyproject.toml's `[tool.mutmut]` does not
list them a second time: it holds the unit tests run against each mutant and the data they read).
It prints the surviving mutants (`.venv/bin/mutmut show NAME` prints one), then one line per module,
`killed/total` and the percentage, then the total. It exits 1 when a module kills fewer than
`--floor` percent of its mutants, naming those modules, so the target states the bar rather than
leaving it to whoever reads the figure.

A mutant no selected test runs ("no tests") counts as survived: code only the broker's
integration tests reach (the aiokafka calls of kafka/intake.py, say) is part of the figure, not
left out of it. (The Lua sent to Redis is reached: two Redis-only integration files are selected.)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

KILLED = ("killed", "timeout")  # a mutant that hangs the tests is caught too (pytest-timeout)


@dataclass(frozen=True)
class Score:
    """One module's mutants: how many, and which survived."""

    module: str
    statuses: dict[str, str]  # mutant name -> mutmut's status

    @property
    def total(self) -> int:
        return len(self.statuses)

    @property
    def survivors(self) -> tuple[str, ...]:
        return tuple(sorted(n for n, s in self.statuses.items() if s not in KILLED))

    @property
    def killed(self) -> int:
        return self.total - len(self.survivors)

    @property
    def percent(self) -> float:
        return 100 * self.killed / self.total if self.total else 0.0


def dotted(path: str) -> str:
    """`moderator/kafka/ledger.py` -> `moderator.kafka.ledger`, the prefix of its mutants' names."""
    return str(Path(path).with_suffix("")).replace("/", ".")


def scores(paths: Sequence[str], statuses: dict[str, str]) -> list[Score]:
    """Each module's score, from mutant name -> status (`mutmut results --all true`)."""
    found = []
    for path in paths:
        prefix = dotted(path) + "."
        found.append(Score(path, {n: s for n, s in statuses.items() if n.startswith(prefix)}))
    return found


def statuses(results: str) -> dict[str, str]:
    """Mutant name -> status, from the lines `mutmut results --all true` prints."""
    found = {}
    for line in results.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep:
            found[name] = status
    return found


def report(found: Iterable[Score], floor: float) -> list[str]:
    """The lines printed: the survivors, one line per module (under the floor marked), the total."""
    found = list(found)
    lines = []
    survivors = [f"{name}: {score.statuses[name]}" for score in found for name in score.survivors]
    if survivors:
        lines.append(
            f"surviving mutants ({len(survivors)}; `.venv/bin/mutmut show NAME` shows one):"
        )
        lines.extend(f"  {name}" for name in survivors)
    width = max(len(score.module) for score in found)
    for score in found:
        mark = "" if score.percent >= floor else f"  < {floor:g}%"
        figure = f"{score.killed:>4}/{score.total:<4} {score.percent:5.1f}%"
        lines.append(f"{score.module:<{width}}  {figure}{mark}")
    killed = sum(score.killed for score in found)
    total = sum(score.total for score in found)
    lines.append(f"mutation score: {killed}/{total} killed ({100 * killed / total:.1f}%)")
    return lines


def mutmut(paths: Sequence[str], *args: str) -> int:
    """Run one mutmut command in this process, mutating only `paths`; its exit code.

    In this process because mutmut reads `only_mutate` from pyproject.toml alone; its
    configuration object is set here instead, and the workers it forks inherit it.
    """
    from mutmut.__main__ import cli
    from mutmut.configuration import config

    config().only_mutate = list(paths)
    try:
        cli.main(list(args), prog_name="mutmut", standalone_mode=False)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__)
    parser.add_argument("modules", nargs="+", help="the modules to mutate, as paths")
    parser.add_argument("--floor", type=float, default=90.0, help="percent killed, per module")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep mutants/ and the results in it; run only the mutants not yet run",
    )
    args = parser.parse_args(argv)
    missing = [path for path in args.modules if not Path(path).is_file()]
    if missing:
        parser.error(f"no such module: {', '.join(missing)}")
    if not args.resume:
        # mutmut keeps results (and skips a module whose copy in mutants/ is newer than its
        # source, even one newly listed): a fresh figure starts from nothing.
        shutil.rmtree("mutants", ignore_errors=True)
    code = mutmut(args.modules, "run")
    if code != 0:
        print(f"mutmut run failed (exit {code})", file=sys.stderr)
        return code
    found = scores(args.modules, results(args.modules))
    survived = [
        name for score in found for name in score.survivors if score.statuses[name] == "survived"
    ]
    if survived:
        # Each survivor once more, alone: a bulk run has recorded a mutant as surviving that the
        # same tests kill when it is run by name (mutmut 3.8.1, a loaded machine).
        mutmut(args.modules, "run", *survived)
        found = scores(args.modules, results(args.modules))
    empty = [score.module for score in found if not score.total]
    if empty:
        print(f"mutmut reported no mutants of {', '.join(empty)}", file=sys.stderr)
        return 1
    print("\n".join(report(found, args.floor)))
    under = [score.module for score in found if score.percent < args.floor]
    if under:
        print(f"under {args.floor:g}% killed: {', '.join(under)}", file=sys.stderr)
        return 1
    return 0


def results(paths: Sequence[str]) -> dict[str, str]:
    """Mutant name -> status, of every mutant of `paths`."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        mutmut(paths, "results", "--all", "true")
    return statuses(out.getvalue())


if __name__ == "__main__":
    raise SystemExit(main())
