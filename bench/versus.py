"""Old commit against new, paired in one run (issue 42: batches that grow with load):
`python -m bench.versus OLD_TREE`.

OLD_TREE is another checkout of this repository at the commit compared against (for example
`git worktree add --detach ../old 99277fc`); its moderator runs from there (bench/stack.py's
`tree`), on the same broker, interpreter and load generator as this tree's. Arms:

- **old**: OLD_TREE's moderator and its shipped model;
- **new**: this tree's moderator and shipped model;
- **heavy**: this tree's moderator with a stand-in for a model about 2.5x as costly: the
  minilm-l15 speed shape (random weights, MiniLM's width 15 layers deep; multilingual-e5-small
  is that width 12 deep and reads English in ~1.3x the tokens) quantized as the shipped model is
  (bench/artifacts.shipped_like_dir), its CPU per message measured against the shipped model's
  here, one message per call, in alternating rounds;
- **quix**: the Quix Streams peer (bench/quix_peer.py), as in the peer section.

Every moderator runs with the score cache on (L1 and a fresh Redis), the default review context,
and the default policy with every `[users]` rule on at limits the traffic cannot reach (the loop
section's policy), so each message pays for the Redis round trips the batching work merges.
Fixed open-loop rates: old, new and quix in rounds, in order then reversed (bench/pairs.py), for
p50, p99 and CPU per message by role. Goodput: bench/goodput.py's search for old, new and heavy,
each search a round's turn in the same alternating order. Every run is a fresh process, Redis,
topics and group, warmed first.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import quix_peer
from bench.artifacts import BENCH_BUILD_DIR, shipped_like_dir
from bench.cpu import load_average
from bench.goodput import BARE_TEXTS, BUDGET_MS, GoodputPlan, Probe, search, within_budget
from bench.loop import counters as loop_counters
from bench.loop import policy_text, users_table
from bench.model_ab import paired_ms
from bench.pairs import interleaved
from bench.peer import PeerPlan
from bench.peer import measure as peer_measure
from bench.pipeline import latency_run
from bench.record import Record
from bench.stack import PARTITIONS, ModeratorConfig
from bench.texts import bench_texts
from devstack.child import Samples
from loadgen.hop import HopResult, measure_hop
from loadgen.machine import usable_cores
from moderator.config import DEFAULT_MODEL_DIR, REPO_ROOT
from moderator.decide.classifier import Classifier
from moderator.loop import run

log = logging.getLogger("bench.versus")

RATE_ARMS = ("old", "new", "quix")
GOODPUT_ARMS = ("old", "new", "heavy")
HEAVY_SHAPE = "minilm-l15"  # ~2.5x the shipped model a message (e5-small: ~2x)
USERS_LIMIT = 100_000  # messages, strikes or channels no user of a run reaches
RESULTS_FILE = BENCH_BUILD_DIR / "results-versus.json"


@dataclass(frozen=True)
class VersusPlan:
    rates: tuple[float, ...]  # fixed open-loop rates, msgs/s
    pairs: int  # rounds of the arms at each rate, and of the goodput searches
    duration_s: float  # of each fixed-rate run
    goodput: GoodputPlan
    cost_rounds: int  # alternating rounds of the bare models' CPU per message


FULL = VersusPlan((50.0, 100.0, 200.0), 3, 30.0, GoodputPlan(90.0, 30.0, max_probes=10), 3)
QUICK = VersusPlan((50.0,), 1, 4.0, GoodputPlan(40.0, 4.0, max_probes=2), 1)


def commit_of(tree: Path) -> str:
    """The checkout's commit (short), '+' when its tracked files differ from it."""
    git = ["git", "-C", str(tree)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip()  # fmt: skip
    dirty = subprocess.run([*git, "diff", "--quiet", "HEAD"], check=False).returncode != 0
    return (head or "?") + ("+" if dirty else "")


def counters(before: Samples, after: Samples) -> dict[str, Any]:
    """The loop section's counters (Redis round trips by part, held messages, the users' rules)
    and the fetches the new intake counts (the old commit has no such metric: 0)."""
    out = loop_counters(before, after)
    out["fetches"] = after.total("moderator_fetched_batch_size_count") - before.total(
        "moderator_fetched_batch_size_count"
    )
    return out


class Versus:
    """The arms' configurations against one broker, and the runs of the plan."""

    def __init__(self, old_tree: Path, bootstrap: str, broker_pid: int, workdir: Path,
                 threads: int) -> None:  # fmt: skip
        self.bootstrap = bootstrap
        self.broker_pid = broker_pid
        self.threads = threads
        policy = workdir / "policy.toml"
        policy.write_text(policy_text(users_table(USERS_LIMIT, channels=USERS_LIMIT)))
        settings = (("policy", str(policy)),)
        base = ModeratorConfig(DEFAULT_MODEL_DIR, threads=threads, cache=True, settings=settings)
        old_model = old_tree / DEFAULT_MODEL_DIR.relative_to(REPO_ROOT)
        self.configs = {
            "old": dataclasses.replace(base, model_dir=old_model, tree=old_tree.resolve()),
            "new": base,
            "heavy": dataclasses.replace(base, model_dir=shipped_like_dir(HEAVY_SHAPE)),
        }
        self.hop: HopResult = run(measure_hop(bootstrap))

    def fixed(self, arm: str, pair: int, rate: float, duration_s: float) -> dict[str, Any]:
        """One open-loop run of `arm` at `rate`."""
        if arm == "quix":
            row = peer_measure("quix", pair, rate, self.bootstrap, DEFAULT_MODEL_DIR,
                               PeerPlan((), 1, duration_s), self.hop, threads=self.threads,
                               broker_pid=self.broker_pid)  # fmt: skip
        else:
            row = latency_run(self.bootstrap, self.configs[arm], rate, duration_s, self.hop,
                              f"vs-{arm}{pair}-{int(rate)}", broker_pid=self.broker_pid,
                              counters=counters)  # fmt: skip
        row.update(arm=arm, pair=pair, loadavg=load_average())
        return row

    def goodput(self, arm: str, pair: int, plan: GoodputPlan) -> dict[str, Any]:
        """bench/goodput.py's search for `arm`: every probe a fresh run of plan.duration_s."""
        tried = 0

        def probe(rate: float) -> Probe:
            nonlocal tried
            row = latency_run(self.bootstrap, self.configs[arm], rate, plan.duration_s, self.hop,
                              f"vs-g{arm}{pair}-{tried}", broker_pid=self.broker_pid,
                              counters=counters)  # fmt: skip
            row["loadavg"] = load_average()
            tried += 1
            ok = within_budget(row)
            log.info("goodput %s (round %d) at %.1f/s: p99 %s ms -> %s", arm, pair, rate,
                     row["p99_ms"], ok)  # fmt: skip
            return Probe(rate, ok, row)

        best, confirmed, probes = search(probe, plan)
        return {"arm": arm, "pair": pair, "goodput": best, "confirmed": confirmed,
                "probes": [dict(p.row, ok=p.ok) for p in probes]}  # fmt: skip


def model_cost(heavy: Path, default: Path, threads: int, rounds: int) -> dict[str, Any]:
    """CPU-ms per message of the shipped model and the stand-in, one message per call, in
    alternating rounds (default, heavy, heavy, default), and the stand-in's ratio."""
    default_ms, heavy_ms, _ = paired_ms(default, heavy, threads, bench_texts(BARE_TEXTS), rounds)
    return {"default_ms": round(default_ms, 3), "heavy_ms": round(heavy_ms, 3),
            "ratio": round(heavy_ms / default_ms, 2), "rounds": rounds,
            "heavy_model": Classifier(heavy, threads=1).info.ident}  # fmt: skip


def run_versus(
    old_tree: Path,
    plan: VersusPlan,
    *,
    threads: int,
    bootstrap: str,
    broker_pid: int,
    save: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """The plan's runs in order; `save` gets the results so far after each one."""
    quix_peer.ensure_site()
    out: dict[str, Any] = {
        "old_commit": commit_of(old_tree), "new_commit": commit_of(REPO_ROOT),
        "threads": threads, "partitions": PARTITIONS, "rates": list(plan.rates),
        "pairs": plan.pairs, "duration_s": plan.duration_s,
        "goodput_plan": dataclasses.asdict(plan.goodput), "budget_ms": BUDGET_MS,
        "heavy_shape": HEAVY_SHAPE, "users_limit": USERS_LIMIT, "runs": [], "searches": [],
    }  # fmt: skip
    out["cost"] = model_cost(shipped_like_dir(HEAVY_SHAPE), DEFAULT_MODEL_DIR, threads,
                             plan.cost_rounds)  # fmt: skip
    save(out)
    with tempfile.TemporaryDirectory(prefix="bench-versus-") as tmp:
        versus = Versus(old_tree, bootstrap, broker_pid, Path(tmp), threads)
        out["hop"] = versus.hop.as_dict()
        for rate in plan.rates:
            for pair, arm in interleaved(plan.pairs, RATE_ARMS):
                out["runs"].append(dict(versus.fixed(arm, pair, rate, plan.duration_s), rate=rate))
                save(out)
        for pair, arm in interleaved(plan.pairs, GOODPUT_ARMS):
            out["searches"].append(versus.goodput(arm, pair, plan.goodput))
            save(out)
    return out


def main(argv: list[str] | None = None) -> int:
    from bench.versus_report import merge_versus

    p = argparse.ArgumentParser(prog="python -m bench.versus", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("old_tree", type=Path, help="a checkout of the commit compared against")
    p.add_argument("--quick", action="store_true", help="a smoke version (one short round)")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "BENCHMARKS.md",
                   help="the report whose section 11 is written (the rest kept)")  # fmt: skip
    p.add_argument("--results", type=Path, default=RESULTS_FILE, help="results JSON")
    p.add_argument("--report-only", action="store_true", help="re-render from --results")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    for name in ("bench", "loadgen"):
        logging.getLogger(name).setLevel(logging.INFO)
    if args.report_only:
        merge_versus(json.loads(args.results.read_text()), args.out)
        print(f"wrote {args.out}")
        return 0
    if not (args.old_tree / "moderator" / "__main__.py").is_file():
        p.error(f"{args.old_tree} is not a checkout of this repository")
    from devstack.embedded import EmbeddedKafka

    threads = min(usable_cores(), 4)
    record = Record(args.results, "versus", threads=threads)

    def save(section: dict[str, Any]) -> None:
        record.save(section)
        merge_versus(record.data, args.out)

    with EmbeddedKafka() as kafka:
        run_versus(args.old_tree, QUICK if args.quick else FULL, threads=threads,
                   bootstrap=kafka.bootstrap, broker_pid=kafka.pid or 0, save=save)  # fmt: skip
    record.finish()
    merge_versus(record.data, args.out)
    print(f"wrote {args.out} in {record.data['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
