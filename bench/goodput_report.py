"""BENCHMARKS.md's goodput section: the highest open-loop rate within the p99 budget, for the
moderator and the Quix Streams peer, with the CPU split and the host bound (bench/goodput.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.cpu import ROLES
from bench.peer_report import NAMES, figure, process_ms, table

HEADING = "## 9. Goodput inside the budget"


def _probe_rows(probes: list[Mapping[str, Any]]) -> list[list[str]]:
    return [
        [str(i + 1), figure(p["rate"]), "yes" if p["ok"] else "no", f"{p['decided']}/{p['sent']}",
         figure(p.get("p50_ms")), figure(p.get("p99_ms")), figure(process_ms(p), 2),
         str(p.get("loadavg", "–"))]
        for i, p in enumerate(probes)
    ]  # fmt: skip


def _idle(idle: list[Mapping[str, Any]], rate: float | None) -> list[str]:
    """The idle moderator's CPU at each fetch wait, and what it adds per message at `rate`."""
    if not idle:
        return []
    rows = []
    for r in idle:
        cpu = r["cpu_ms_per_s"]
        own = sum(cpu.get(role, 0.0) for role in ROLES[:3])
        at_rate = f"{own / rate:.2f}" if rate else "–"
        rows.append([str(r["fetch_max_wait_ms"]), *[figure(cpu.get(role)) for role in ROLES[:4]],
                     figure(own), at_rate])  # fmt: skip
    return [
        "### Idle CPU and the fetch wait", "",
        "A warm moderator with no traffic for 20 s, CPU-ms per second by role. The embedded "
        "broker holds every fetch for the full `fetch_max_wait_ms` even when data arrives, so "
        "the bench (and the default, 5 ms) polls about 200 times a second to keep latency low; "
        "a broker that answers a fetch as soon as data arrives (Apache Kafka with "
        "`fetch.min.bytes` 1) lets the wait be long at no cost in latency, and the longer rows "
        "are what idle costs there. The last column spreads the idle moderator's CPU over the "
        "moderator's goodput rate: what polling adds to each message's CPU at that rate.", "",
        *table(["fetch_max_wait_ms", *[f"{role} CPU-ms/s" for role in ROLES[:4]],
                "moderator CPU-ms/s", "per message at goodput (ms)"], rows),
        "",
    ]  # fmt: skip


def section_goodput(g: Mapping[str, Any] | None, label: str, note: str = "") -> list[str]:
    """The section's lines, or [] when the run has no goodput results."""
    if not g or not g.get("arms"):
        return []
    hop = g.get("hop") or {}
    budget = g.get("budget_ms", 50.0)
    out = [
        HEADING, "",
        f"The highest open-loop rate at which p99 end to end (the load generator's send to its "
        f"receipt of the decision, harness included) stays <= {budget:.0f} ms with every message "
        f"decided, found by search (`bench/goodput.py`): from {figure(g.get('start'))} msgs/s up "
        f"by x{g.get('factor')} while probes pass, then geometric bisection until the lowest "
        f"failing rate is within {100 * float(g.get('resolution', 0)):.0f}% of the best, which "
        "is run once more to confirm it; a rate counts only while no probe at or below it has "
        f"failed. Each probe is one run of {g.get('duration_s')} s, a "
        "fresh process, topics and group, warmed first: the runs of section 8 (moderator cache "
        "off, the peer as listed there); the moderator runs once with its default threads (one "
        "scorer per core) and once with `MODERATOR_THREADS=1`, which leaves a core to the event "
        "loop, the broker and the load generator. Host bound: the rate "
        f"{g.get('cores')} cores could carry if deciding cost no more than the bare model, "
        f"cores / (bare model + broker + load generator CPU per message); bare model "
        f"{figure(g.get('bare_model_ms'), 2)} CPU-ms per message (one message per call, tokenizing "
        "included, in the bench process), broker and load generator from the run at the "
        f"arm's goodput. Broker hop alone p50 {figure(hop.get('p50_ms'), 2)} ms, p99 "
        f"{figure(hop.get('p99_ms'), 2)} ms ({label}).",
        "",
    ]  # fmt: skip
    if note:
        out += [note, ""]
    arms = g["arms"]
    rows = []
    for arm, a in arms.items():
        at = next((p for p in reversed(a["probes"]) if p["ok"] and p["rate"] == a["goodput"]),
                  None)  # fmt: skip
        cpu = (at or {}).get("cpu_ms_per_msg") or {}
        bound = a.get("host_bound")
        share = a["goodput"] / bound if a["goodput"] and bound else None
        confirmed = " (confirmed)" if a.get("confirmed") else " (one run: out of probes)"
        goodput = figure(a["goodput"]) + (confirmed if a["goodput"] else "")
        rows.append([NAMES.get(arm, arm), goodput, figure(at and at.get("p99_ms")),
                     *[figure(cpu.get(role), 2) for role in ROLES],
                     figure(at and process_ms(at), 2), figure(bound),
                     "–" if share is None else f"{share:.0%}"])  # fmt: skip
    out += table(["arm", "goodput (msgs/s)", "p99 there", *ROLES, "process", "host bound",
                  "of host bound"], rows)  # fmt: skip
    out.append("")
    ours, theirs = (arms.get(k, {}).get("goodput") for k in ("moderator", "quix"))
    for key in ("moderator", "moderator-1"):
        mine = arms.get(key, {}).get("goodput")
        if mine and theirs:
            out += [f"{NAMES[key].capitalize()} / Quix Streams goodput: {mine / theirs:.2f}x "
                    "(issue 31 asks >= 1.5x, and >= 60% of the host bound).", ""]  # fmt: skip
    out += _idle(g.get("idle") or [], ours)
    for arm, a in arms.items():
        out += [f"### Probes: {NAMES.get(arm, arm)}", ""]
        out += table(["#", "rate", "within budget", "decided", "p50", "p99", "process CPU-ms",
                      "load average"], _probe_rows(a["probes"]), left=0)  # fmt: skip
        out.append("")
    return out
