"""BENCHMARKS.md's section on forced batches (bench/linger.py's results): pure formatting and
arithmetic, no timing, no servers.

The question it answers (issue 42): how much of the event loop's cost per message does a batch
save when the wait that gathers it is paid, and what does that wait cost the p99? From the runs
it fits the event loop's CPU per message as

    per_message + per_fetch / records_per_fetch + per_poll x polls_per_message

(least squares over every run), where the embedded broker is polled 1000 / fetch_max_wait_ms
times a second whatever arrives (it holds every fetch for the whole wait). So the floor that no
batch size removes is read off, and with it the batch a target needs with and without the polls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from bench.shadow_report import figure, host_line, p50, p99, ranged, spread_of, table
from bench.versus_report import LOOP_MS, fetched, loop_ms, process_ms
from moderator.config import Settings

HEADING = "## 13. Forced batches: what a longer wait buys on this host"
BUDGET_MS = 50.0  # the p99 the goodput search holds every run to (bench/goodput.py)
SHIPPED_WAIT_MS = float(Settings().fetch_max_wait_ms)  # what an arm runs with unless it sets one

Row = Mapping[str, Any]


class Fit(NamedTuple):
    """Event loop CPU-ms per message = per_message + per_fetch / (records per fetch)
    + per_poll x (broker polls per message)."""

    per_message: float
    per_fetch: float
    per_poll: float
    runs: int

    def at(self, batch: float, idle_polls: float) -> float:
        """The event loop per message at `batch` records a fetch, the broker polled `idle_polls`
        times a message when nothing arrives (and at least once a fetch)."""
        return (self.per_message + self.per_fetch / batch
                + self.per_poll * max(idle_polls, 1.0 / batch))  # fmt: skip

    def batch_for(self, target_ms: float, idle_polls: float) -> float | None:
        """The records per fetch that bring the event loop to `target_ms`, or None when the cost
        a message and its idle polls alone is at or above it."""
        if self.per_message + self.per_poll * idle_polls >= target_ms:
            return None
        few = self.per_fetch / (target_ms - self.per_message - self.per_poll * idle_polls)
        if idle_polls and 1.0 / few <= idle_polls:
            return few  # the idle polls outnumber the fetches: each fetch costs per_fetch more
        return (self.per_fetch + self.per_poll) / (target_ms - self.per_message)


def idle_polls(wait_ms: float, rate: float) -> float:
    """The polls a message carries at `rate` when the embedded broker holds each fetch for the
    whole `wait_ms`, data or not: it is asked 1000 / wait_ms times a second."""
    return 1000.0 / wait_ms / rate


def polls_per_message(row: Row, arms: Mapping[str, Mapping[str, str]]) -> float:
    """The broker polls a decided message carries in `row`: its idle polls, and at least one
    for each fetch that brought records."""
    settings = arms.get(str(row["arm"])) or {}
    wait_ms = float(settings.get("fetch_max_wait_ms", SHIPPED_WAIT_MS))
    batch = fetched(row)
    return max(idle_polls(wait_ms, float(row["rate"])), 1.0 / batch if batch else 0.0)


def fit(runs: Sequence[Row], arms: Mapping[str, Mapping[str, str]]) -> Fit | None:
    """Least squares of the event loop per message on 1 / records per fetch and polls per
    message, over `runs` with both; None unless the runs fix all three terms."""
    points = [([1.0, 1.0 / b, polls_per_message(r, arms)], e)
              for r, b, e in ((r, fetched(r), loop_ms(r)) for r in runs)
              if b and e is not None]  # fmt: skip
    x = np.array([p for p, _ in points])
    if len(points) < 3 or np.linalg.matrix_rank(x) < 3:
        return None
    (a, per_fetch, per_poll), *_ = np.linalg.lstsq(x, np.array([e for _, e in points]), rcond=None)
    return Fit(float(a), float(per_fetch), float(per_poll), len(points))


def _arms(runs: Sequence[Row]) -> list[str]:
    return list(dict.fromkeys(str(r["arm"]) for r in runs))


def _settings(settings: Mapping[str, str] | None) -> str:
    if not settings:
        return "as shipped"
    return " ".join(f"`{key}={value}`" for key, value in settings.items())


def _arm_rows(runs: Sequence[Row], arms: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for arm in _arms(runs):
        mine = [r for r in runs if r["arm"] == arm]
        p99s = spread_of(mine, p99)
        inside = sum(1 for v in map(p99, mine) if v is not None and v <= BUDGET_MS)
        within = f"{inside} of {len(mine)}"
        rows.append([arm, _settings(arms.get(arm)),
                     str(len(mine)), ranged(spread_of(mine, fetched), lambda v: figure(v, 2)),
                     ranged(spread_of(mine, p50)), ranged(p99s), within,
                     ranged(spread_of(mine, loop_ms), lambda v: figure(v, 2)),
                     ranged(spread_of(mine, process_ms), lambda v: figure(v, 2))])  # fmt: skip
    return rows


def _fit_lines(f: Fit | None, rate: float) -> list[str]:
    if f is None:
        return ["Too few distinct arms to fit the event loop's cost."]
    polls = idle_polls(SHIPPED_WAIT_MS, rate)
    on_broker = f.batch_for(LOOP_MS, polls)
    without = f.batch_for(LOOP_MS, 0.0)

    def reach(batch: float | None) -> str:
        if batch is None:
            return f"no batch size brings it to {LOOP_MS} ms"
        arrivals = figure(batch / rate * 1000, 0)
        return (f"{figure(batch, 1)} records a fetch bring it to {LOOP_MS} ms, {arrivals} ms "
                f"of arrivals at {figure(rate)} msgs/s")  # fmt: skip

    return [f"Fitted over the {f.runs} runs, the event loop costs **{figure(f.per_message, 2)} "
            f"CPU-ms a message, {figure(f.per_fetch, 2)} a fetch and {figure(f.per_poll, 2)} a "
            f"poll of the broker**. At the embedded broker's {SHIPPED_WAIT_MS:g} ms "
            f"wait ({figure(polls, 1)} polls a message at {figure(rate)} msgs/s) "
            f"{reach(on_broker)}; with no idle polls (a broker that answers a fetch when data "
            f"arrives) {reach(without)}."]  # fmt: skip


def section_linger(results: Mapping[str, Any] | None, label: str, machine: Mapping[str, Any],
                   note: str = "") -> list[str]:  # fmt: skip
    """The section's lines, or [] when there are no runs yet."""
    runs = (results or {}).get("runs") or []
    if not results or not runs:
        return []
    rate = figure(float(results.get("rate", 0.0)))
    intro = (f"`python -m bench.linger` (bench/linger.py): the moderator as the old-against-new "
             f"section runs it (the score cache, review context and every `[users]` rule on, so "
             f"each message pays its Redis round trips), open loop at {rate} msgs/s, "
             f"{figure(float(results.get('duration_s', 0.0)), 0)} s a run, the arms in rounds "
             f"in order then reversed. *as shipped*: the pacer decides, inside the 50 ms "
             f"budget; a forced arm raises the budget the pacer reads to "
             f"{figure(float(results.get('forced_budget_ms', 0.0)), 0)} ms so it always waits "
             f"up to its cap (`MODERATOR_FETCH_LINGER_MAX_MS`) to gather the records that "
             f"rate brings. *fetch wait 500 ms*: the broker may hold each fetch half a second, so "
             f"fetches are few and large and idle polls fewer still: the event loop's cost with "
             f"little of either (the broker's hold is latency here). Every p99 "
             f"is held to {figure(BUDGET_MS, 0)} ms as in the goodput "
             f"search. *fetch*: records per fetch; *event loop*, *process*: CPU-ms per decided "
             f"message (bench/cpu.py).")  # fmt: skip
    arms = results.get("arms") or {}
    out = [HEADING, "", intro, "", host_line(machine, label), ""]
    if note:
        out += [note, ""]
    out += table(["arm", "settings", "runs", "fetch", "p50 ms", "p99 ms", "runs within 50 ms",
                  "event loop", "process"], _arm_rows(runs, arms), left=2)  # fmt: skip
    out += ["", *_fit_lines(fit(runs, arms), float(results.get("rate", 0.0)) or 1.0), ""]
    return out


def merge_linger(results: Mapping[str, Any], document: str) -> str:
    """`document` (a BENCHMARKS.md) with this section put in, the rest as it was."""
    from bench.loop_report import run_note, splice

    section = section_linger(results.get("linger"), str(results.get("machine_label", "")),
                             results.get("machine") or {}, run_note(results, "linger"))  # fmt: skip
    return splice(document, section, HEADING) if section else document
