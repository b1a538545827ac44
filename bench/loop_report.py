"""BENCHMARKS.md's section on the moderation loop's cost (bench/loop.py's results): pure
formatting, no timing, no servers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import mean, median
from typing import Any

from bench.cpu import ROLES, harness_ms, model_ms

TARGET_LOOP_SHARE = 0.90  # issue 29: the loop on drains at least 90% of the rate of off
HEADING = "## 7. The moderation loop's cost, off vs on"
PARTS = (
    ("cache_read", "score cache reads (MGET)"),
    ("cache_write", "score cache writes (background)"),
    ("review", "context rings and held messages (per batch)"),
    ("verdict", "verdicts applied"),
    ("sweep", "timeout sweep (once a second)"),
    ("users_before", "users' state, before the model"),
    ("users_after", "users' state, strikes"),
)


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return mean(known) if known else None


def _rows_of(rows: Sequence[Mapping[str, Any]], arm: str) -> list[Mapping[str, Any]]:
    return [r for r in rows if r.get("arm") == arm]


def _fired(row: Mapping[str, Any]) -> str:
    counters = row.get("counters") or {}
    rules = {k: int(v) for k, v in (counters.get("rules") or {}).items() if v}
    overridden = int(counters.get("overridden") or 0)
    if overridden:
        rules["override"] = overridden
    return ", ".join(f"{k} {v}" for k, v in rules.items()) or "none"


def _loop_cpu(row: Mapping[str, Any]) -> float | None:
    value = (row.get("cpu_ms_per_msg") or {}).get("event loop")
    return None if value is None else float(value)


def _trips(row: Mapping[str, Any]) -> float | None:
    value = (row.get("round_trips_per_msg") or {}).get("total")
    return None if value is None else float(value)


def drain_rows(drains: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """One row per drain, in the order run."""
    out = []
    for d in drains:
        drain, cpu, count = d["drain"], d.get("cpu_ms_per_msg") or {}, d.get("counters") or {}
        held = count.get("held")
        out.append([str(d["pair"] + 1), d["arm"], _f(drain["msgs_per_s"]),
                    f"{drain['decided']}/{drain['messages']}",
                    "-" if held is None else str(int(held)),
                    _pct(drain["cached"] / max(drain["decided"], 1)), _fired(d),
                    _f(cpu.get("event loop"), 2), _f(model_ms(cpu) if cpu else None, 2),
                    _f(cpu.get("total"), 2), _f(_trips(d), 3)])  # fmt: skip
    return out


def _arm_mean(rows: Sequence[Mapping[str, Any]], arm: str, part: str) -> float | None:
    return _mean([(r.get("round_trips_per_msg") or {}).get(part) for r in _rows_of(rows, arm)])


def trips_rows(
    drains: Sequence[Mapping[str, Any]], lat: Sequence[Mapping[str, Any]] = ()
) -> list[list[str]]:
    """Redis round trips per message by part, each arm's mean over its drains (and open-loop
    runs, when there are some)."""
    rows = []
    for part, what in (*PARTS, ("total", "total")):
        cells = [_arm_mean(drains, arm, part) for arm in ("off", "on")]
        if lat:
            cells += [_arm_mean(lat, arm, part) for arm in ("off", "on")]
        rows.append([f"`{part}`: {what}" if part != "total" else "**total**",
                     *(_f(c, 3) for c in cells)])  # fmt: skip
    return rows


def batch_size(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """Messages per fetched batch on the on arm: each batch makes one `review` round trip (its
    channels' rings pushed), so it is 1 / that per message."""
    per = _arm_mean(rows, "on", "review")
    return 1 / per if per else None


def latency_rows(rows: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    out = []
    for r in rows:
        cpu = r.get("cpu_ms_per_msg") or {}
        out.append([str(r["pair"] + 1), r["arm"], _f(r.get("p50_ms")), _f(r.get("p99_ms")),
                    _f(r.get("p999_ms")), f"{r.get('decided')}/{r.get('sent')}",
                    *(_f(cpu.get(role), 2) for role in ROLES), _f(cpu.get("total"), 2),
                    _f(_trips(r), 3)])  # fmt: skip
    return out


def moderator_cpu(row: Mapping[str, Any]) -> float | None:
    """The moderator's own CPU-ms per message (event loop and model threads): the run's CPU
    split without the broker and the harness."""
    cpu = row.get("cpu_ms_per_msg") or {}
    total = cpu.get("total")
    return None if total is None else float(total) - harness_ms(cpu)


def cpu_share(drains: Sequence[Mapping[str, Any]]) -> tuple[float, float, float] | None:
    """(off, on) mean moderator CPU-ms per message over the drains, and off / on: the share of
    the rate of off that on would drain were the moderator alone on the cores and CPU-bound.
    CPU time moves less than wall time when other processes take the cores."""
    off, on = (_mean([moderator_cpu(d) for d in _rows_of(drains, arm)]) for arm in ("off", "on"))
    if not off or not on:
        return None
    return off, on, off / on


ON_PATH = ("users_before", "users_after", "review")  # awaited in turn on a batch's path


def _path_note(lat: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the loop adds to a message's path in the open loop: the round trips it waits for."""
    extra = {part: (_arm_mean(lat, "on", part) or 0.0) - (_arm_mean(lat, "off", part) or 0.0)
             for part in ON_PATH}  # fmt: skip
    p50 = [_median_of(lat, arm, "p50_ms") for arm in ("off", "on")]
    if p50[0] is None or p50[1] is None or sum(extra.values()) <= 0:
        return []
    parts = ", ".join(f"`{part}` {v:.2f}" for part, v in extra.items())
    return [f"On, a message's path waits for {sum(extra.values()):.2f} more Redis round trips "
            f"per message than off ({parts}), one after the other on the event loop (a fetched "
            f"batch is {_f(batch_size(lat))} messages at this rate). The median p50 is "
            f"{_f(p50[1] - p50[0])} ms higher on.", ""]  # fmt: skip


def _median_of(rows: Sequence[Mapping[str, Any]], arm: str, key: str) -> float | None:
    values = [float(r[key]) for r in _rows_of(rows, arm) if r.get(key) is not None]
    return median(values) if values else None


def _series(rows: Sequence[Mapping[str, Any]], arm: str, key: str) -> str:
    """'11.1, 16.7 ms (median 13.9)': an arm's values in the order run, and their median."""
    values = [float(r[key]) for r in _rows_of(rows, arm) if r.get(key) is not None]
    if not values:
        return "-"
    return f"{', '.join(_f(v) for v in values)} ms (median {_f(median(values))})"


def loop_share(loop: Mapping[str, Any]) -> float | None:
    """The on arm's mean drain rate over the off arm's (bench/loop.py `ratio_of_means`)."""
    value = loop.get("ratio")
    return None if value is None else float(value)


def run_note(results: Mapping[str, Any], section: str = "loop") -> str:
    """When `section` ran and how busy the machine was: these hosts are shared."""
    during = next((r for r in results.get("load_during") or []
                   if r["section"].startswith(section)), None)  # fmt: skip
    note = (f"Run on {results.get('started', '?')}; load average before the run "
            f"{results.get('load_before', '?')}")  # fmt: skip
    if during:
        others = "; ".join(during.get("others") or []) or "none"
        note += (f", at the end of this section {during['loadavg']} (other processes using "
                 f"much CPU: {others})")  # fmt: skip
    return note + "."


def section_loop(loop: Mapping[str, Any] | None, label: str, note: str = "") -> list[str]:
    if not loop:
        return []
    from bench.report import table, verdict

    users = loop.get("users") or {}
    drains = loop.get("drains") or []
    share = loop_share(loop)
    out = [
        HEADING,
        "",
        f"Machine: **{label}**; the default model (MiniLM-L6), {loop.get('threads')} threads, "
        "the embedded Tansu broker (4 partitions), the score cache on (L1 and a fresh Redis per "
        "run: the loop keeps its state there). **Off**: `MODERATOR_REVIEW_CONTEXT=0` (no "
        "channel rings), the default policy (no `[users]` rules), `MODERATOR_OVERRIDE_TOPIC` "
        "empty (no overrides). What no setting turns off runs in both: a `review` decision's "
        "review record and held message, the verdict consumer, the timeout sweep. **On**: the "
        "defaults (context 5 messages, 4096 bytes), a policy with every `[users]` rule on at "
        f"limits the traffic cannot reach (strikes {users.get('strikes')} within the default "
        f"window with a {users.get('mute_s')} s mute, flood {users.get('flood_messages')} "
        f"messages in 10 s, the same text in {users.get('repeat_channels')} channels, links "
        f"to `{', '.join(users.get('links_deny') or [])}` denied: one more than the busiest "
        "user sends, or than there are channels), so every message pays for the users' "
        "state while the rules take no message from the model; and an overrides topic of "
        f"{loop.get('overrides')} overrides of texts the traffic never sends (every message "
        "looked up, none skips the model). Traffic: the load generator's, the same seed in every "
        f"run (dup_ratio {loop.get('dup_ratio')}, {_pct(loop.get('toxic_ratio'))} toxic, "
        f"{loop.get('channels')} channels, users spread Zipf-like over 5,000). Every run is a "
        "fresh moderator, Redis, topics and group; the pairs ran in the order "
        f"{', '.join(loop.get('order') or [])}, so the machine's drift falls on both arms alike."
        + (f" {note}" if note else ""),
        "",
    ]  # fmt: skip
    if drains:
        out += [
            f"### Backlog drain: {loop.get('backlog')} messages ({label})",
            "",
            "Produced at once, timed from the first send to the last decision. *held*: review "
            "records (messages held for a verdict); *rules fired*: decisions the users' rules "
            "or an override made or changed; CPU-milliseconds per decided message from /proc "
            "(the moderator's event loop; its model threads; every role, broker and harness "
            "included); Redis round trips per consumed message (the moderator's counters).",
            "",
            table(["pair", "arm", "msgs/s", "decided", "held", "cached", "rules fired",
                   "event loop CPU-ms", "model CPU-ms", "total CPU-ms", "Redis trips/msg"],
                  drain_rows(drains)),
            "",
        ]  # fmt: skip
        pairs = ", ".join(_pct(r) for r in loop.get("pair_ratios") or [])
        how = (f"on drained {_pct(share)} of the rate of off (the arms' mean rates; pair by "
               f"pair {pairs})")  # fmt: skip
        met = None if share is None else share >= TARGET_LOOP_SHARE
        out += ["Target: the loop on drains at least 90% of the rate of off: "
                + verdict(met, how) + ".", ""]  # fmt: skip
        if (by_cpu := cpu_share(drains)) is not None:
            off_ms, on_ms, est = by_cpu
            out += [f"By CPU time, which other processes on the machine move less than wall "
                    f"time: the moderator's own CPU per message (event loop and model threads, "
                    f"from /proc), mean over each arm's drains, is {_f(off_ms, 3)} ms off and "
                    f"{_f(on_ms, 3)} ms on ({_pct(on_ms / off_ms - 1)} more); were the moderator "
                    f"alone on the cores, on would drain {_pct(est)} of the rate of off "
                    f"({'at or above' if est >= TARGET_LOOP_SHARE else 'below'} the 90% "
                    "target). The event loop's share of that: "
                    f"{_f(_mean([_loop_cpu(d) for d in _rows_of(drains, 'off')]), 3)} ms off, "
                    f"{_f(_mean([_loop_cpu(d) for d in _rows_of(drains, 'on')]), 3)} ms on.",
                    ""]  # fmt: skip
    lat = loop.get("latency") or []
    if drains:
        heads = ["part", "drain: off", "drain: on"]
        if lat:
            heads += ["open loop: off", "open loop: on"]
        sizes = [f"{_f(batch_size(rows))} messages per fetched batch in the {what}"
                 for rows, what in ((drains, "drain"), (lat, "open loop")) if rows]  # fmt: skip
        out += [
            "Redis round trips per consumed message, by part (each arm's mean over its runs; a "
            "command, a pipeline or a script is one round trip). Each part makes at most one "
            "per fetched batch, so per message they shrink as batches grow: on, "
            + " and ".join(sizes) + ". The sweep runs once a second whatever the traffic.",
            "",
            table(heads, trips_rows(drains, lat)),
            "",
        ]  # fmt: skip
    if lat:
        out += [
            f"### Open loop at {_f(loop.get('rate'))} msgs/s ({label})",
            "",
            f"{_pct(loop.get('rate_fraction'))} of the off arm's mean drain rate, well inside "
            "capacity; the load generator, constant arrivals, the same traffic, "
            f"{lat[0].get('duration_s')} s per run; latency from each message's scheduled send "
            "time to its decision's arrival. CPU-milliseconds per decided message by role.",
            "",
            table(["pair", "arm", "p50 ms", "p99 ms", "p99.9 ms", "decided", *ROLES,
                   "total CPU-ms", "Redis trips/msg"], latency_rows(lat)),
            "",
            "Per arm, pair by pair (a busy moment of the shared machine lands on one run: "
            "the median reads through it): "
            + "; ".join(f"{arm}: p50 {_series(lat, arm, 'p50_ms')}, p99 "
                        f"{_series(lat, arm, 'p99_ms')}" for arm in ("off", "on")) + ".",
            "",
            *_path_note(lat),
        ]  # fmt: skip
    out += _profile(drains)
    return out


def _profile(drains: Sequence[Mapping[str, Any]]) -> list[str]:
    prof = next((d["profile"] for d in drains if d.get("profile")), None)
    if not prof or not prof.get("samples"):
        return []
    shares = prof.get("loop_modules") or {}
    modules = ", ".join(f"`{m}` {_pct(v)}" for m, v in shares.items() if m != "any" and v)
    own = ", ".join(f"`{n}` {_pct(v)}" for n, v in (prof.get("self") or [])[:8])
    return [
        f"Where the on arm's time goes (py-spy, 100 Hz, a second drain of the same size, not "
        f"timed; {prof['samples']} samples): stacks inside the loop's own modules "
        f"{_pct(shares.get('any'))} of all samples ({modules or 'none'}); hottest functions "
        f"(own time): {own}.",
        "",
    ]


def headline_row(loop: Mapping[str, Any] | None) -> list[str] | None:
    """The Targets table's row, when the section ran."""
    share = loop_share(loop) if loop else None
    if share is None:
        return None
    return ["loop on / off, backlog drain, MiniLM-L6 (default model)", "≥ 90%", _pct(share),
            "met" if share >= TARGET_LOOP_SHARE else "missed"]  # fmt: skip


def splice(document: str, section: Sequence[str], heading: str = HEADING) -> str:
    """`document` (a BENCHMARKS.md) with its section under `heading` (the loop's by default)
    replaced by `section`, or `section` added before "Reading the numbers" (or at the end): a
    run of this section alone keeps the rest of the file, whose results it does not have."""
    lines = document.rstrip("\n").split("\n")
    new = [*section]
    while new and not new[-1]:
        new.pop()
    if heading in lines:
        start = lines.index(heading)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
                   len(lines))  # fmt: skip
    else:
        start = end = next((i for i, line in enumerate(lines)
                            if line.startswith("## Reading the numbers")), len(lines))  # fmt: skip
    tail = lines[end:]
    gap = [""] if tail else []
    head = lines[:start]
    if head and head[-1]:
        head.append("")
    return "\n".join([*head, *new, *gap, *tail]).rstrip("\n") + "\n"


def splice_target(document: str, row: Sequence[str] | None) -> str:
    """`document` with the loop's row of its Targets table replaced by `row`, or added as the
    table's last row; unchanged when there is no row or no Targets table."""
    if row is None:
        return document
    line = "| " + " | ".join(row) + " |"
    lines = document.split("\n")
    mine = [i for i, text in enumerate(lines) if text.startswith("| " + row[0] + " |")]
    if mine:
        lines[mine[0]] = line
        return "\n".join(lines)
    if "## Targets" not in lines:
        return document
    i = lines.index("## Targets") + 1
    while i < len(lines) and not lines[i].startswith("|"):
        i += 1
    while i < len(lines) and lines[i].startswith("|"):
        i += 1
    return "\n".join([*lines[:i], line, *lines[i:]])
