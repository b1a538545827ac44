"""`make mutation`: run mutmut over the core modules and print the score.

The core is what the README's guarantees rest on: the decision rule (`policy/rules.py`), record
parsing and dead letters (`records.py`, `refusal.py`), the offset ledger (`ledger.py`), the cache
key (`cache_key` in `cache.py`; the rest of that module talks to Redis and is tested against a
real one) and the normaliser (`normalize.py`). mutmut's configuration, and the fast unit tests it
runs against each mutant, are in pyproject.toml (`[tool.mutmut]`). The last line printed is
`mutation score: K/N killed (P%)`; surviving mutants are listed above it (`mutmut show NAME`
prints one).
"""

from __future__ import annotations

import fnmatch
import subprocess
import sys
from pathlib import Path

CORE = (
    "moderator.policy.rules.*",
    "moderator.records.*",
    "moderator.kafka.refusal.*",
    "moderator.kafka.ledger.*",
    "moderator.normalize.*",
    "moderator.decide.cache.x_cache_key*",
)
KILLED = ("killed", "timeout")  # a mutant that hangs the tests is caught too (pytest-timeout)


def mutmut(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("mutmut")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, check=False)


def statuses(results: str) -> dict[str, str]:
    """Mutant name → status, of the core's mutants, from `mutmut results --all true`."""
    found = {}
    for line in results.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and any(fnmatch.fnmatch(name, pattern) for pattern in CORE):
            found[name] = status
    return found


def main() -> int:
    run = mutmut("run", *CORE)
    if run.returncode != 0:
        sys.stdout.write(run.stdout[-4000:])
        sys.stderr.write(run.stderr[-4000:])
        print(f"mutmut run failed (exit {run.returncode})", file=sys.stderr)
        return run.returncode
    found = statuses(mutmut("results", "--all", "true").stdout)
    if not found:
        print("mutmut reported no mutants of the core", file=sys.stderr)
        return 1
    survivors = sorted(name for name, status in found.items() if status not in KILLED)
    if survivors:
        print(f"surviving mutants ({len(survivors)}; `.venv/bin/mutmut show NAME` shows one):")
        for name in survivors:
            print(f"  {name}: {found[name]}")
    killed = len(found) - len(survivors)
    print(f"mutation score: {killed}/{len(found)} killed ({100 * killed / len(found):.1f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
