"""BENCHMARKS.md's peer section: the moderator beside the Quix Streams application
(bench/peer.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import mean, median
from typing import Any

from bench.cpu import ROLES
from bench.peer import ARMS, by_arm

HEADING = "## 8. Side by side with a peer: Quix Streams"
BUDGET_MS = 50.0  # issue 31's p99 budget, end to end
NAMES = {"moderator": "moderator", "moderator-1": "moderator, 1 scoring thread",
         "quix": "Quix Streams"}  # fmt: skip


def figure(value: float | None, digits: int = 1) -> str:
    """`value` to `digits` decimals; a dash for a figure the run did not measure."""
    return "–" if value is None else f"{value:.{digits}f}"


def process_ms(row: Mapping[str, Any]) -> float:
    """CPU-ms per decided message of the deciding process itself (every thread of it), without
    the broker and the load generator."""
    cpu = row.get("cpu_ms_per_msg") or {}
    return float(sum(cpu.get(role, 0.0) for role in ROLES[:3]))


def run_rows(runs: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """One table row per run, in the order run."""
    out = []
    for r in runs:
        cpu = r.get("cpu_ms_per_msg") or {}
        out.append([
            NAMES.get(r["arm"], r["arm"]), str(r["pair"]), f"{r['decided']}/{r['sent']}",
            figure(r.get("p50_ms")), figure(r.get("p99_ms")), figure(r.get("p999_ms")),
            f"{100 * float(r.get('over_budget_ratio') or 0):.0f}%",
            *[figure(cpu.get(role), 2) for role in ROLES], figure(process_ms(r), 2),
            figure(cpu.get("total"), 2), str(r.get("loadavg", "–")),
        ])  # fmt: skip
    return out


def arm_summary(runs: Sequence[Mapping[str, Any]], rate: float, arm: str) -> dict[str, float]:
    """`arm`'s runs at `rate`: the median p50 and p99 and the mean process CPU per message."""
    rows = by_arm(runs, rate, arm)
    if not rows:
        return {}
    return {
        "p50_ms": median(float(r["p50_ms"]) for r in rows),
        "p99_ms": median(float(r["p99_ms"]) for r in rows),
        "process_ms": mean(process_ms(r) for r in rows),
        "missing": sum(int(r.get("missing") or 0) for r in rows),
    }


def table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """A Markdown table's lines, its first `left` columns left-aligned, the rest right."""
    align = [":---"] * left + ["---:"] * (len(header) - left)
    return ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |",
            *["| " + " | ".join(row) + " |" for row in rows]]  # fmt: skip


def section_peer(peer: Mapping[str, Any] | None, label: str, note: str = "") -> list[str]:
    """The section's lines, or [] when the run has no peer results."""
    if not peer or not peer.get("runs"):
        return []
    runs = peer["runs"]
    hop = peer.get("hop") or {}
    out = [
        HEADING, "",
        "The moderator (`moderator run`, cache off) beside a Quix Streams application "
        f"(`bench/quix_peer.py`, {peer.get('quixstreams', 'quixstreams')}, librdkafka "
        "underneath) that reads the same topic, scores each message with the same ONNX model "
        "(`Classifier`; one call at a time on the intra-op threads the moderator gives each of "
        "its batches, where the moderator runs as many batches at once as it has threads) and "
        "the same default policy (`Policy`: deny "
        "terms, then the scores), and writes one decision per message, written as Quix Streams' "
        "documentation shows (`Application`, `app.topic`, `sdf.apply`, `sdf.to_topic`): one "
        "message per model call. It does less than the moderator: no windows for long "
        "messages, no language gate, no cache, no users' rules, no review. Same embedded Tansu "
        "broker, the load generator's traffic with the same seed and no repeats; at each rate "
        "the two take turns (moderator then peer, then peer then moderator), each run a fresh "
        "process, topics and group warmed by 64 messages. CPU is CPU-ms per decided message by "
        "role (bench/cpu.py): for the peer, \"event loop\" is its main thread (the Quix loop, "
        "and the model call: `sdf.apply` runs it there) and \"model pool & other\" its other "
        "threads (librdkafka's, ONNX Runtime's pool); \"process\" is the three roles of the "
        "deciding process, without the broker and the load generator. "
        f"Runs of {peer.get('duration_s')} s each; broker hop alone p50 "
        f"{figure(hop.get('p50_ms'), 2)} ms, p99 {figure(hop.get('p99_ms'), 2)} ms.",
        "",
    ]  # fmt: skip
    if note:
        out += [note, ""]
    out += ["### The peer's settings", "",
            "Tuned for latency as Quix Streams' `Application` and librdkafka's configuration "
            "allow; delivery is not weakened (at-least-once, acks=all, the idempotent producer "
            "Quix Streams turns on). Everything not listed is the library's default.",
            ""]  # fmt: skip
    settings = [[w, f"`{k}`", f"`{v}`"] for w, k, v in peer.get("settings") or []]
    out += table(["where", "setting", "value"], settings, left=2)
    out.append("")
    for rate in peer.get("rates") or []:
        rows = [r for r in runs if r["rate"] == round(rate, 1)]
        if not rows:
            continue
        out += [f"### Open loop at {figure(rate)} msgs/s ({label})", ""]
        out += table(["arm", "pair", "decided", "p50", "p99", "p99.9", f"over {BUDGET_MS:.0f} ms",
                      *ROLES, "process", "total", "load average"], run_rows(rows))  # fmt: skip
        out.append("")
        ours, theirs = (arm_summary(runs, rate, arm) for arm in ARMS)
        if ours and theirs:
            ratio = ours["process_ms"] / theirs["process_ms"] if theirs["process_ms"] else None
            out += [
                f"Medians over the pairs: moderator p50 {figure(ours['p50_ms'])} ms, p99 "
                f"{figure(ours['p99_ms'])} ms; Quix Streams p50 {figure(theirs['p50_ms'])} ms, p99 "
                f"{figure(theirs['p99_ms'])} ms. Process CPU per decided message (mean): "
                f"moderator {figure(ours['process_ms'], 2)} ms, Quix Streams "
                f"{figure(theirs['process_ms'], 2)} ms (moderator / peer {figure(ratio, 2)}). "
                f"Missing decisions: moderator {ours['missing']:.0f}, Quix Streams "
                f"{theirs['missing']:.0f}.",
                "",
            ]  # fmt: skip
    return out
