"""BENCHMARKS.md from a results dict: pure formatting, no timing, no servers.

Every table is headed by the machine label (cores and CPU flags). A section whose results are
missing (a partial run) says so instead of failing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.cpu import ROLES, harness_ms, model_ms
from bench.goodput_report import section_goodput
from bench.loop_report import headline_row, run_note, section_loop
from bench.peer_report import section_peer
from bench.shadow_report import headline_rows, section_shadow

TARGET_LADDER_X = 30.0
TARGET_PIPELINE_SHARE = 0.90
TARGET_P50_MS = 15.0
TARGET_P99_MS = 50.0
TARGET_CACHE_X = 1.5
SHAPE_NAMES = {"distilbert-base": "DistilBERT-shape", "minilm-l6": "MiniLM-L6 (default model)"}


def ratio(value: float | None, base: float | None) -> float | None:
    """value / base, or None when either is missing or base is zero."""
    if value is None or base is None or base == 0:
        return None
    return value / base


def fmt_x(value: float | None) -> str:
    """A speed-up: '31.2x', '0.85x', '-' when unknown."""
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.0f}x"
    if value >= 10:
        return f"{value:.1f}x"
    return f"{value:.2f}x"


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def fmt_rate(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def fmt_mb(kb: int | None) -> str:
    return "-" if kb is None else f"{kb / 1024:.0f} MB"


def _number_like(cell: str) -> bool:
    core = cell.strip().removesuffix(" MB").rstrip("x%").replace(",", "").replace(".", "", 1)
    return core.isdigit() or (core.count("/") == 1 and core.replace("/", "").isdigit())


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table; numeric-looking columns right-aligned."""

    def numeric(col: int) -> bool:
        cells = [r[col] for r in rows if r[col] not in ("-", "")]
        return bool(cells) and all(_number_like(c) for c in cells)

    align = ["---:" if numeric(i) else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def verdict(met: bool | None, how: str) -> str:
    if met is None:
        return f"not measured ({how})"
    return ("**met**: " if met else "**missed**: ") + how


# -- sections -------------------------------------------------------------------------------


def ladder_rows(baseline: Mapping[str, Any], rungs: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """Rows: rung, threads, p50, per-message ratio, msgs/s, throughput ratio, step, note."""
    rows = []
    base_p50 = baseline.get("p50_ms")
    base_rate = baseline.get("msgs_per_s")
    previous: float | None = None
    for rung in [baseline, *rungs]:
        p50 = rung.get("p50_ms")
        rate = rung.get("msgs_per_s")
        per_msg = ratio(base_p50, p50) if rung.get("mode") == "batch1" else None
        step = ratio(rate, previous) if previous is not None else None
        rows.append([
            rung.get("label", rung.get("key", "?")),
            str(rung.get("threads", "-")),
            fmt_ms(p50) if rung.get("mode") == "batch1" else "-",
            fmt_x(per_msg),
            fmt_rate(rate),
            fmt_x(ratio(rate, base_rate)),
            fmt_x(step),
            rung.get("note", ""),
        ])  # fmt: skip
        if rung.get("key", "").startswith("threads-") and rung.get("key") != "threads-2":
            continue  # the thread rungs are alternatives; the chain goes on from threads = 2
        if rung.get("key") != "repeats-nocache":
            previous = rate
    return rows


def best_ladder_x(baseline: Mapping[str, Any], rungs: Sequence[Mapping[str, Any]]) -> float | None:
    """The highest throughput ratio to the baseline on one shape's ladder."""
    values = [ratio(r.get("msgs_per_s"), baseline.get("msgs_per_s")) for r in rungs]
    known = [v for v in values if v is not None]
    return max(known) if known else None


def rung(rungs: Sequence[Mapping[str, Any]], key: str) -> Mapping[str, Any] | None:
    return next((r for r in rungs if r.get("key") == key), None)


def section_ladder(ladder: Mapping[str, Any] | None, label: str) -> list[str]:
    out = ["## 1. The ladder", ""]
    if not ladder or "baseline" not in ladder:
        return [*out, "_Not run (partial run)._", ""]
    base = ladder["baseline"]
    out += [
        f"Machine: **{label}**. Every rung scores the same chat lines from the load generator's "
        f"corpus ({ladder.get('texts_note', '')}), tokenization included. Per message: batch of "
        "one, each text timed alone, p50 over the texts the time box allowed (padded rungs cost "
        "the same whatever the text). Throughput: messages over wall time of the same loop; the "
        "backlog rungs score a whole backlog through the runtime's `MicroBatcher` (length-sorted "
        "micro-batches) and report messages per second. Ratios are to the baseline (BERT-base "
        "fp32, `transformers` on PyTorch, padded to 128, same threads); *step* is the ratio to "
        "the rung above in the chain. Weights are random: speed does not depend on their values, "
        "so a random-weight model of a shape times exactly like a trained one.",
        "",
    ]
    for shape, rungs in ladder.get("rungs", {}).items():
        out += [f"### {SHAPE_NAMES.get(shape, shape)} ({label})", ""]
        out.append(table(
            ["rung", "threads", "p50 ms/msg", "per msg vs baseline", "msgs/s",
             "throughput vs baseline", "step", "note"],
            ladder_rows(base, rungs),
        ))  # fmt: skip
        out.append("")
        if shape == "distilbert-base":
            best = best_ladder_x(base, rungs)
            single = rung(rungs, "fused")
            single_x = ratio(single.get("msgs_per_s"), base.get("msgs_per_s")) if single else None
            met = None if best is None else best >= TARGET_LADDER_X
            per_msg = ratio(base.get("p50_ms"), single.get("p50_ms")) if single else None
            out.append(
                "Target ≥ 30x over the baseline for the DistilBERT shape: "
                + verdict(
                    met,
                    f"best rung {fmt_x(best)} in throughput; at batch of one (fused int8, "
                    f"{single.get('threads') if single else '-'} threads) {fmt_x(single_x)} in "
                    f"throughput and {fmt_x(per_msg)} per message",
                )
                + ". The baseline (PyTorch's own threads) suffers more than ONNX Runtime from a "
                "busy machine, so compare its p50 with an idle machine's before quoting these."
            )
            out.append("")
    return out


def _first(rows: Sequence[Mapping[str, Any]] | None) -> Mapping[str, Any]:
    return rows[0] if rows else {}


def section_scaleup(scaleup: Mapping[str, Any] | None, label: str) -> list[str]:
    out = ["## 2. Scale-up on one machine", ""]
    if not scaleup:
        return [*out, "_Not run (partial run)._", ""]
    out += [
        f"Machine: **{label}**. `moderator run` (one process, T threads) vs `moderator run "
        "--workers K` (K processes in one consumer group, each pinned to its own cores, T/K "
        "threads each), embedded Tansu broker, topics with 4 partitions, cache off. Throughput: "
        "a backlog produced at once, timed from the first send to the last decision "
        "(saturation). Latency: open loop at one common rate (half the lower saturation) from "
        "the load generator.",
        "",
    ]
    for shape, res in scaleup.items():
        rows = []
        base = None
        for lay in res.get("layouts", []):
            rate = lay["drain"]["msgs_per_s"]
            base = rate if base is None else base
            lat = lay.get("at_common_rate") or {}
            rows.append([lay["label"], fmt_rate(rate), fmt_x(ratio(rate, base)),
                         fmt_ms(lat.get("p50_ms")), fmt_ms(lat.get("p99_ms")),
                         str(lat.get("missing", "-"))])  # fmt: skip
        out += [f"### {SHAPE_NAMES.get(shape, shape)} ({label}), common rate "
                f"{fmt_rate(res.get('common_rate'))} msgs/s", ""]  # fmt: skip
        out.append(table(["layout", "saturation msgs/s", "vs 1 process", "p50 ms", "p99 ms",
                          "missing"], rows))  # fmt: skip
        out.append("")
    return out


def section_pipeline(pipeline: Mapping[str, Any] | None, label: str) -> list[str]:
    out = ["## 3. The whole pipeline vs the bare model", ""]
    if not pipeline:
        return [*out, "_Not run (partial run)._", ""]
    out += [
        f"Machine: **{label}**. Bare: the runtime's `MicroBatcher` (the service's max_batch "
        "and layout: one-thread batches, one per thread at once) scoring the backlog "
        "in-process. Pipeline: a fresh `moderator run` (cache off: no L1, "
        "no Redis) draining the same texts through the embedded Kafka broker (4 partitions), "
        "same threads; its rate is the saturation rate. Latency: the load generator, open "
        "loop, constant arrivals, no repeats, from each message's scheduled send time to its "
        "decision's "
        "arrival; the broker's own produce-to-consume hop measured alone in the same run is the "
        "floor (a message crosses it twice).",
        "",
    ]
    rows = []
    for shape, res in pipeline.items():
        bare = res.get("bare", {}).get("msgs_per_s")
        pipe = res.get("pipeline", {}).get("drain", {}).get("msgs_per_s")
        share = ratio(pipe, bare)
        rows.append([SHAPE_NAMES.get(shape, shape), str(res.get("threads", "-")),
                     fmt_rate(bare), fmt_rate(pipe), fmt_pct(share),
                     "met" if share is not None and share >= TARGET_PIPELINE_SHARE else
                     "missed" if share is not None else "-"])  # fmt: skip
    for shape, res in pipeline.items():
        prof = (res.get("pipeline") or {}).get("profile") or {}
        share = ratio(res.get("pipeline", {}).get("drain", {}).get("msgs_per_s"),
                      res.get("bare", {}).get("msgs_per_s"))  # fmt: skip
        if share is not None and share < TARGET_PIPELINE_SHARE and prof.get("samples"):
            out_of_model = [f"`{n}` {fmt_pct(v)}" for n, v in prof.get("self", [])
                            if "onnxruntime" not in n][:4]  # fmt: skip
            threads = ", ".join(f"{n} {fmt_pct(v)}" for n, v in prof.get("threads", [])[:3])
            points = round((TARGET_PIPELINE_SHARE - share) * 100)
            rows.append([f"↳ {SHAPE_NAMES.get(shape, shape)}: {points} points under the "
                         "target; busy samples by "
                         f"thread: {threads}; hottest outside the model: "
                         + ", ".join(out_of_model), "", "", "", "", ""])  # fmt: skip
    out += [f"### Throughput ({label})", "",
            table(["model", "threads", "bare msgs/s", "pipeline msgs/s", "pipeline / bare",
                   "target ≥ 90%"], rows), ""]  # fmt: skip
    for shape, res in pipeline.items():
        lat = res.get("latency")
        if not lat:
            continue
        hop = res.get("hop") or {}
        out += [f"### End-to-end latency, {SHAPE_NAMES.get(shape, shape)} ({label})", "",
                f"Saturation {fmt_rate(res['pipeline']['drain']['msgs_per_s'])} msgs/s; broker "
                f"hop alone p50 {fmt_ms(hop.get('p50_ms'))} ms, p99 {fmt_ms(hop.get('p99_ms'))} "
                f"ms (floor: twice that).", ""]  # fmt: skip
        rows = [[f"{fmt_pct(r.get('fraction'))}", fmt_rate(r.get("rate")),
                 fmt_rate(r.get("throughput_per_s")), fmt_ms(r.get("p50_ms")),
                 fmt_ms(r.get("p90_ms")), fmt_ms(r.get("p99_ms")), fmt_ms(r.get("p999_ms")),
                 fmt_ms(r.get("server_total_p50_ms")), f"{r.get('decided')}/{r.get('sent')}",
                 fmt_pct(r.get("over_budget_ratio"))] for r in lat]  # fmt: skip
        out.append(table(["load", "rate msgs/s", "decided/s", "p50", "p90", "p99", "p99.9",
                          "processor p50", "decided", "over 50 ms"], rows))  # fmt: skip
        out.append("")
        out += cpu_table(lat, res.get("cores"), bare_cpu_ms(res))
        pinned = res.get("latency_pinned") or {}
        if pinned.get("rows"):
            out += [f"Pinned: the moderator alone on core(s) {pinned['moderator_cores']} (so "
                    f"one intra-op thread), the load generator and the broker on "
                    f"{pinned['harness_cores']}; same saturation rate as above.", "",
                    table(["load", "rate msgs/s", "p50", "p99", "p99.9", "processor p50",
                           "decided", "over 50 ms"],
                          [[fmt_pct(r.get("fraction")), fmt_rate(r.get("rate")),
                            fmt_ms(r.get("p50_ms")), fmt_ms(r.get("p99_ms")),
                            fmt_ms(r.get("p999_ms")), fmt_ms(r.get("server_total_p50_ms")),
                            f"{r.get('decided')}/{r.get('sent')}",
                            fmt_pct(r.get("over_budget_ratio"))] for r in pinned["rows"]]),
                    ""]  # fmt: skip
        half = next((r for r in lat if r.get("fraction") == 0.5), None)
        if half is not None and half.get("p50_ms") is not None:
            p50, p99 = half["p50_ms"], half["p99_ms"]
            limit50, limit99 = TARGET_P50_MS, TARGET_P99_MS
            what = ("target p50 ≤ 15 ms and p99 ≤ 50 ms" if shape == "distilbert-base"
                    else "target lower than the DistilBERT shape's")  # fmt: skip
            if shape == "distilbert-base":
                met = p50 <= limit50 and p99 <= limit99
                how = f"p50 {fmt_ms(p50)} ms, p99 {fmt_ms(p99)} ms at half saturation"
                if not met:
                    how += (f" ({fmt_x(p50 / limit50)} the p50 target, "
                            f"{fmt_x(p99 / limit99)} the p99 target)")  # fmt: skip
                out += [f"At 50% load, {what}: " + verdict(met, how) + ".", ""]
            else:
                out += [f"At 50% load: p50 {fmt_ms(p50)} ms, p99 {fmt_ms(p99)} ms "
                        f"({what}).", ""]  # fmt: skip
    rows = []
    for shape, res in pipeline.items():
        if "cache_on" not in res:
            continue
        on, off = res["cache_on"]["drain"], res["cache_off"]["drain"]
        x = ratio(on["msgs_per_s"], off["msgs_per_s"])
        rows.append([SHAPE_NAMES.get(shape, shape), fmt_rate(off["msgs_per_s"]),
                     fmt_pct(off["cached"] / max(off["decided"], 1)), fmt_rate(on["msgs_per_s"]),
                     fmt_pct(on["cached"] / max(on["decided"], 1)), fmt_x(x),
                     "met" if x is not None and x >= TARGET_CACHE_X else "missed"])  # fmt: skip
    if rows:
        out += [f"### Cache on vs off at 40% repeats ({label})", "",
                "The load generator's traffic mix with `dup_ratio` 0.4 (exact and near repeats; "
                "near repeats that normalise to the same token ids hit too), drained as a "
                "backlog. Off: `MODERATOR_REDIS_URL=\"\"` and `l1_cache_size=0` (the "
                "single-flight of identical texts already on their way to the model stays on: it "
                "cannot be turned off, and counts as `cached`). On: the defaults (L1 100k "
                "entries + a fresh Redis per run).", "",
                table(["model", "off msgs/s", "off: cached", "on msgs/s", "on: cached",
                       "on / off", "target ≥ 1.5x"], rows), ""]  # fmt: skip
    return out


def bare_cpu_ms(res: Mapping[str, Any]) -> float | None:
    """The bare model's CPU-ms per message: its threads times its time per message."""
    rate, threads = (res.get("bare") or {}).get("msgs_per_s"), res.get("threads")
    return 1000 * threads / rate if rate and threads else None


def machine_busy(row: Mapping[str, Any], cores: int | None) -> float | None:
    """The share of `cores` a latency run's CPU per message kept busy at its decided rate."""
    total = (row.get("cpu_ms_per_msg") or {}).get("total")
    rate = row.get("throughput_per_s")
    return total * rate / 1000 / cores if total and rate and cores else None


def cpu_rows(rows: Sequence[Mapping[str, Any]], cores: int | None) -> list[list[str]]:
    """Per load: CPU-ms per decided message by role, how busy that keeps the machine, and the
    scorer's batches (bench/cpu.py)."""
    out = []
    for r in rows:
        cpu = r.get("cpu_ms_per_msg")
        if not cpu:
            continue
        total, rate = cpu.get("total"), r.get("throughput_per_s")
        busy = machine_busy(r, cores)
        b = r.get("batches") or {}
        out.append([fmt_pct(r.get("fraction")), fmt_rate(rate),
                    *(fmt_ms(cpu.get(role)) for role in ROLES), fmt_ms(total), fmt_pct(busy),
                    fmt_ms(b.get("mean_size")), fmt_ms(b.get("queue_ms")),
                    fmt_ms(b.get("model_ms"))])  # fmt: skip
    return out


def cpu_table(rows: Sequence[Mapping[str, Any]], cores: int | None, bare_cpu_ms: float | None
              ) -> list[str]:  # fmt: skip
    """The CPU split under each load, with the bare model's CPU per message to compare."""
    body = cpu_rows(rows, cores)
    if not body:
        return []
    bare = (f" The bare model spends {fmt_ms(bare_cpu_ms)} CPU-ms per message on full, sorted "
            "batches (its threads × its time per message)." if bare_cpu_ms else "")  # fmt: skip
    return [
        "Where the CPU goes: CPU-milliseconds per decided message, by role (each thread's "
        "utime + stime from /proc over the run), how busy that keeps the machine's "
        f"{cores} cores, and the scorer's batches (mean size, mean wait for its batch to start, "
        "mean model time of the batch a message was in)." + bare, "",
        table(["load", "decided/s", "event loop", "scorer", "model pool & other", "broker",
               "load generator", "total", "machine busy", "batch", "batch wait ms",
               "batch model ms"], body),
        "",
    ]  # fmt: skip


def section_memory(memory: Mapping[str, Any] | None, label: str) -> list[str]:
    out = ["## 4. Memory", ""]
    if not memory:
        return [*out, "_Not run (partial run)._", ""]
    out += [f"Machine: **{label}**. Resident set size (`VmRSS` in /proc/PID/status) of one "
            "`moderator run` process, cache off, after warm-up (64 messages through the whole "
            "path) and after draining the backlog; `VmHWM` is the peak.", ""]  # fmt: skip
    rows = []
    for shape, mem in memory.items():
        warm = _first(mem.get("rss_warm_kb"))
        after = _first(mem.get("rss_after_kb"))
        rows.append([SHAPE_NAMES.get(shape, shape), mem.get("model_mb", "-"),
                     fmt_mb(warm.get("VmRSS")), fmt_mb(after.get("VmRSS")),
                     fmt_mb(after.get("VmHWM"))])  # fmt: skip
    out.append(table(["model", "model.onnx", "RSS after warm-up", "RSS after backlog",
                      "peak (VmHWM)"], rows))  # fmt: skip
    out.append("")
    return out


def section_spin(spin: Mapping[str, Any] | None, label: str) -> list[str]:
    if not spin:
        return []
    out = [
        "## 5. Diagnosis: how the scorer uses its threads", "",
        f"Machine: **{label}**. One `moderator run` process, cache off; each layout's own "
        "backlog-drain saturation, then open loop at one common rate (half the pipeline's "
        "saturation above) for all. Layouts: one batch over all threads with ONNX Runtime's "
        "spin-waiting (its own default, forced back on by `python -m bench.withspin run`, a "
        "diagnostic wrapper); the same with spinning off (`session.intra_op.allow_spinning = 0`, "
        "set by `moderator/decide/classifier.py` because of this measurement: the moderator before "
        "2026-11-25); one thread; and one one-thread batch per thread at once, batches cut "
        "where padding would cost more than a call (`moderator/decide/batcher.py`, "
        "`MODERATOR_BATCH_THREADS=1`: the moderator as shipped). The CPU columns are "
        "CPU-milliseconds per decided message, as in section 3.", "",
    ]  # fmt: skip
    for shape, res in spin.items():
        rows = [[r["label"], fmt_rate(r.get("saturation")), fmt_ms(r.get("p50_ms")),
                 fmt_ms(r.get("p99_ms")), fmt_ms(r.get("server_total_p50_ms")),
                 fmt_rate(r.get("throughput_per_s")), *_model_cpu(r),
                 fmt_pct(r.get("over_budget_ratio")),
                 str(r.get("missing", "-"))] for r in res.get("rows", [])]  # fmt: skip
        out += [f"### {SHAPE_NAMES.get(shape, shape)} at {fmt_rate(res.get('rate'))} msgs/s "
                f"({label})", "",
                table(["layout", "saturation msgs/s", "p50", "p99", "processor p50",
                       "decided/s", "model CPU-ms/msg", "total CPU-ms/msg", "batch",
                       "over 50 ms", "missing"], rows), ""]  # fmt: skip
        if shape == "distilbert-base" and len(res.get("rows", [])) > 1:
            best = min(res["rows"], key=lambda r: r.get("p99_ms") or 1e12)
            met = (best.get("p50_ms") or 1e9) <= TARGET_P50_MS and (
                best.get("p99_ms") or 1e9
            ) <= TARGET_P99_MS
            out += [f"Best layout against the DistilBERT latency target: {best['label']}, " +
                    verdict(met, f"p50 {fmt_ms(best.get('p50_ms'))} ms, p99 "
                            f"{fmt_ms(best.get('p99_ms'))} ms") + ".", ""]  # fmt: skip
    return out


def _model_cpu(row: Mapping[str, Any]) -> list[str]:
    """Model CPU (scorer threads and any intra-op pool), all roles' CPU, and the mean batch."""
    cpu = row.get("cpu_ms_per_msg") or {}
    model = model_ms(cpu) if cpu else None
    size = (row.get("batches") or {}).get("mean_size")
    return [fmt_ms(model), fmt_ms(cpu.get("total")), "-" if size is None else f"{size:.2f}"]


def _harness_bound(
    shape: str, res: Mapping[str, Any], lat: Sequence[Mapping[str, Any]]
) -> str | None:
    """What the bare model and the harness alone need at each load, before any of the
    moderator's own work: where that passes the cores, no moderator could keep up there."""
    bare_cpu, cores = bare_cpu_ms(res), res.get("cores")
    parts = []
    for row in lat:
        cpu = row.get("cpu_ms_per_msg") or {}
        if not cpu or not bare_cpu or not cores or row.get("fraction") not in (0.5, 0.8):
            continue
        harness = harness_ms(cpu)
        need = row["rate"] * (bare_cpu + harness) / 1000
        parts.append(f"at {row['fraction']:.0%} ({fmt_rate(row['rate'])} msgs/s) the bare "
                     f"model ({fmt_ms(bare_cpu)} CPU-ms/msg) and the harness "
                     f"({fmt_ms(harness)}) alone need {need:.2f} of the {cores} cores")  # fmt: skip
    if not parts:
        return None
    return (f"The harness's bound ({SHAPE_NAMES.get(shape, shape)}): "
            + "; ".join(parts) + ". That is before the moderator's own event loop: where it "
            "passes the cores, no moderator on this machine could keep up with the load, and "
            "near it none can keep p99 low. A 2-core host that also runs the broker and the load "
            "generator cannot show the latency targets at these loads; a host with spare cores "
            "for the harness, or the harness elsewhere, is needed for that.")  # fmt: skip


def section_profile(pipeline: Mapping[str, Any] | None) -> list[str]:
    if not pipeline:
        return []
    out: list[str] = []
    for shape, res in pipeline.items():
        prof = (res.get("pipeline") or {}).get("profile")
        if not prof or not prof.get("samples"):
            continue
        if not out:
            out += ["## Where the pipeline's time goes (py-spy)", "",
                    "py-spy sampling the moderator process at 100 Hz during a second drain of "
                    "the same backlog (not the timed one). Shares are of the samples of busy "
                    "threads: *own* is time in the function itself, *incl.* with its callees.",
                    ""]  # fmt: skip
        rows = [[name, fmt_pct(share)] for name, share in prof.get("threads", [])]
        out += [
            f"### {SHAPE_NAMES.get(shape, shape)}: {prof['samples']} samples",
            "",
            table(["thread", "share"], rows),
            "",
            table(
                ["function (own time)", "share"],
                [[f"`{n}`", fmt_pct(s)] for n, s in prof.get("self", [])[:10]],
            ),
            "",
        ]
    return out


def section_terms(terms: Mapping[str, Any] | None, label: str) -> list[str]:
    """Deny-term matching at 10,000 terms (moderator/policy/terms.py), per message."""
    if not terms:
        return []
    rows = [[
        f"{terms['terms']:,} ({terms['packaged_terms']:,} packaged)",
        f"{1000 * terms['compile_s']:.0f} ms",
        f"{terms['mean_us']:.0f} µs", f"{terms['p50_us']:.0f} µs", f"{terms['p99_us']:.0f} µs",
        f"{terms['lines_per_s']:,.0f}",
    ]]  # fmt: skip
    return [
        "## 6. Deny-term matching",
        "",
        f"### {terms['terms']:,} terms on one core ({label})",
        "",
        f"`TermMatcher.find` on {terms['lines']:,} chat lines (mean {terms['mean_chars']:.0f}"
        f" characters, {100 * terms['matched_share']:.0f}% with a match), three rounds: one pass"
        " over the text's words, each looked up once (with and without a common ending) in a dict"
        " keyed by its letters, repeats collapsed. The compile time is paid once per policy"
        " change; the model takes milliseconds per message.",
        "",
        table(["terms", "compile", "mean", "p50", "p99", "lines/s"], rows),
        "",
    ]


def render(results: Mapping[str, Any], notes: Sequence[str] = ()) -> str:
    """The whole of BENCHMARKS.md."""
    label = results.get("machine_label", "unknown machine")
    quick = " --quick" if results.get("quick") else ""
    out = [
        "# Benchmarks",
        "",
        f"Regenerated by `make bench` (`python -m bench{quick}`) "
        f"on {results.get('started', '?')}, machine **{label}**"
        f" ({results.get('duration_s', '?')} s). Absolute times on these shared, noisy machines "
        "move from run to run; the ratios, measured side by side in one run, are what to read. "
        "Random weights are exact for speed: the DistilBERT- and BERT-base-shaped models are "
        "random-weight models of the real architecture and size.",
        "",
    ]  # fmt: skip
    load = results.get("load_before")
    if load:
        out += [f"Load average before the run: {load}. {results.get('load_note', '')}", ""]
    during = results.get("load_during") or []
    if during:
        out += ["Load at the end of each section (other processes this run did not start, with "
                "their average CPU):", ""]  # fmt: skip
        for row in during:
            others = "; ".join(row.get("others") or []) or "none"
            out.append(f"- {row['section']}: load {row['loadavg']}; {others}")
        out.append("")
    out += _headline(results)
    out += section_ladder(results.get("ladder"), label)
    out += section_scaleup(results.get("scaleup"), label)
    out += section_pipeline(results.get("pipeline"), label)
    out += section_memory(results.get("memory"), label)
    out += section_profile(results.get("pipeline"))
    out += section_spin(results.get("spin"), label)
    out += section_terms(results.get("terms"), label)
    out += section_loop(results.get("loop"), label, run_note(results))
    out += section_peer(results.get("peer"), label, run_note(results, "peer"))
    out += section_goodput(results.get("goodput"), label, run_note(results, "goodput"))
    out += section_shadow(results.get("shadow"), label, results.get("machine") or {},
                          run_note(results, "shadow"))  # fmt: skip
    notes = [*observations(results), *notes]
    if notes:
        out += ["## Reading the numbers", "", *[f"- {n}" for n in notes], ""]
    plots = results.get("plots") or []
    if plots:
        out += ["## Plots", "", *[f"![{p}]({p})" for p in plots], ""]
    return "\n".join(out).rstrip() + "\n"


def _headline(results: Mapping[str, Any]) -> list[str]:
    rows: list[list[str]] = []
    ladder = results.get("ladder") or {}
    base = ladder.get("baseline")
    distil = (ladder.get("rungs") or {}).get("distilbert-base")
    if base and distil:
        best = best_ladder_x(base, distil)
        rows.append(["ladder, DistilBERT shape (best rung vs baseline)", "≥ 30x", fmt_x(best),
                     _mark(best, TARGET_LADDER_X)])  # fmt: skip
    for shape, res in (results.get("pipeline") or {}).items():
        name = SHAPE_NAMES.get(shape, shape)
        share = ratio(res.get("pipeline", {}).get("drain", {}).get("msgs_per_s"),
                      res.get("bare", {}).get("msgs_per_s"))  # fmt: skip
        if share is not None:
            rows.append([f"pipeline / bare model, {name}", "≥ 90%", fmt_pct(share),
                         _mark(share, TARGET_PIPELINE_SHARE)])  # fmt: skip
        half = next((r for r in res.get("latency", []) if r.get("fraction") == 0.5), None)
        if half and shape == "distilbert-base" and half.get("p50_ms") is not None:
            rows.append([f"p50 / p99 at 50% saturation, {name}", "≤ 15 / ≤ 50 ms",
                         f"{fmt_ms(half['p50_ms'])} / {fmt_ms(half['p99_ms'])} ms",
                         "met" if half["p50_ms"] <= TARGET_P50_MS
                         and (half["p99_ms"] or 1e9) <= TARGET_P99_MS else "missed"])  # fmt: skip
        elif half and half.get("p50_ms") is not None:
            rows.append(
                [
                    f"p50 / p99 at 50% saturation, {name}",
                    "lower than DistilBERT",
                    f"{fmt_ms(half['p50_ms'])} / {fmt_ms(half['p99_ms'])} ms",
                    "",
                ]
            )
        if "cache_ratio" in res:
            rows.append(
                [
                    f"cache on / off at 40% repeats, {name}",
                    "≥ 1.5x",
                    fmt_x(res["cache_ratio"]),
                    _mark(res["cache_ratio"], TARGET_CACHE_X),
                ]
            )
    if (row := headline_row(results.get("loop"))) is not None:
        rows.append(row)
    rows += headline_rows(results.get("shadow"))
    if not rows:
        return []
    return ["## Targets", "", table(["measure", "target", "measured", ""], rows), ""]


def _mark(value: float | None, target: float) -> str:
    if value is None:
        return "-"
    return "met" if value >= target else "missed"


def _repeats_note(repeats: Mapping[str, float] | None) -> str:
    """What the backlog's repeats let a cache keyed on token ids skip at most."""
    if not repeats:
        return ""
    return (
        f" Of the backlog's lines, {fmt_pct(repeats['exact'])} repeat an earlier text exactly "
        f"and {fmt_pct(repeats['token_ids'])} repeat an earlier line's token ids (near repeats "
        "that normalise alike): that is the most a cache keyed on token ids can skip, every "
        "first occurrence being a miss; near repeats whose variation changes the token ids "
        "(an added word or emoji) cannot hit."
    )


def observations(results: Mapping[str, Any]) -> list[str]:
    """Sentences that read the numbers: computed from the results, so they stay true."""
    notes: list[str] = []
    ladder = results.get("ladder") or {}
    for shape, rungs in (ladder.get("rungs") or {}).items():
        name = SHAPE_NAMES.get(shape, shape)
        t1, t2, t4 = (rung(rungs, f"threads-{t}") for t in (1, 2, 4))
        if t1 and t2 and t1.get("p50_ms") and t2.get("p50_ms"):
            faster = t1["p50_ms"] < t2["p50_ms"]
            notes.append(
                f"{name}, batch of one: 1 thread p50 {fmt_ms(t1['p50_ms'])} ms vs 2 threads "
                f"{fmt_ms(t2['p50_ms'])} ms"
                + (" — one thread was faster: a single short sequence has too little work to "
                   "split, and with only 2 cores (shared with the rest of the machine) the second "
                   "intra-op thread waits for a core." if faster else ".")
            )  # fmt: skip
        if t2 and t4 and t2.get("p50_ms") and t4.get("p50_ms"):
            notes.append(
                f"{name}: 4 threads on 2 cores is {fmt_x(t4['p50_ms'] / t2['p50_ms'])} the p50 of "
                "2 threads — oversubscription: ONNX Runtime's intra-op threads spin-wait for each "
                "other at every operator, and a descheduled thread stalls the whole inference."
            )
        b8, b32 = rung(rungs, "batch-8"), rung(rungs, "batch-32")
        if b8 and b32 and b8["msgs_per_s"] > b32["msgs_per_s"]:
            notes.append(
                f"{name}: max_batch 8 scored the backlog "
                f"{fmt_x(b8['msgs_per_s'] / b32['msgs_per_s'])} faster than max_batch 32 "
                "(the service's default): a batch pads to its longest member, and larger "
                "batches of chat lines carry more padding."
            )
    for shape, res in (results.get("scaleup") or {}).items():
        lays = res.get("layouts") or []
        if len(lays) >= 2:
            one, many = lays[0], lays[-1]
            p99a = (one.get("at_common_rate") or {}).get("p99_ms")
            p99b = (many.get("at_common_rate") or {}).get("p99_ms")
            if p99a and p99b:
                notes.append(
                    f"Scale-up, {SHAPE_NAMES.get(shape, shape)}: {many['label']} gave "
                    f"{fmt_x(many['drain']['msgs_per_s'] / one['drain']['msgs_per_s'])} the "
                    f"saturation throughput of {one['label']}, and at the common rate p99 "
                    f"{fmt_ms(p99b)} ms vs {fmt_ms(p99a)} ms. Both layouts run one one-thread "
                    "batch per core; the worker processes add an event loop and Kafka clients "
                    "each, on the same cores as the broker and the load generator."
                )
    for shape, res in (results.get("pipeline") or {}).items():
        lat = res.get("latency") or []
        low = lat[0] if lat else None
        if low and low.get("p99_ms") and low.get("server_total_p50_ms") is not None:
            hop = (res.get("hop") or {}).get("p50_ms")
            notes.append(
                f"Pipeline latency, {SHAPE_NAMES.get(shape, shape)}, at 25% load: p50 "
                f"{fmt_ms(low['p50_ms'])} ms (processor's own p50 "
                f"{fmt_ms(low['server_total_p50_ms'])} ms, broker hop p50 {fmt_ms(hop)} ms, "
                f"crossed twice), p99 {fmt_ms(low['p99_ms'])} ms."
            )
        half: Mapping[str, Any] = next((r for r in lat if r.get("fraction") == 0.5), {})
        cpu = half.get("cpu_ms_per_msg") or {}
        bare_cpu, busy = bare_cpu_ms(res), machine_busy(half, res.get("cores"))
        queued = (half.get("p50_ms") or 0) > TARGET_P99_MS
        if queued and cpu and bare_cpu and busy:
            model, harness = model_ms(cpu), harness_ms(cpu)
            notes.append(
                f"Why half the saturation rate already queues ({SHAPE_NAMES.get(shape, shape)}): "
                f"the CPU. At 50% load the machine is {fmt_pct(busy)} busy: every decided "
                f"message costs {fmt_ms(cpu['total'])} CPU-ms, of which the model "
                f"{fmt_ms(model)} ({fmt_x(model / bare_cpu)} the bare model's "
                f"{fmt_ms(bare_cpu)} on a quiet machine), the event loop "
                f"{fmt_ms(cpu['event loop'])}, and the harness (broker and load generator) "
                f"{fmt_ms(harness)}. The saturation rate is a backlog drain: no load generator "
                "producing at the same time, full batches from the first fetch. Under open-loop "
                "load the same cores also carry the producer and the broker's polling, so a "
                "queue builds well before that rate."
            )
        if note := _harness_bound(shape, res, lat):
            notes.append(note)
        if "cache_on" in res:
            on, off = res["cache_on"]["drain"], res["cache_off"]["drain"]
            saved_on = on["cached"] / max(on["decided"], 1)
            saved_off = off["cached"] / max(off["decided"], 1)
            predicted = (1 - saved_off) / max(1 - saved_on, 1e-9)
            notes.append(
                f"Cache, {SHAPE_NAMES.get(shape, shape)}: {fmt_pct(saved_on)} of messages needed "
                f"no model call with the cache on, {fmt_pct(saved_off)} with it off (the "
                "single-flight of identical texts in flight stays on). The model work avoided "
                f"alone predicts about {fmt_x(predicted)}; measured "
                f"{fmt_x(ratio(on['msgs_per_s'], off['msgs_per_s']))}. The repeats the traffic "
                'mix makes are mostly short lines ("gg", emotes) that cost the model little, '
                "so 40% repeats remove less than 40% of the model's time."
                + _repeats_note(res.get("repeats"))
            )
    return notes
