"""`loadgen`: drive open-loop chat traffic through the processor and report latency.

Exit status: 0 when every message was decided, 1 when some went missing (or, with --find-max, when
no rate held), 2 on a usage error, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from loadgen.config import DEFAULT_DLQ_TOPIC, DEFAULT_IN_TOPIC, DEFAULT_OUT_TOPIC, LoadConfig
from loadgen.runner import Progress, run_load
from loadgen.schedule import Arrivals
from loadgen.search import MaxResult, Step, find_max
from loadgen.summary import format_summary
from moderator.loop import run

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loadgen",
        description="Produce chat messages on an open-loop schedule, match the decisions, "
        "and report latency from each message's scheduled send time.",
        epilog="""examples:
  loadgen --rate 200 --duration 30                  # against moderator dev on 127.0.0.1:9092
  loadgen --bootstrap kafka:9092 --rate 1000 --json run.json --plot run.png  # plot: the plot extra
  loadgen --find-max --start-rate 100 --step-duration 10""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap HOST:PORT")
    add("--rate", type=float, default=100.0, help="messages per second (default 100)")
    add("--duration", type=float, default=10.0, help="seconds of sending (default 10)")
    add("--arrivals", choices=[a.value for a in Arrivals], default=Arrivals.CONSTANT.value,
        help="how sends are spaced")  # fmt: skip
    add("--dup-ratio", type=float, default=0.3, help="share of exact and near repeats (0.3)")
    add("--toxic-ratio", type=float, default=0.05, help="share of toxic lines (0.05)")
    add("--malformed-ratio", type=float, default=0.0, help="share of malformed records (0)")
    add("--held-ratio", type=float, default=0.0,
        help="share of lines the shipped model holds for review (0)")  # fmt: skip
    add("--channels", type=int, default=16, help="distinct channel ids, the Kafka key (16)")
    add("--in-topic", default=DEFAULT_IN_TOPIC, help="where messages go")
    add("--out-topic", default=DEFAULT_OUT_TOPIC, help="where decisions are read")
    add("--dlq-topic", default=DEFAULT_DLQ_TOPIC, help="where dead letters are read")
    add("--partitions", type=int, default=4, help="partitions for topics loadgen creates (4)")
    add("--budget-ms", type=float, default=50.0, help="latency budget per message (50)")
    add("--drain-timeout", type=float, default=10.0, help="seconds to wait for the last decisions")
    add("--no-hop", action="store_true", help="skip measuring the broker hop alone")
    add("--seed", type=int, default=None, help="seed for the traffic and the schedule")
    add("--json", type=Path, default=None, metavar="FILE", help="write the results as JSON")
    add("--plot", type=Path, default=None, metavar="FILE.png", help="draw latency plots")
    add("--quiet", action="store_true", help="no progress lines")
    add("-v", "--verbose", action="store_true", help="debug logging")
    search = parser.add_argument_group("saturation search (--find-max)")
    search.add_argument("--find-max", action="store_true", help="search for the highest rate")
    search.add_argument("--start-rate", type=float, default=50.0, help="first rate tried (50)")
    search.add_argument("--step-duration", type=float, default=10.0, help="seconds per step")
    search.add_argument("--max-rate", type=float, default=100_000.0, help="highest rate tried")
    search.add_argument("--precision", type=float, default=0.1, help="stop within this ratio")
    search.add_argument("--max-steps", type=int, default=14, help="steps at most (14)")
    return parser


def config_from_args(args: argparse.Namespace) -> LoadConfig:
    return LoadConfig(
        bootstrap=args.bootstrap,
        rate=args.rate,
        duration_s=args.duration,
        arrivals=Arrivals(args.arrivals),
        dup_ratio=args.dup_ratio,
        toxic_ratio=args.toxic_ratio,
        malformed_ratio=args.malformed_ratio,
        held_ratio=args.held_ratio,
        channels=args.channels,
        in_topic=args.in_topic,
        out_topic=args.out_topic,
        dlq_topic=args.dlq_topic,
        budget_ms=args.budget_ms,
        drain_timeout_s=args.drain_timeout,
        partitions=args.partitions,
        hop=not args.no_hop,
        seed=args.seed,
    )


def print_progress(p: Progress) -> None:
    p99 = "-" if p.interval_p99_ms is None else f"{p.interval_p99_ms:.1f} ms"
    phase = "" if p.sending else " (draining)"
    malformed = f" (+{p.malformed_sent} malformed, {p.dead_letters} dead-lettered)"
    print(
        f"[{p.elapsed_s:6.1f}s] sent {p.sent}{malformed if p.malformed_sent else ''}"
        f"  decided {p.decided}  in-flight {p.in_flight}  p99(last 1s) {p99}{phase}",
        file=sys.stderr,
        flush=True,
    )


def format_steps(steps: Sequence[Step]) -> str:
    header = (
        f"{'rate/s':>10} {'held':>5} {'p50 ms':>9} {'p99 ms':>9} {'thru/s':>9} {'missing':>8}  why"
    )
    rows = [header]
    for s in steps:
        rows.append(
            f"{s.rate:>10.1f} {'yes' if s.held else 'no':>5} {_num(s.p50_ms):>9} "
            f"{_num(s.p99_ms):>9} {s.throughput_per_s:>9.1f} {s.missing:>8}  {s.reason}"
        )
    return "\n".join(rows)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        cfg = config_from_args(args)
    except ValueError as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 2
    if args.plot is not None:
        from loadgen.plot import unavailable

        if (why := unavailable()) is not None:
            print(f"loadgen: {why}", file=sys.stderr)
            return 2
    progress = None if args.quiet else print_progress
    try:
        if args.find_max:
            return _main_find_max(args, cfg, progress)
        summary = run(run_load(cfg, progress=progress))
    except KeyboardInterrupt:
        print("loadgen: interrupted", file=sys.stderr)
        return 130
    print(format_summary(summary))
    if args.json is not None:
        _write_json(args.json, summary.as_dict())
    if args.plot is not None:
        from loadgen.plot import plot_summary

        plot_summary(summary, args.plot)
    return 1 if summary.missing else 0


def _main_find_max(args: argparse.Namespace, cfg: LoadConfig, progress: Any) -> int:
    def on_step(step: Step) -> None:
        print(f"step {step.rate:.1f}/s: {step.reason}", file=sys.stderr, flush=True)

    result: MaxResult = run(
        find_max(
            cfg,
            start_rate=args.start_rate,
            step_duration_s=args.step_duration,
            max_rate=args.max_rate,
            precision=args.precision,
            max_steps=args.max_steps,
            progress=progress,
            on_step=on_step,
        )
    )
    print(format_steps(result.steps))
    if result.max_rate is None:
        print(f"no rate held p99 within {cfg.budget_ms:g} ms with nothing missing")
    else:
        print(f"highest rate that held: {result.max_rate:g}/s (p99 within {cfg.budget_ms:g} ms)")
    if result.best is not None:
        print(format_summary(result.best))
    if args.json is not None:
        _write_json(args.json, result.as_dict())
    if args.plot is not None and result.best is not None:
        from loadgen.plot import plot_summary

        plot_summary(result.best, args.plot)
    return 0 if result.max_rate is not None else 1


if __name__ == "__main__":
    sys.exit(main())
