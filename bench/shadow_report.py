"""BENCHMARKS.md's section on what a shadow model costs the primary (bench/shadow.py's results):
pure formatting and arithmetic, no timing, no servers.

The question is issue 41's: does the primary's p99 with a shadow stay inside what the runs
without one already spread over? So each arm's figures are a median with their range over the
rounds, and the verdict compares the shadow arms' median p99 with the off arm's range
(bench/pairs.py), never with one run of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench.cpu import ROLES, SHADOW
from bench.pairs import Spread, place, spread, unaffected

HEADING = "## 10. A shadow model beside the primary"
SHADOW_ARMS = ("on", "slow")
PROCESS_ROLES = ROLES[:3]  # the moderator's own threads; its shadow's process is a role apart
NAMES = {"off": "off", "on": "on: candidate", "slow": "slow: too slow to keep up"}
TARGETS = {"on": "shadow on: primary p99 vs no shadow", "slow": "shadow too slow: primary p99 "
           "vs no shadow"}  # fmt: skip

Row = Mapping[str, Any]


def name(arm: str) -> str:
    return NAMES.get(arm, arm)


def figure(value: float | None, digits: int = 1) -> str:
    """`value` to `digits` decimals; a dash for a figure the run did not measure."""
    return "–" if value is None else f"{value:,.{digits}f}"


def share(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def primary_ms(row: Row) -> float | None:
    """The primary's CPU-ms per decided message: the moderator's own threads (event loop, scorer,
    model pool and other) without the shadow's. The event loop's share includes handing each
    message to the shadow and counting its comparisons."""
    cpu = row.get("cpu_ms_per_msg")
    if not cpu:
        return None
    return float(sum(cpu.get(role, 0.0) for role in PROCESS_ROLES))


def primary_wait_ms(row: Row) -> float | None:
    """How long the primary's threads stood runnable with no core free, per decided message
    (schedstat's run-queue delay): where a shadow slows the primary by taking its core, this
    grows; where its work costs more on a shared core, primary CPU does."""
    waits = row.get("wait_ms_per_msg")
    if not waits:
        return None
    return float(sum(waits.get(role, 0.0) for role in PROCESS_ROLES))


def shadow_ms(row: Row) -> float | None:
    """The shadow's CPU-ms per message it read (compared): its process's CPU-seconds over the run
    by the comparisons counted in it. None without a shadow or with nothing compared."""
    seconds = (row.get("cpu_seconds") or {}).get(SHADOW)
    compared = (row.get("counters") or {}).get("compared")
    if seconds is None or not compared:
        return None
    return float(seconds) * 1000 / float(compared)


def skipped_share(row: Row) -> float | None:
    """Of the messages the moderator consumed in the run, the share its shadow skipped."""
    counters = row.get("counters") or {}
    consumed = counters.get("consumed")
    if not consumed or "skipped" not in counters:
        return None
    return float(counters["skipped"]) / float(consumed)


def runs_of(runs: Sequence[Row], rate: float, arm: str) -> list[Row]:
    """The runs of `arm` at `rate`, in the order run."""
    return [r for r in runs if r["arm"] == arm and float(r["rate"]) == round(rate, 1)]


def spread_of(rows: Sequence[Row], value: Callable[[Row], float | None]) -> Spread | None:
    """The median and range of `value` over `rows`, leaving out runs without it."""
    return spread(v for v in map(value, rows) if v is not None)


def p99(row: Row) -> float | None:
    value = row.get("p99_ms")
    return None if value is None else float(value)


def p50(row: Row) -> float | None:
    value = row.get("p50_ms")
    return None if value is None else float(value)


def cpu_ms(value: float | None) -> str:
    return figure(value, 2)


def ranged(s: Spread | None, show: Callable[[float | None], str] = figure) -> str:
    """'12.3 (11.0-14.2)', an en dash between: a median and its range over the runs; one run:
    the figure alone."""
    if s is None:
        return "–"
    if s.low == s.high:
        return show(s.median)
    return f"{show(s.median)} ({show(s.low)}–{show(s.high)})"


def verdict(runs: Sequence[Row], rate: float, arm: str) -> tuple[bool | None, str]:
    """Whether `arm`'s median p99 at `rate` stays out of the range above off's p99, and how."""
    off = spread_of(runs_of(runs, rate, "off"), p99)
    mine = spread_of(runs_of(runs, rate, arm), p99)
    met = unaffected(mine.median if mine else None, off)
    if met is None or mine is None or off is None:
        return None, "not measured"
    span = figure(off.low) if off.low == off.high else f"{figure(off.low)}–{figure(off.high)}"
    how = f"median p99 {figure(mine.median)} ms, {place(mine.median, off)} off's {span} ms"
    return met, how


def run_rows(rows: Sequence[Row]) -> list[list[str]]:
    """One table row per run, in the order run."""
    out = []
    for r in rows:
        c = r.get("counters") or {}
        has = r["arm"] != "off"
        out.append([
            str(r["pair"] + 1), name(str(r["arm"])), f"{r['decided']}/{r['sent']}",
            figure(p50(r)), figure(p99(r)), figure(r.get("p999_ms")), figure(primary_ms(r), 2),
            figure(shadow_ms(r), 2) if has else "–",
            f"{c.get('compared', 0):.0f}" if has else "–",
            f"{c.get('skipped', 0):.0f} ({share(skipped_share(r))})" if has else "–",
            f"{c.get('queued', 0):.0f}" if has else "–",
            f"{c.get('disagreed', 0):.0f}" if has else "–", figure(primary_wait_ms(r), 2),
        ])  # fmt: skip
    return out


def summary_rows(runs: Sequence[Row], rate: float, arms: Sequence[str]) -> list[list[str]]:
    """Per arm at `rate`: medians and ranges over its runs, and its p99 against off's range."""
    out = []
    for arm in arms:
        rows = runs_of(runs, rate, arm)
        if not rows:
            continue
        met, how = verdict(runs, rate, arm) if arm != "off" else (None, "")
        word = "" if arm == "off" else {True: "yes", False: "no", None: "–"}[met]
        out.append([
            name(arm), str(len(rows)), ranged(spread_of(rows, p50)),
            ranged(spread_of(rows, p99)), f"{word}: {how}" if how else word or "reference",
            ranged(spread_of(rows, primary_ms), cpu_ms), ranged(spread_of(rows, shadow_ms), cpu_ms),
            ranged(spread_of(rows, skipped_share), show=share) if arm != "off" else "–",
            ranged(spread_of(rows, primary_wait_ms), cpu_ms),
        ])  # fmt: skip
    return out


def table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 2) -> list[str]:
    """A Markdown table's lines, its first `left` columns left-aligned, the rest right."""
    align = [":---"] * left + ["---:"] * (len(header) - left)
    return ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |",
            *["| " + " | ".join(row) + " |" for row in rows]]  # fmt: skip


def host_line(machine: Mapping[str, Any], label: str) -> str:
    """The CPU, the cores the run could use and the int8 flags, as the run recorded them."""
    return (f"Host: {machine.get('cpu_model') or 'CPU model not recorded'}, {label} "
            f"({machine.get('cpu_count', '?')} CPUs on the machine).")  # fmt: skip


def fell_behind(rows: Sequence[Row]) -> str:
    """Whether a shadow kept up over `rows`: nothing skipped and nothing left waiting."""
    counters = [r.get("counters") or {} for r in rows]
    skipped = sum(float(c.get("skipped") or 0) for c in counters)
    left = max((float(c.get("queued") or 0) for c in counters), default=0.0)
    if not skipped and not left:
        return "kept up (nothing skipped, nothing left waiting at the end of a run)"
    return (f"fell behind: {skipped:.0f} messages skipped over the runs, up to {left:.0f} "
            "still waiting at the end of one")  # fmt: skip


def threads(n: object) -> str:
    return f"{n} thread" if n == 1 else f"{n} threads"


def _intro(shadow: Mapping[str, Any]) -> str:
    models = shadow.get("shadows") or {}
    on, slow = models.get("on") or {}, models.get("slow") or {}
    hop = shadow.get("hop") or {}
    return (
        f"The default model decides (`{shadow.get('model')}`, {threads(shadow.get('threads'))}), "
        f"on the embedded Tansu broker ({shadow.get('partitions')} partitions), the score cache "
        "on (L1 and a fresh Redis per run). **off**: no shadow. **on**: "
        f"`MODERATOR_SHADOW_MODEL` is `{on.get('model')}` (devstack/candidate.py: the shipped "
        "graph under a manifest that names two labels the other way round and reads Spanish), at "
        "the shadow's defaults: "
        f"{threads(on.get('threads'))}, a queue of {on.get('queue')}. **slow**: a shadow that "
        f"cannot keep up, `{slow.get('model')}` (the {shadow.get('slow_shape')}-shaped speed "
        f"model: random weights, real size) on {threads(slow.get('threads'))} with a queue of "
        f"{slow.get('queue')}, so it sheds within a run. Traffic: the load generator's, the same "
        f"seed in every run (dup_ratio {shadow.get('dup_ratio')}), constant arrivals, "
        f"{shadow.get('duration_s')} s per run; latency from each message's scheduled send time "
        "to its decision's arrival. Each rate's runs went in the order "
        f"{', '.join(shadow.get('order') or [])} (bench/pairs.py), each a fresh moderator, "
        "Redis, topics and group. *primary CPU*: the moderator's own threads (event loop, "
        "scorer, model pool and the process pool's two helper threads) per decided message, "
        "without the shadow's process (the moderator's child, named `shadow`, a role of its own "
        "in bench/cpu.py); handing messages to the shadow (pickling them to its process) and "
        "counting its comparisons run in the moderator and count here. *shadow CPU*: the "
        "shadow process's threads per message it compared. *skipped*: "
        "`moderator_shadow_skipped_total` over the messages consumed; *left*: "
        "`moderator_shadow_queued` at the end of the run (neither compared nor skipped yet); "
        "*primary waited*: the time the primary's threads stood runnable with no core free, per "
        "decided message (schedstat's run-queue delay; the shadow's process runs in Linux's idle "
        "class at niceness 19, moderator/shadow/process.py)."
        f" Broker hop alone p50 {figure(hop.get('p50_ms'), 2)} "
        f"ms, p99 {figure(hop.get('p99_ms'), 2)} ms."
    )


def wait_rows(runs: Sequence[Row], rate: float) -> list[list[str]]:
    """Per role, each arm's median time runnable with no core free, ms a decided message: where
    a shadow in the idle class still slows the primary, this says whose threads waited."""
    arms = ("off", *SHADOW_ARMS)
    out = []
    for role in (*ROLES, SHADOW):
        cells = []
        for arm in arms:
            waits = [(r.get("wait_ms_per_msg") or {}).get(role) for r in runs_of(runs, rate, arm)]
            found = spread(w for w in waits if w is not None)
            cells.append(cpu_ms(found.median if found else None))
        out.append([role, *cells])
    return out


def _rate_lines(runs: Sequence[Row], rate: float, label: str) -> list[str]:
    rows = [r for r in runs if float(r["rate"]) == round(rate, 1)]
    if not rows:
        return []
    out = [f"### Open loop at {figure(rate)} msgs/s ({label})", ""]
    out += table(["pair", "arm", "decided", "p50 ms", "p99 ms", "p99.9 ms", "primary CPU-ms",
                  "shadow CPU-ms", "compared", "skipped", "left", "disagreed",
                  "primary waited ms"], run_rows(rows))  # fmt: skip
    out += ["", "Per arm, the median over its runs (their range in brackets):", ""]
    out += table(["arm", "runs", "p50 ms", "p99 ms", "p99 within off's range",
                  "primary CPU-ms", "shadow CPU-ms", "skipped", "primary waited ms"],
                 summary_rows(runs, rate, ("off", *SHADOW_ARMS)))  # fmt: skip
    out += ["", "Waiting for a core, ms a decided message, by role (each arm's median; the broker "
            "and the load generator share the moderator's 2 cores):", ""]  # fmt: skip
    out += table(["role", *(name(arm) for arm in ("off", *SHADOW_ARMS))], wait_rows(runs, rate), 1)
    out.append("")
    if slow := runs_of(runs, rate, "slow"):
        out += [f"The slow shadow at {figure(rate)} msgs/s {fell_behind(slow)}.", ""]
    return out


def section_shadow(
    shadow: Mapping[str, Any] | None, label: str, machine: Mapping[str, Any], note: str = ""
) -> list[str]:
    """The section's lines, or [] when the run has no shadow results."""
    if not shadow or not shadow.get("runs"):
        return []
    runs = shadow["runs"]
    out = [HEADING, "", _intro(shadow), "", host_line(machine, label), ""]
    if note:
        out += [note, ""]
    for rate in shadow.get("rates") or []:
        out += _rate_lines(runs, rate, label)
    for arm in SHADOW_ARMS:
        found = [(rate, *verdict(runs, rate, arm)) for rate in shadow.get("rates") or []]
        said = "; ".join(f"at {figure(rate)} msgs/s {how}" for rate, _, how in found)
        met = all(m for _, m, _ in found) if found else None
        word = {True: "**met**", False: "**missed**", None: "not measured"}[met]
        out += [f"Target (issue 41), {TARGETS[arm]}: the median p99 no higher than the highest "
                f"of off's runs: {word} ({said}).", ""]  # fmt: skip
    return out


def headline_rows(shadow: Mapping[str, Any] | None) -> list[list[str]]:
    """The Targets table's rows, one per shadow arm, when the section ran."""
    if not shadow or not shadow.get("runs"):
        return []
    rates = shadow.get("rates") or []
    out = []
    for arm in SHADOW_ARMS:
        found = [(rate, *verdict(shadow["runs"], rate, arm)) for rate in rates]
        if any(m is None for _, m, _ in found):
            continue
        said = "; ".join(f"{figure(rate, 0)}/s: {how}" for rate, _, how in found)
        met = all(m for _, m, _ in found)
        out.append([TARGETS[arm], "within off's range", said, "met" if met else "missed"])
    return out


def merge_shadow(results: Mapping[str, Any], document: str) -> str:
    """`document` (a BENCHMARKS.md) with this run's shadow section and Targets rows put in, the
    rest as it was; unchanged when the run has no shadow results."""
    from bench.loop_report import run_note, splice, splice_target

    label = str(results.get("machine_label", ""))
    machine = results.get("machine") or {}
    section = section_shadow(results.get("shadow"), label, machine, run_note(results, "shadow"))
    if not section:
        return document
    text = splice(document, section, HEADING)
    for row in headline_rows(results.get("shadow")):
        text = splice_target(text, row)
    return text
