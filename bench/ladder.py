"""The speed-up ladder: one design choice per rung, each timed on the same texts.

Per message: each text is tokenized and scored alone (batch of one) and timed, in order, until
the rung's time box runs out (slow rungs therefore see a prefix of the texts; padded rungs cost
the same whatever the text). Throughput at batch one is messages over the wall time of that loop.
The backlog rungs (micro-batching, cache) score a whole backlog through the runtime's own
`MicroBatcher` (and `ScoreCache`), pass after pass, and report messages per second.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.artifacts import ShapeArtifacts, torch_module
from moderator.config import Settings
from moderator.decide.batcher import MicroBatcher
from moderator.decide.cache import ScoreCache, cache_key
from moderator.decide.classifier import Classifier, TokenIds
from moderator.metrics import Metrics

log = logging.getLogger(__name__)

PAD_TO = 128
WARMUP_TEXTS = 3
MIN_MESSAGES = 8
MAX_PASSES = 3
SERVICE_MAX_BATCH = Settings().max_batch
FETCH_CHUNK = 128  # the service fetches up to max_batch * 4 records per pipeline unit


@dataclass(frozen=True)
class RungResult:
    """One rung: how it was run and what it measured."""

    shape: str
    key: str
    label: str
    mode: str  # "batch1": per-message timing; "backlog": throughput of a scored backlog
    threads: int
    messages: int
    seconds: float
    msgs_per_s: float
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LadderPlan:
    """How long each rung may take, and how many texts it may use."""

    budget_s: float
    texts: int
    backlog: int


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    return round(float(np.percentile(np.asarray(values) * 1000.0, q)), 3)


def time_per_message(
    score_one: Callable[[str], object], texts: Sequence[str], budget_s: float
) -> tuple[list[float], float]:
    """Per-message latencies (s) and the loop's wall time; cycles `texts` within the time box."""
    for text in texts[:WARMUP_TEXTS]:
        score_one(text)
    latencies: list[float] = []
    start = time.perf_counter()
    limit = len(texts) * MAX_PASSES
    while len(latencies) < limit:
        text = texts[len(latencies) % len(texts)]
        began = time.perf_counter()
        score_one(text)
        latencies.append(time.perf_counter() - began)
        if time.perf_counter() - start >= budget_s and len(latencies) >= MIN_MESSAGES:
            break
    return latencies, time.perf_counter() - start


def _batch1_result(
    shape: str, key: str, label: str, threads: int, timed: tuple[list[float], float], note: str = ""
) -> RungResult:
    latencies, seconds = timed
    result = RungResult(
        shape=shape, key=key, label=label, mode="batch1", threads=threads,
        messages=len(latencies), seconds=round(seconds, 3),
        msgs_per_s=round(len(latencies) / seconds, 2),
        p50_ms=_percentile(latencies, 50), p90_ms=_percentile(latencies, 90),
        p99_ms=_percentile(latencies, 99), note=note,
    )  # fmt: skip
    log.info("%s %s: p50 %s ms, %.1f msg/s", shape, label, result.p50_ms, result.msgs_per_s)
    return result


# -- PyTorch, as a user would run it --------------------------------------------------------


def torch_padded(
    shape: str, texts: Sequence[str], *, threads: int, budget_s: float, tokenizer_file: Path
) -> RungResult:
    """`transformers` on PyTorch fp32, every message padded to 128 tokens, batch of one."""
    import torch
    from transformers import PreTrainedTokenizerFast

    torch.set_num_threads(threads)
    special = {"pad_token": "[PAD]", "unk_token": "[UNK]"}
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file), **special)  # type: ignore[no-untyped-call]
    model = torch_module(shape)
    wants_types = shape == "bert-base"

    def score_one(text: str) -> object:
        enc = tokenizer(
            text, padding="max_length", truncation=True, max_length=PAD_TO, return_tensors="pt"
        )
        feeds = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        if wants_types:
            feeds["token_type_ids"] = torch.zeros_like(enc["input_ids"])
        with torch.inference_mode():
            return torch.sigmoid(model(**feeds).logits).numpy()

    label = (
        "BERT-base fp32, PyTorch, padded to 128"
        if shape == "bert-base"
        else (f"{_pretty(shape)} fp32, PyTorch, padded to 128")
    )
    return _batch1_result(shape, "torch-padded", label, threads,
                          time_per_message(score_one, texts, budget_s))  # fmt: skip


# -- ONNX Runtime, through the runtime's own Classifier -------------------------------------


def onnx_padded(classifier: Classifier, texts: Sequence[str]) -> Callable[[str], object]:
    """Score one text padded to 128 tokens (what a fixed-shape deployment does)."""
    feeds_names = {i.name for i in classifier.session.get_inputs()}
    output = classifier.session.get_outputs()[0].name

    def score_one(text: str) -> object:
        (ids,) = classifier.encode([text])
        input_ids = np.full((1, PAD_TO), classifier.pad_id, dtype=np.int64)
        mask = np.zeros((1, PAD_TO), dtype=np.int64)
        input_ids[0, : len(ids)] = ids
        mask[0, : len(ids)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in feeds_names:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        return classifier.session.run([output], feeds)

    return score_one


def onnx_dynamic(classifier: Classifier) -> Callable[[str], object]:
    """Score one text at its own length (the runtime's path: encode, then score_ids)."""

    def score_one(text: str) -> object:
        return classifier.score_ids(classifier.encode([text]))

    return score_one


# -- backlog rungs: micro-batching and the cache --------------------------------------------


async def _score_backlog(
    batcher: MicroBatcher, classifier: Classifier, texts: Sequence[str]
) -> None:
    ids = classifier.encode(texts)
    await asyncio.gather(*(batcher.submit(i) for i in ids))


async def _score_cached(
    batcher: MicroBatcher, classifier: Classifier, texts: Sequence[str], l1_size: int
) -> float:
    """The pipeline's cache path on a backlog, in fetch-sized chunks: L1 lookups, identical
    token ids in one fetch scored once. Returns the share of messages that needed no model call.
    """
    cache = ScoreCache("", metrics=batcher.metrics, ttl_s=60, l1_size=l1_size, timeout_ms=25)
    await cache.start()
    model = classifier.info.sha256
    scored = 0
    try:
        for start in range(0, len(texts), FETCH_CHUNK):
            ids = classifier.encode(texts[start : start + FETCH_CHUNK])
            keys = [cache_key(model, i) for i in ids]
            found = await cache.get_many(keys)
            misses: dict[bytes, asyncio.Future[Any]] = {}
            for key, one, scores in zip(keys, ids, found, strict=True):
                if scores is None and key not in misses:
                    misses[key] = batcher.submit(one)
            scored += len(misses)
            if misses:
                await asyncio.gather(*misses.values())
                cache.put_many([(k, f.result().scores) for k, f in misses.items()])
    finally:
        await cache.stop()
    return 1.0 - scored / len(texts) if texts else 0.0


async def _timed_passes(
    run_pass: Callable[[], Any], n_per_pass: int, budget_s: float
) -> tuple[int, float, list[Any]]:
    await run_pass()  # warm-up pass
    outs: list[Any] = []
    start = time.perf_counter()
    while True:
        outs.append(await run_pass())
        elapsed = time.perf_counter() - start
        if elapsed >= budget_s:
            return n_per_pass * len(outs), elapsed, outs


def backlog_rung(
    classifier: Classifier,
    texts: Sequence[str],
    *,
    shape: str,
    key: str,
    label: str,
    max_batch: int,
    budget_s: float,
    cache_l1: int | None = None,
    concurrency: int = 1,
) -> RungResult:
    """Throughput of a backlog scored in length-sorted batches (optionally through the L1 cache),
    `concurrency` batches at once."""

    async def main() -> RungResult:
        batcher = MicroBatcher(classifier, max_batch=max_batch, metrics=Metrics().decide,
                             concurrency=concurrency)  # fmt: skip
        await batcher.start()
        try:
            if cache_l1 is None:
                n, secs, _ = await _timed_passes(
                    lambda: _score_backlog(batcher, classifier, texts), len(texts), budget_s
                )
                note = f"backlog of {len(texts)}, max_batch {max_batch}" + (
                    f", {concurrency} batches at once (the service's layout)"
                    if concurrency > 1
                    else ""
                )
            else:
                n, secs, shares = await _timed_passes(
                    lambda: _score_cached(batcher, classifier, texts, cache_l1),
                    len(texts),
                    budget_s,
                )
                note = (f"backlog of {len(texts)}, max_batch {max_batch}, L1 {cache_l1} entries; "
                        f"{shares[0]:.0%} of messages needed no model call")  # fmt: skip
        finally:
            await batcher.stop()
        result = RungResult(
            shape=shape, key=key, label=label, mode="backlog",
            threads=classifier.threads * concurrency,
            messages=n, seconds=round(secs, 3), msgs_per_s=round(n / secs, 2), note=note,
        )  # fmt: skip
        log.info("%s %s: %.1f msg/s (%s)", shape, label, result.msgs_per_s, note)
        return result

    return asyncio.run(main())


# -- the ladder -----------------------------------------------------------------------------


def _pretty(shape: str) -> str:
    return {"distilbert-base": "DistilBERT-shape", "minilm-l6": "MiniLM-L6",
            "bert-base": "BERT-base"}.get(shape, shape)  # fmt: skip


def baseline(texts: Sequence[str], plan: LadderPlan, threads: int, tokenizer: Path) -> RungResult:
    """BERT-base fp32 padded to 128 on PyTorch: the published baseline."""
    return torch_padded("bert-base", texts, threads=threads, budget_s=plan.budget_s,
                        tokenizer_file=tokenizer)  # fmt: skip


def climb(
    art: ShapeArtifacts,
    texts: Sequence[str],
    repeat_texts: Sequence[str],
    plan: LadderPlan,
    *,
    threads: int,
    tokenizer: Path,
    on_rung: Callable[[RungResult], None] | None = None,
) -> list[RungResult]:
    """Every rung for one shape, in ladder order (the baseline is measured separately)."""
    shape = art.shape
    name = _pretty(shape)
    budget = plan.budget_s
    rungs: list[RungResult] = []

    def add(result: RungResult) -> None:
        rungs.append(result)
        if on_rung is not None:
            on_rung(result)

    add(torch_padded(shape, texts, threads=threads, budget_s=budget, tokenizer_file=tokenizer))
    raw32 = Classifier(art.raw_fp32, threads=threads, verify=False)
    add(_batch1_result(shape, "onnx-padded", f"{name} ONNX Runtime fp32, padded to 128", threads,
                       time_per_message(onnx_padded(raw32, texts), texts, budget)))  # fmt: skip
    add(_batch1_result(shape, "dynamic", "+ dynamic shapes (no padding)", threads,
                       time_per_message(onnx_dynamic(raw32), texts, budget)))  # fmt: skip
    del raw32
    raw8 = Classifier(art.raw_int8, threads=threads, verify=False)
    add(_batch1_result(shape, "int8", "+ int8 dynamic quantization (unfused)", threads,
                       time_per_message(onnx_dynamic(raw8), texts, budget)))  # fmt: skip
    del raw8
    fused_note = "the default model (trained weights)" if shape == "minilm-l6" else ""
    by_threads: dict[int, Classifier] = {}
    for t in (threads, 1, 4):
        by_threads[t] = by_threads.get(t) or Classifier(art.fused_int8, threads=t, verify=False)
    add(_batch1_result(shape, "fused", "+ fused attention graph (int8)", threads,
                       time_per_message(onnx_dynamic(by_threads[threads]), texts, budget),
                       fused_note))  # fmt: skip
    fused = rungs[-1]
    for t in (1, 2, 4):
        if t == threads:
            add(replace(fused, key=f"threads-{t}", label=f"threads = {t}",
                        note="the rung above, not measured again"))  # fmt: skip
            continue
        note = f"oversubscribes the {_cores()} cores" if t > _cores() else ""
        add(_batch1_result(shape, f"threads-{t}", f"threads = {t}", t,
                           time_per_message(onnx_dynamic(by_threads[t]), texts, budget),
                           note))  # fmt: skip
    best = by_threads[threads]
    backlog = list(texts[: plan.backlog])
    for max_batch in (8, 32):
        add(backlog_rung(best, backlog, shape=shape, key=f"batch-{max_batch}",
                         label=f"+ micro-batching (max_batch {max_batch})",
                         max_batch=max_batch, budget_s=budget))  # fmt: skip
    # The service's layout (by default one thread per batch, `threads` batches at once).
    per_batch, at_once = Settings(threads=threads).scoring_layout
    one = by_threads.get(per_batch) or Classifier(art.fused_int8, threads=per_batch, verify=False)
    add(backlog_rung(one, backlog, shape=shape, key="batch-layout",
                     label=f"+ one-thread batches, {at_once} at once (max_batch "
                           f"{SERVICE_MAX_BATCH})",
                     max_batch=SERVICE_MAX_BATCH, budget_s=budget,
                     concurrency=at_once))  # fmt: skip
    repeats = list(repeat_texts[: plan.backlog])
    add(backlog_rung(one, repeats, shape=shape, key="repeats-nocache",
                     label="(40% repeats, every message scored: the next rung's texts)",
                     max_batch=SERVICE_MAX_BATCH, budget_s=budget,
                     concurrency=at_once))  # fmt: skip
    add(backlog_rung(one, repeats, shape=shape, key="cache",
                     label="+ L1 verdict cache, 40% repeats", max_batch=SERVICE_MAX_BATCH,
                     budget_s=budget, cache_l1=100_000, concurrency=at_once))  # fmt: skip
    return rungs


def _cores() -> int:
    from loadgen.machine import usable_cores

    return usable_cores()


def rows_from_dicts(rows: Sequence[dict[str, Any]]) -> list[RungResult]:
    return [RungResult(**row) for row in rows]


def ids_lengths(classifier: Classifier, texts: Sequence[str]) -> list[int]:
    """Token counts of `texts` (for the report's description of the texts)."""
    encoded: list[TokenIds] = classifier.encode(texts)
    return [len(ids) for ids in encoded]
