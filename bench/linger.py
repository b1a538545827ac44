"""Forced batches (issue 42): what gathering a batch saves the event loop, and what the wait costs
the p99, on this host: `python -m bench.linger [--rate 100] [--rounds 3]`.

The pacer (moderator/kafka/pacing.py) waits only when the budget left after the measured p99 can
afford it, so at the rates a 2-core host keeps inside 50 ms it rarely waits and a fetch brings
about one record. This benchmark pays the wait anyway: an arm raises the budget the pacer reads
(`MODERATOR_BUDGET_MS`) so it always lingers up to its cap, and the report fits the event loop's
cost as a cost a message, a fetch and a broker poll (bench/linger_report.py). Every moderator runs
as in bench/versus.py (cache, review context, every `[users]` rule on), fresh each run, on the
embedded broker; `--merge` writes BENCHMARKS.md's section.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.artifacts import BENCH_BUILD_DIR
from bench.cpu import load_average
from bench.loop import policy_text, users_table
from bench.pairs import interleaved
from bench.pipeline import latency_run
from bench.record import Record
from bench.stack import ModeratorConfig
from bench.versus import USERS_LIMIT, counters
from loadgen.hop import measure_hop
from moderator.config import DEFAULT_MODEL_DIR, REPO_ROOT
from moderator.loop import run

log = logging.getLogger("bench.linger")

RESULTS_FILE = BENCH_BUILD_DIR / "results-linger.json"
FORCED_BUDGET_MS = 1000.0  # far above any p99 here: the pacer always spends its whole cap


def forced(wait_ms: float) -> dict[str, str]:
    """The settings that make the pacer wait its whole cap, `wait_ms`, once a fetch holds one."""
    return {"budget_ms": f"{FORCED_BUDGET_MS:g}", "fetch_linger_max_ms": f"{wait_ms:g}"}


# Each arm's settings beside the shipped ones. The last lets this broker hold a fetch 500 ms
# (fetches of 13-15 records at 100 msgs/s here, few idle polls): the cost with few of either.
ARMS: dict[str, dict[str, str]] = {
    "as shipped": {},
    "wait 20 ms": forced(20.0),
    "wait 40 ms": forced(40.0),
    "fetch wait 500 ms": {"fetch_max_wait_ms": "500"},
}


def measure(bootstrap: str, broker_pid: int, rate: float, rounds: int, duration_s: float,
            save: Callable[[dict[str, Any]], None]) -> dict[str, Any]:  # fmt: skip
    """Every arm `rounds` times at `rate`, in rounds in order then reversed."""
    out: dict[str, Any] = {"rate": rate, "duration_s": duration_s, "rounds": rounds,
                           "forced_budget_ms": FORCED_BUDGET_MS, "arms": ARMS,
                           "runs": []}  # fmt: skip
    hop = run(measure_hop(bootstrap))
    with tempfile.TemporaryDirectory(prefix="bench-linger-") as tmp:
        policy = Path(tmp) / "policy.toml"
        policy.write_text(policy_text(users_table(USERS_LIMIT, channels=USERS_LIMIT)))
        base = ModeratorConfig(DEFAULT_MODEL_DIR, threads=2, cache=True,
                               settings=(("policy", str(policy)),))  # fmt: skip
        for pair, arm in interleaved(rounds, tuple(ARMS)):
            cfg = dataclasses.replace(base, settings=base.settings + tuple(ARMS[arm].items()))
            tag = f"linger{pair}-{len(out['runs'])}"
            row = latency_run(bootstrap, cfg, rate, duration_s, hop, tag, broker_pid=broker_pid,
                              counters=counters)  # fmt: skip
            row.update(arm=arm, pair=pair, rate=rate, loadavg=load_average())
            log.info("%s (round %d): p99 %s ms, event loop %s", arm, pair, row.get("p99_ms"),
                     (row.get("cpu_ms_per_msg") or {}).get("event loop"))  # fmt: skip
            out["runs"].append(row)
            save(out)
    return out


def main(argv: list[str] | None = None) -> int:
    from bench.linger_report import merge_linger

    p = argparse.ArgumentParser(prog="python -m bench.linger", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--rate", type=float, default=100.0, help="open-loop msgs/s (100)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the arms (3)")
    p.add_argument("--duration", type=float, default=30.0, help="seconds a run (30)")
    p.add_argument("--results", type=Path, default=RESULTS_FILE, help="results JSON")
    p.add_argument("--merge", action="store_true", help="write BENCHMARKS.md's section")
    p.add_argument("--report-only", action="store_true", help="re-render from --results")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("bench").setLevel(logging.INFO)
    out_md = REPO_ROOT / "BENCHMARKS.md"
    if args.report_only:
        out_md.write_text(merge_linger(json.loads(args.results.read_text()), out_md.read_text()))
        print(f"wrote {out_md}")
        return 0
    from devstack.embedded import EmbeddedKafka

    record = Record(args.results, "linger")
    with EmbeddedKafka() as kafka:
        measure(kafka.bootstrap, kafka.pid or 0, args.rate, args.rounds, args.duration,
                record.save)  # fmt: skip
    record.finish()
    if args.merge:
        out_md.write_text(merge_linger(record.data, out_md.read_text()))
        print(f"wrote {out_md}")
    print(f"{args.results} in {record.data['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
