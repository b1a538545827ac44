"""`python -m bench [--quick]`: run the benchmark suite and regenerate BENCHMARKS.md.

Sections run in order (terms, ladder, pipeline with memory, spin, scale-up, loop: the moderation
loop's cost, off vs on; peer: the moderator beside a Quix Streams application; goodput; shadow:
the primary with a shadow model off, on and too slow to keep up); after each one
the results are saved (`models/build/bench/results.json`) and the report and plots are written,
so a partial run still leaves a report. `--report-only` re-renders the report from the saved
results.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import functools
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import artifacts, plots, report
from bench.cpu import load_average, other_cpu_hogs
from bench.ladder import RungResult
from bench.memory import memory_from_pipeline
from loadgen.machine import machine_info, machine_label, usable_cores
from moderator.config import REPO_ROOT

log = logging.getLogger("bench")

SECTIONS = ("ladder", "pipeline", "spin", "scaleup", "terms", "loop", "peer", "goodput", "shadow")
KAFKA_SECTIONS = {"pipeline", "spin", "scaleup", "loop", "peer", "goodput", "shadow"}
ALONE = {"loop", "peer", "goodput", "shadow"}  # run the shipped model (shadow: and its own two)
RESULTS_FILE = artifacts.BENCH_BUILD_DIR / "results.json"
SPIN_FALLBACK_RATE = {"distilbert-base": 80.0, "minilm-l6": 200.0}  # without a pipeline run


@dataclass(frozen=True)
class Plan:
    ladder_budget_s: float
    ladder_texts: int
    ladder_backlog: int
    backlog: dict[str, int]  # messages per drain, per shape
    latency_duration_s: float
    scaleup_duration_s: float
    profile: bool
    shapes: tuple[str, ...]  # models the pipeline and scale-up sections run
    loop_pairs: int  # (off, on) pairs of the loop section (the default model)
    peer_rates: tuple[float, ...]  # open-loop rates of the peer section (msgs/s)
    peer_pairs: int  # (moderator, Quix Streams) pairs per rate
    goodput: tuple[float, float, int]  # first probe's rate, seconds per probe, most probes
    shadow: tuple[tuple[float, ...], int, float]  # rates (msgs/s), rounds per rate, seconds a run


FULL = Plan(
    10.0,
    300,
    300,
    {"distilbert-base": 3000, "minilm-l6": 8000},
    15.0,
    12.0,
    True,
    ("distilbert-base", "minilm-l6"),
    3,
    (55.0, 130.0),  # about 10% and 25% of the default model's drain rate on a 2-core host
    2,
    (60.0, 30.0, 12),
    ((50.0, 100.0), 3, 30.0),  # issue 41: >= 3 interleaved rounds at 50 and 100 msgs/s
)
# The smoke version: short time boxes, and only the default model through Kafka.
QUICK = Plan(
    1.5, 120, 120, {"distilbert-base": 500, "minilm-l6": 1500}, 4.0, 4.0, False, ("minilm-l6",),
    2, (55.0,), 1, (40.0, 6.0, 3), ((50.0,), 1, 4.0),
)  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="a ~3-minute smoke version")
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help=f"comma-separated subset of {','.join(SECTIONS)}")  # fmt: skip
    p.add_argument("--out", type=Path, default=REPO_ROOT / "BENCHMARKS.md")
    p.add_argument("--plots", type=Path, default=REPO_ROOT / "bench", help="PNG folder")
    p.add_argument("--results", type=Path, default=RESULTS_FILE, help="results JSON")
    p.add_argument("--threads", type=int, default=None,
                   help="intra-op threads (default: the cores we may use)")  # fmt: skip
    p.add_argument("--no-profile", action="store_true", help="skip the py-spy profile")
    p.add_argument("--report-only", action="store_true", help="re-render from --results")
    p.add_argument("--merge", action="store_true",
                   help="with --sections loop, peer, goodput and/or shadow: replace only those "
                   "sections of "
                   "--out, keeping the rest of the file")  # fmt: skip
    p.add_argument("--peer-rates", default=None,
                   help="comma-separated open-loop rates (msgs/s) of the peer section")  # fmt: skip
    return p


class Bench:
    """One run of the suite: the results so far, and writing them out."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.plan = QUICK if args.quick else FULL
        if getattr(args, "peer_rates", None):
            rates = tuple(float(r) for r in args.peer_rates.split(","))
            self.plan = dataclasses.replace(self.plan, peer_rates=rates)
        self.threads = args.threads or min(usable_cores(), 4)
        self.started = time.monotonic()
        self.results: dict[str, Any] = {
            "started": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "quick": bool(args.quick),
            "machine": machine_info(),
            "machine_label": machine_label(),
            "threads": self.threads,
            "load_before": load_average(),
            "load_note": busy_note(),
        }

    def sample_load(self, section: str) -> None:
        """Record the load average and other busy processes at the end of a section."""
        hogs = other_cpu_hogs()
        self.results.setdefault("load_during", []).append(
            {
                "section": section,
                "loadavg": load_average(),
                "others": hogs,
            }
        )

    def save(self) -> None:
        self.results["duration_s"] = round(time.monotonic() - self.started)
        self.args.results.parent.mkdir(parents=True, exist_ok=True)
        self.args.results.write_text(json.dumps(self.results, indent=1, default=str))
        if self.args.merge and self.args.out.is_file():
            merge_sections(self.results, self.args.out)
        else:
            write_report(self.results, self.args.out, self.args.plots)

    def ladder(self) -> None:
        from bench import ladder
        from bench.texts import bench_texts, repeat_share

        plan = ladder.LadderPlan(self.plan.ladder_budget_s, self.plan.ladder_texts,
                                 self.plan.ladder_backlog)  # fmt: skip
        arts = artifacts.build_all()
        texts = bench_texts(plan.texts)
        repeats = bench_texts(plan.backlog, dup_ratio=0.4)
        section: dict[str, Any] = {
            "texts_note": f"{plan.texts} lines, no repeats; the cache rungs: {plan.backlog} "
            f"lines at dup_ratio 0.4, {repeat_share(repeats):.0%} exact repeats",
            "rungs": {},
        }
        self.results["ladder"] = section
        tok = artifacts.DEFAULT_TOKENIZER
        section["baseline"] = ladder.baseline(texts, plan, self.threads, tok).as_dict()
        for shape in artifacts.SHAPES:
            rows: list[dict[str, Any]] = []
            section["rungs"][shape] = rows
            ladder.climb(
                arts[shape],
                texts,
                repeats,
                plan,
                threads=self.threads,
                tokenizer=tok,
                on_rung=functools.partial(_append_rung, rows),
            )
            self.sample_load(f"ladder {shape}")
            self.save()

    def pipeline(self, bootstrap: str, broker_pid: int | None = None) -> None:
        from bench.pipeline import PipelinePlan, run_model

        section: dict[str, Any] = {}
        self.results["pipeline"] = section
        for shape, model_dir in self._models():
            plan = PipelinePlan(
                backlog=self.plan.backlog[shape],
                latency_duration_s=self.plan.latency_duration_s,
                bare_budget_s=self.plan.ladder_budget_s,
                profile=self.plan.profile and not self.args.no_profile,
                pinned=shape == "minilm-l6",
            )

            def checkpoint(partial: dict[str, Any], shape: str = shape) -> None:
                section[shape] = partial
                self.results["memory"] = memory_from_pipeline(section)
                self.save()

            section[shape] = run_model(bootstrap, shape, model_dir, plan, threads=self.threads,
                                       checkpoint=checkpoint, broker_pid=broker_pid)  # fmt: skip
            self.results["memory"] = memory_from_pipeline(section)
            self.sample_load(f"pipeline {shape}")
            self.save()

    def spin(self, bootstrap: str) -> None:
        from bench.spin import run_spin

        section: dict[str, Any] = {}
        self.results["spin"] = section
        pipeline = self.results.get("pipeline") or {}
        for shape, model_dir in self._models():
            drained = (pipeline.get(shape) or {}).get("pipeline", {}).get("drain", {})
            rate = 0.5 * float(drained.get("msgs_per_s") or SPIN_FALLBACK_RATE[shape] * 2)
            duration_s = self.plan.latency_duration_s
            section[shape] = run_spin(bootstrap, shape, model_dir, threads=self.threads,
                                      rate=rate, duration_s=duration_s,
                                      backlog=self.plan.backlog[shape] // 2)  # fmt: skip
            self.sample_load(f"spin {shape}")
            self.save()

    def scaleup(self, bootstrap: str) -> None:
        from bench.scaleup import run_scaleup

        section: dict[str, Any] = {}
        self.results["scaleup"] = section
        for shape, model_dir in self._models():
            section[shape] = run_scaleup(
                bootstrap, shape, model_dir, cores=usable_cores(), threads=self.threads,
                backlog=self.plan.backlog[shape], duration_s=self.plan.scaleup_duration_s,
            )  # fmt: skip
            self.sample_load(f"scale-up {shape}")
            self.save()

    def checkpoint(self, section: str) -> Callable[[dict[str, Any]], None]:
        """Stores a long section's partial results and saves them after each step, so a run
        stopped midway keeps what it measured."""

        def save_partial(partial: dict[str, Any]) -> None:
            self.results[section] = partial
            self.save()

        return save_partial

    def loop(self, bootstrap: str, broker_pid: int | None = None) -> None:
        """The moderation loop's cost, off vs on, on the default model (bench/loop.py)."""
        from bench.loop import LoopPlan, run_loop

        plan = LoopPlan(pairs=self.plan.loop_pairs, backlog=self.plan.backlog["minilm-l6"],
                        duration_s=self.plan.latency_duration_s,
                        profile=self.plan.profile and not self.args.no_profile)  # fmt: skip

        self.results["loop"] = run_loop(bootstrap, artifacts.DEFAULT_MODEL_DIR, plan,
                                        threads=self.threads, broker_pid=broker_pid or 0,
                                        checkpoint=self.checkpoint("loop"))  # fmt: skip
        self.sample_load("loop minilm-l6")
        self.save()

    def peer(self, bootstrap: str, broker_pid: int | None = None) -> None:
        """The moderator beside the Quix Streams peer, on the default model (bench/peer.py)."""
        from bench.peer import PeerPlan, run_peer

        plan = PeerPlan(self.plan.peer_rates, self.plan.peer_pairs, self.plan.latency_duration_s)

        def loadavg() -> str:
            return load_average()

        self.results["peer"] = run_peer(bootstrap, artifacts.DEFAULT_MODEL_DIR, plan,
                                        threads=self.threads, broker_pid=broker_pid or 0,
                                        checkpoint=self.checkpoint("peer"),
                                        sample_load=loadavg)  # fmt: skip
        self.sample_load("peer minilm-l6")
        self.save()

    def goodput(self, bootstrap: str, broker_pid: int | None = None) -> None:
        """The highest rate within the p99 budget, moderator and peer (bench/goodput.py)."""
        from bench.goodput import GoodputPlan, run_goodput

        start, duration, probes = self.plan.goodput
        plan = GoodputPlan(start, duration, max_probes=probes)

        self.results["goodput"] = run_goodput(bootstrap, artifacts.DEFAULT_MODEL_DIR, plan,
                                              threads=self.threads, broker_pid=broker_pid or 0,
                                              checkpoint=self.checkpoint("goodput"))  # fmt: skip
        self.sample_load("goodput minilm-l6")
        self.save()

    def shadow(self, bootstrap: str, broker_pid: int | None = None) -> None:
        """The primary with a shadow model off, on and too slow to keep up (bench/shadow.py)."""
        from bench.shadow import ShadowPlan, run_shadow

        plan = ShadowPlan(*self.plan.shadow)
        self.results["shadow"] = run_shadow(bootstrap, artifacts.DEFAULT_MODEL_DIR, plan,
                                            threads=self.threads, broker_pid=broker_pid or 0,
                                            checkpoint=self.checkpoint("shadow"))  # fmt: skip
        self.sample_load("shadow minilm-l6")
        self.save()

    def _models(self) -> list[tuple[str, Path]]:
        dirs = {"distilbert-base": artifacts.distilbert_model_dir,
                "minilm-l6": lambda: artifacts.DEFAULT_MODEL_DIR}  # fmt: skip
        return [(shape, dirs[shape]()) for shape in self.plan.shapes]


def _append_rung(rows: list[dict[str, Any]], rung: RungResult) -> None:
    rows.append(rung.as_dict())


def busy_note() -> str:
    """Other processes using a lot of CPU right now (the machine is shared)."""
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        return ""
    if load1 < 0.5:
        return "The machine was otherwise idle."
    return (
        f"The machine was not idle when the run began (1-minute load {load1:.2f} on "
        f"{usable_cores()} cores): absolute numbers are pessimistic, ratios less affected."
    )


def write_report(results: dict[str, Any], out: Path, plot_dir: Path) -> None:
    plot_dir.mkdir(parents=True, exist_ok=True)
    label = str(results.get("machine_label", ""))
    made: list[str] = []
    if results.get("ladder"):
        path = plots.plot_ladder(results["ladder"], plot_dir / "ladder.png", label)
        if path is not None:
            made.append(os.path.relpath(path, out.parent))
    if results.get("pipeline"):
        path = plots.plot_latency(
            results["pipeline"], plot_dir / "latency.png", label, results.get("spin")
        )
        if path is not None:
            made.append(os.path.relpath(path, out.parent))
    results["plots"] = made
    notes = results.get("notes") or []
    out.write_text(report.render(results, notes))


def merge_sections(results: dict[str, Any], out: Path) -> None:
    """Put this run's loop, peer, goodput and shadow sections into the existing report, the rest
    as it was."""
    from bench.goodput_report import HEADING as GOODPUT_HEADING
    from bench.goodput_report import section_goodput
    from bench.loop_report import headline_row, run_note, section_loop, splice, splice_target
    from bench.peer_report import HEADING as PEER_HEADING
    from bench.peer_report import section_peer
    from bench.shadow_report import merge_shadow

    label = str(results.get("machine_label", ""))
    text = out.read_text()
    section = section_loop(results.get("loop"), label, run_note(results))
    if section:
        text = splice_target(splice(text, section), headline_row(results.get("loop")))
    section = section_peer(results.get("peer"), label, run_note(results, "peer"))
    if section:
        text = splice(text, section, PEER_HEADING)
    section = section_goodput(results.get("goodput"), label, run_note(results, "goodput"))
    if section:
        text = splice(text, section, GOODPUT_HEADING)
    text = merge_shadow(results, text)
    out.write_text(text)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s",
                        stream=sys.stderr)  # fmt: skip
    logging.getLogger("loadgen").setLevel(logging.INFO)
    if args.report_only:
        results = json.loads(args.results.read_text())
        if args.merge and args.out.is_file():
            merge_sections(results, args.out)
        else:
            write_report(results, args.out, args.plots)
        print(f"wrote {args.out}")
        return 0
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        print(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}", file=sys.stderr)
        return 2
    bench = Bench(args)
    log.info("benchmark on %s, %d threads, %s", bench.results["machine_label"], bench.threads,
             "quick" if args.quick else "full")  # fmt: skip
    if "terms" in sections:
        from bench.terms import run_terms

        bench.results["terms"] = run_terms()
        bench.save()
    if "ladder" in sections:
        bench.ladder()
    if KAFKA_SECTIONS & set(sections):
        from devstack.embedded import EmbeddedKafka

        if (KAFKA_SECTIONS - ALONE) & set(sections):
            artifacts.build_all()  # the loop and peer sections run the shipped model alone
        with EmbeddedKafka() as kafka:
            if "pipeline" in sections:
                bench.pipeline(kafka.bootstrap, kafka.pid)
            if "spin" in sections and not args.quick:
                bench.spin(kafka.bootstrap)
            if "scaleup" in sections:
                bench.scaleup(kafka.bootstrap)
            if "loop" in sections:
                bench.loop(kafka.bootstrap, kafka.pid)
            if "peer" in sections:
                bench.peer(kafka.bootstrap, kafka.pid)
            if "goodput" in sections:
                bench.goodput(kafka.bootstrap, kafka.pid)
            if "shadow" in sections:
                bench.shadow(kafka.bootstrap, kafka.pid)
    bench.save()
    print(f"wrote {args.out} in {bench.results['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
