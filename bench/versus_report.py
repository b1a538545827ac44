"""BENCHMARKS.md's section on the old commit against the new (bench/versus.py's results): pure
formatting and arithmetic, no timing, no servers.

Issue 42's targets, each read from medians over the alternating rounds of one run: the new
goodput at least 1.4x the old; the new event loop's CPU per message at 100 and 200 msgs/s at most
0.7 ms; the heavy stand-in's goodput at least 90% of the old commit's with the shipped model;
the new p50 at 50 msgs/s not above the highest of the old runs' (bench/pairs.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.pairs import Spread, spread, unaffected
from bench.shadow_report import figure, host_line, p50, p99, ranged, runs_of, spread_of, table

HEADING = "## 11. Old commit against new: batches that grow with load"
NAMES = {"old": "old", "new": "new", "heavy": "new, heavy stand-in", "quix": "Quix Streams"}
GOODPUT_RATIO = 1.4
LOOP_MS = 0.7
LOOP_RATES = (100.0, 200.0)
HEAVY_SHARE = 0.9
QUIET_RATE = 50.0

Row = Mapping[str, Any]


def cpu(row: Row, role: str) -> float | None:
    value = (row.get("cpu_ms_per_msg") or {}).get(role)
    return None if value is None else float(value)


def loop_ms(row: Row) -> float | None:
    return cpu(row, "event loop")


def process_ms(row: Row) -> float | None:
    """The deciding process's CPU-ms per message: event loop, scorer, model pool and other."""
    parts = [cpu(row, role) for role in ("event loop", "scorer", "model pool & other")]
    return None if parts[0] is None else sum(p or 0.0 for p in parts)


def fetched(row: Row) -> float | None:
    """Mean records per fetch, where the moderator counts fetches (the new intake)."""
    c = row.get("counters") or {}
    fetches = c.get("fetches")
    return float(c["consumed"]) / float(fetches) if fetches else None


def model_batch(row: Row) -> float | None:
    value = (row.get("batches") or {}).get("mean_size")
    return None if value is None else float(value)


def trips(row: Row) -> float | None:
    """Redis round trips per consumed message, every part and the users' steps."""
    c = row.get("counters") or {}
    if not c.get("consumed"):
        return None
    return float(sum((c.get("round_trips") or {}).values())) / float(c["consumed"])


def goodputs(searches: Sequence[Row], arm: str) -> Spread | None:
    return spread(float(s["goodput"]) for s in searches if s["arm"] == arm and s["goodput"])


def at_goodput(search: Row) -> Row | None:
    """The last passing probe at the search's goodput."""
    return next((p for p in reversed(search.get("probes") or [])
                 if p.get("ok") and float(p["rate"]) == search.get("goodput")), None)  # fmt: skip


def _word(met: bool | None) -> str:
    return {True: "met", False: "missed", None: "not measured"}[met]


def targets(v: Mapping[str, Any]) -> list[list[str]]:
    """[measure, target, measured, verdict] per issue 42 target the run measured."""
    runs, searches = v.get("runs") or [], v.get("searches") or []
    out = []
    old, new, heavy = (goodputs(searches, a) for a in ("old", "new", "heavy"))
    if old and new:
        ratio = new.median / old.median
        out.append(["goodput new / old (p99 <= 50 ms)", f">= {GOODPUT_RATIO}x",
                    f"{ratio:.2f}x ({new.median:.1f} / {old.median:.1f} msgs/s)",
                    _word(ratio >= GOODPUT_RATIO)])  # fmt: skip
    found: list[tuple[float, Spread]] = []
    for rate in LOOP_RATES:
        if (loop := spread_of(runs_of(runs, rate, "new"), loop_ms)) is not None:
            found.append((rate, loop))
    if found:
        said = "; ".join(f"{figure(rate, 0)}/s: {s.median:.2f}" for rate, s in found)
        low = all(s.median <= LOOP_MS for _, s in found)
        out.append(["event loop CPU-ms per message, new", f"<= {LOOP_MS} at 100 and 200 msgs/s",
                    said, _word(low if len(found) == len(LOOP_RATES) else None)])  # fmt: skip
    if old and heavy:
        share = heavy.median / old.median
        cost = (v.get("cost") or {}).get("ratio")
        out.append(["goodput, new with a heavier model / old", f">= {HEAVY_SHARE:.0%}",
                    f"{share:.0%} ({heavy.median:.1f} / {old.median:.1f} msgs/s; the model "
                    f"{cost}x as costly)", _word(share >= HEAVY_SHARE)])  # fmt: skip
    quiet_old = spread_of(runs_of(runs, QUIET_RATE, "old"), p50)
    quiet_new = spread_of(runs_of(runs, QUIET_RATE, "new"), p50)
    met = unaffected(quiet_new.median if quiet_new else None, quiet_old)
    if met is not None and quiet_new and quiet_old:
        out.append([f"p50 at {figure(QUIET_RATE, 0)} msgs/s, new vs old", "not above old's runs",
                    f"{quiet_new.median:.1f} ms (old {quiet_old.low:.1f}–{quiet_old.high:.1f})",
                    _word(met)])  # fmt: skip
    return out


def _intro(v: Mapping[str, Any]) -> str:
    cost = v.get("cost") or {}
    plan = v.get("goodput_plan") or {}
    hop = v.get("hop") or {}
    return (
        f"Old `{v.get('old_commit')}` against new `{v.get('new_commit')}` in one run "
        "(`python -m bench.versus OLD_TREE`, bench/versus.py): the old commit's moderator runs "
        "from its own checkout, on the same broker (embedded Tansu, "
        f"{v.get('partitions')} partitions), interpreter and load generator. Every moderator: "
        f"{v.get('threads')} threads, the score cache on (L1 and a fresh Redis per run), review "
        "context on, and the default policy with every `[users]` rule on at limits the traffic "
        f"cannot reach ({v.get('users_limit'):,}), so each message pays the users' and the cache's "
        "Redis round trips. **heavy**: the new moderator with the minilm-l15 speed shape "
        f"(`{cost.get('heavy_model')}`: random weights, MiniLM's width 15 layers deep, over the "
        "default tokenizer, quantized as the shipped model is; multilingual-e5-small is that "
        "width 12 deep and reads English chat in about 1.3x MiniLM's tokens), measured here at "
        f"{figure(cost.get('heavy_ms'), 2)} CPU-ms a "
        f"message against the shipped model's {figure(cost.get('default_ms'), 2)}, one message "
        f"per call, {cost.get('rounds')} alternating rounds: **{cost.get('ratio')}x**; its "
        "labels are none of the policy's, so it holds nothing for review. **Quix Streams**: the "
        "peer of section 8 (its main thread counted as its event loop, the model included: it "
        "scores there); it has no score cache, users' rules or review context, so beside it "
        "the moderator's figures carry what those cost as well as the runtime's own. Traffic: "
        "the load generator's, the same seed, no repeats; fixed rates "
        f"{v.get('duration_s')} s a run, in rounds of old, new and the peer, in order then "
        "reversed (bench/pairs.py). Goodput: "
        "section 9's search (p99 end to end <= "
        f"{figure(v.get('budget_ms'), 0)} ms, every message decided; from {plan.get('start')} "
        f"msgs/s up by x{plan.get('factor')}, bisecting to {plan.get('resolution', 0):.0%}, "
        f"{plan.get('duration_s')} s a probe, at most {plan.get('max_probes')} probes), one "
        "search per arm per round, in order then reversed. *event loop* and *process*: CPU-ms "
        "per decided message (bench/cpu.py; process is the event loop, scorer and model pool); "
        "*fetch*: records per fetch (the new intake counts fetches; the old does not); *model "
        "batch*: messages per model call; *Redis*: round trips per message. Broker hop alone "
        f"p50 {figure(hop.get('p50_ms'), 2)} ms, p99 {figure(hop.get('p99_ms'), 2)} ms."
    )


def _run_rows(rows: Sequence[Row]) -> list[list[str]]:
    return [[str(r["pair"] + 1), NAMES[str(r["arm"])], f"{r['decided']}/{r['sent']}",
             figure(p50(r)), figure(p99(r)), figure(loop_ms(r), 2), figure(process_ms(r), 2),
             figure(cpu(r, "broker"), 2), figure(fetched(r), 2), figure(model_batch(r), 2),
             figure(trips(r), 2)] for r in rows]  # fmt: skip


def _arm_rows(runs: Sequence[Row], rate: float) -> list[list[str]]:
    out = []
    for arm in ("old", "new", "quix"):
        rows = runs_of(runs, rate, arm)
        if rows:
            out.append([NAMES[arm], str(len(rows)), ranged(spread_of(rows, p50)),
                        ranged(spread_of(rows, p99)), ranged(spread_of(rows, loop_ms), _ms),
                        ranged(spread_of(rows, process_ms), _ms),
                        ranged(spread_of(rows, fetched), _ms),
                        ranged(spread_of(rows, trips), _ms)])  # fmt: skip
    return out


def _ms(value: float | None) -> str:
    return figure(value, 2)


def _search_rows(searches: Sequence[Row]) -> list[list[str]]:
    out = []
    for s in searches:
        at = at_goodput(s) or {}
        out.append([str(s["pair"] + 1), NAMES[str(s["arm"])], figure(s.get("goodput")),
                    "confirmed" if s.get("confirmed") else "out of probes",
                    str(len(s.get("probes") or [])), figure(p99(at)) if at else "–",
                    figure(loop_ms(at), 2) if at else "–",
                    figure(fetched(at), 2) if at else "–"])  # fmt: skip
    return out


def _probe_rows(searches: Sequence[Row]) -> list[list[str]]:
    return [[NAMES[str(s["arm"])], str(s["pair"] + 1), figure(float(p["rate"])),
             "yes" if p.get("ok") else "no", f"{p['decided']}/{p['sent']}", figure(p50(p)),
             figure(p99(p)), figure(loop_ms(p), 2), str(p.get("loadavg", ""))]
            for s in searches for p in s.get("probes") or []]  # fmt: skip


def section_versus(v: Mapping[str, Any] | None, label: str, machine: Mapping[str, Any],
                   note: str = "") -> list[str]:  # fmt: skip
    """The section's lines, or [] when the run has no results."""
    if not v or not (v.get("runs") or v.get("searches")):
        return []
    runs, searches = v.get("runs") or [], v.get("searches") or []
    out = [HEADING, "", _intro(v), "", host_line(machine, label), ""]
    if note:
        out += [note, ""]
    for rate in v.get("rates") or []:
        rows = [r for r in runs if float(r["rate"]) == float(rate)]
        if not rows:
            continue
        out += [f"### Open loop at {figure(rate)} msgs/s ({label})", ""]
        out += table(["round", "arm", "decided", "p50 ms", "p99 ms", "event loop", "process",
                      "broker", "fetch", "model batch", "Redis"], _run_rows(rows))  # fmt: skip
        out += ["", "Per arm, the median over its runs (their range in brackets):", ""]
        out += table(["arm", "runs", "p50 ms", "p99 ms", "event loop", "process", "fetch",
                      "Redis"], _arm_rows(runs, rate))  # fmt: skip
        out.append("")
    if searches:
        out += [f"### Goodput inside the budget ({label})", ""]
        out += table(["round", "arm", "goodput msgs/s", "search", "probes", "p99 there",
                      "event loop there", "fetch there"], _search_rows(searches))  # fmt: skip
        spreads = [(arm, goodputs(searches, arm)) for arm in ("old", "new", "heavy")]
        said = "; ".join(f"{NAMES[arm]} {ranged(s)}" for arm, s in spreads if s)
        out += ["", f"Goodput per arm, the median over its searches (range): {said} msgs/s.", ""]
        out += ["Every probe, in the order run:", ""]
        out += table(["arm", "round", "rate", "within budget", "decided", "p50", "p99",
                      "event loop", "load average"], _probe_rows(searches))  # fmt: skip
        out.append("")
    rows = targets(v)
    if rows:
        out += ["Targets (issue 42):", ""]
        out += table(["measure", "target", "measured", ""], rows, left=1)
        out.append("")
    return out


def merge_versus(results: Mapping[str, Any], out: Path) -> None:
    """Put the run's section and its Targets rows into `out` (a BENCHMARKS.md), the rest as it
    was; nothing when `out` does not exist or the run has nothing yet."""
    from bench.loop_report import run_note, splice, splice_target

    if not out.is_file():
        return
    v = results.get("versus")
    section = section_versus(v, str(results.get("machine_label", "")),
                             results.get("machine") or {}, run_note(results, "versus"))  # fmt: skip
    if not section:
        return
    text = out.read_text()
    for row in targets(v or {}):  # first: the section repeats the rows, the top table comes first
        text = splice_target(text, row)
    out.write_text(splice(text, section, HEADING))
