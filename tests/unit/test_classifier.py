from __future__ import annotations

import asyncio
import io
import json
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moderator.admin.score import decide_lines
from moderator.decide.batcher import SCORER_THREAD_NAME, MicroBatcher, batch_sizes
from moderator.decide.cache import KEY_PREFIX, LruCache, cache_key
from moderator.decide.classifier import HEAD_CHARS_PER_TOKEN, Classifier
from moderator.decide.screen import Reader
from moderator.errors import ModelError
from moderator.metrics import Metrics
from moderator.normalize import normalize_text
from moderator.policy.rules import DEFAULT_ACTIONS, Policy


def test_the_default_model_meets_the_contract(classifier: Classifier) -> None:
    info = classifier.info
    assert {"toxicity", "insult", "threat", "identity_attack"} <= set(info.labels)
    scores = classifier.score_ids(
        classifier.encode(["gg", "you are a clown and everyone hates you"])
    )
    assert scores.shape == (2, len(info.labels))
    assert scores.dtype == np.float32
    assert ((scores >= 0) & (scores <= 1)).all()


def test_a_lone_message_is_not_padded_and_long_text_is_truncated(classifier: Classifier) -> None:
    short, long = classifier.encode(["hello world", "word " * 1000])
    assert len(short) == 4  # [CLS] hello world [SEP]
    assert len(long) == classifier.info.max_length


# Words the tokenizer reads in full, splits, or drops (combining marks, zero-width characters),
# punctuation that splits words, CJK that is spaced per character, and one overlong word.
WORDS = ["gg", "you", "clown", "déjà", "e\u0301\u0301\u0301", "\u200b\u200b", "!?", "a.b,c",
         "漢字テスト", "🙂🙂", "\u0301" * 40, "x" * 150, "supercalifragilistic"]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=300, max_size=1500))
def test_long_texts_get_the_ids_of_the_whole_text(classifier: Classifier, words: list[str]) -> None:
    """A long text is tokenized from a head cut at a space: the ids must be those of the whole
    text, whatever the text is made of."""
    text = " ".join(words)
    whole = classifier.tokenizer.encode(normalize_text(text)).ids
    assert classifier.encode([text])[0].tolist() == whole


def edge_texts(cap: int) -> list[str]:
    """Long texts where a careless head would differ: one whose head is only characters the
    tokenizer drops (two combining accents, alternating, so no run collapses), and one where
    the 126th token ("super…", after 125 one-token words) starts 2 characters before the cap."""
    marks = "\u0301\u0300"
    dropped_head = (marks * 10 + " ") * 300 + " you clown" * 300
    words = "you " * 125
    filler = (marks * cap)[: cap - 2 - 1 - len(words)]
    straddling = filler + " " + words + "supercalifragilistic" + " you" * 500
    return [dropped_head, straddling]


def test_edge_texts_get_the_ids_of_the_whole_text(classifier: Classifier) -> None:
    cap = classifier.info.max_length * HEAD_CHARS_PER_TOKEN
    for text in edge_texts(cap):
        whole = classifier.tokenizer.encode(normalize_text(text)).ids
        assert classifier.encode([text])[0].tolist() == whole


def test_a_batch_scores_like_each_message_alone(classifier: Classifier) -> None:
    """Padding is masked out. Dynamic int8 quantizes activations with one scale per tensor, so
    batch-mates shift scores a little (the same order as int8 vs fp32); the action must not move.
    """
    texts = ["ok", "that was a really long and winding sentence about the match", "lol",
             "you are a pathetic loser", "i will hurt you"]  # fmt: skip
    encoded = classifier.encode(texts)
    batch = classifier.score_ids(encoded)
    alone = np.vstack([classifier.score_ids([ids]) for ids in encoded])
    assert np.abs(batch - alone).max() < 0.15
    policy = Policy.load()
    for b, a in zip(batch, alone, strict=True):
        assert policy.decide(classifier.as_dict(b)) == policy.decide(classifier.as_dict(a))


def test_normalisation_makes_the_same_token_ids(classifier: Classifier) -> None:
    a, b = classifier.encode(["You are  TRASH!!!", "you are trash!!!!!!\u200b"])
    assert cache_key("m@1", a) == cache_key("m@1", b)
    assert cache_key("m@1", a) != cache_key("m@2", a)


def test_a_tampered_model_is_refused(model_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["sha256"] = "0" * 64
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelError, match="sha256"):
        Classifier(copy)


def _with_manifest(model_dir: Path, tmp_path: Path, **fields: object) -> Path:
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**manifest, **fields}))
    return copy


def test_a_model_that_reads_emoji_names_gets_the_ids_of_the_names(
    model_dir: Path, tmp_path: Path, classifier: Classifier
) -> None:
    assert classifier.info.emoji == "", "the shipped model reads emoji as the tokenizer does"
    named = Classifier(_with_manifest(model_dir, tmp_path, emoji="names"))
    [knife] = named.encode(["i will 🔪 you"])
    [words] = classifier.encode(["i will kitchen knife you"])
    [raw] = classifier.encode(["i will 🔪 you"])
    assert knife.tolist() == words.tolist()
    assert raw.tolist() != words.tolist()


def test_an_unknown_emoji_form_is_refused(model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="'emoji' must be one of"):
        Classifier(_with_manifest(model_dir, tmp_path, emoji="pictures"))


def test_the_cache_key_is_the_model_digest_and_a_128_bit_hash_of_the_token_ids() -> None:
    sha = "ab" * 32
    ids = np.asarray([101, 7592, 102], dtype=np.int64)
    key = cache_key(sha, ids)
    prefix, digest = key.decode().rsplit(":", 1)
    assert prefix == f"{KEY_PREFIX}{sha[:32]}"
    assert len(digest) == 32, "128 bits, in hex"
    assert int(digest, 16) >= 0
    assert cache_key(sha, ids) == key
    assert cache_key(sha, ids[:2]) != key
    assert cache_key("ab" * 16 + "cd" * 16, ids) == key, "only the digest's first 128 bits count"


def test_lru_forgets_the_least_recently_used() -> None:
    cache = LruCache(2)
    row = np.zeros(3, dtype=np.float32)
    cache.put(b"a", row)
    cache.put(b"b", row)
    assert cache.get(b"a") is not None
    cache.put(b"c", row)
    assert cache.get(b"b") is None
    assert cache.get(b"a") is not None
    assert len(cache) == 2


async def test_the_batcher_scores_a_backlog_in_batches_of_like_lengths(
    classifier: Classifier,
) -> None:
    metrics = Metrics()
    batcher = MicroBatcher(classifier, max_batch=4, metrics=metrics.decide, concurrency=2)
    await batcher.start()
    try:
        short = [f"gg wp {c}" for c in "abcdef"]
        long = [f"{'well played everyone ' * 5}{c}" for c in "ghij"]
        texts = [t for pair in zip(short, [*long, "", ""], strict=True) for t in pair if t]
        encoded = classifier.encode(texts)
        assert len({len(encoded[texts.index(t)]) for t in short}) == 1
        assert len({len(encoded[texts.index(t)]) for t in long}) == 1
        results = await asyncio.gather(*(batcher.submit(ids) for ids in encoded))
    finally:
        await batcher.stop()
    # Each message gets the scores of its batch scored directly (dynamic int8 quantizes each
    # batch's activations with its own scale, so the batch, not only the text, sets the digits).
    order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
    expected = np.empty((len(texts), len(classifier.labels)), dtype=np.float32)
    for chunk in (order[:4], order[4:6], order[6:]):
        expected[chunk] = classifier.score_ids([encoded[i] for i in chunk])
    np.testing.assert_allclose(np.vstack([r.scores for r in results]), expected, atol=1e-5)
    # 6 short and 4 long: 4 + 2 short (the cap), then the long ones alone: padding the 2 short
    # ones to the long length would cost more than a call.
    assert metrics.registry.get_sample_value("moderator_batch_size_count") == 3
    assert metrics.registry.get_sample_value("moderator_batch_size_sum") == 10


@pytest.mark.parametrize(
    ("lengths", "max_batch", "sizes"),
    [
        ([], 8, []),
        ([7], 8, [1]),
        ([7] * 10, 4, [4, 4, 2]),  # like lengths: cut only by the cap
        ([5, 6, 7, 8, 9, 10], 8, [5, 1]),  # 1x1, 2x1, 3x1, 4x1 join; 5x1 > 4 does not
        ([5, 9, 30, 31, 31, 32], 8, [2, 4]),  # 1x4 ok; 2x21 no; then 1, 2x0, 3x1
        ([10, 40], 8, [1, 1]),  # 30 padding tokens: two calls are cheaper
    ],
)
def test_batches_are_cut_where_padding_would_cost_more_than_a_call(
    lengths: list[int], max_batch: int, sizes: list[int]
) -> None:
    assert batch_sizes(lengths, max_batch) == sizes
    assert sum(sizes) == len(lengths)


async def test_batches_run_at_once_on_as_many_threads_as_the_scorer_has(
    classifier: Classifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two batches of unlike lengths meet inside the model at the same time: neither waits for
    the other to finish (with one thread the barrier would time out)."""
    barrier = threading.Barrier(2, timeout=10)
    score_ids = classifier.score_ids

    def meet(batch: list[np.ndarray]) -> np.ndarray:
        barrier.wait()
        return score_ids(batch)

    monkeypatch.setattr(classifier, "score_ids", meet)
    batcher = MicroBatcher(classifier, max_batch=8, metrics=Metrics().decide, concurrency=2)
    await batcher.start()
    try:
        short, long = classifier.encode(["gg", "well played everyone " * 8])
        results = await asyncio.gather(batcher.submit(short), batcher.submit(long))
        names = _thread_names()
    finally:
        await batcher.stop()
    assert len(results) == 2
    assert names.count(SCORER_THREAD_NAME) == 2


async def test_stopping_cancels_what_is_being_scored_so_no_caller_waits_forever(
    classifier: Classifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = threading.Event()
    score_ids = classifier.score_ids

    def slow(batch: list[np.ndarray]) -> np.ndarray:
        started.set()
        time.sleep(0.3)
        return score_ids(batch)

    monkeypatch.setattr(classifier, "score_ids", slow)
    batcher = MicroBatcher(classifier, max_batch=1, metrics=Metrics().decide, concurrency=1)
    await batcher.start()
    first, second = classifier.encode(["gg", "well played everyone"])
    futures = [batcher.submit(first), batcher.submit(second)]  # one round, two batches of one
    await asyncio.to_thread(started.wait, 5)
    await batcher.stop()
    assert all(f.cancelled() for f in futures)


async def test_a_model_failure_fails_the_callers_and_then_the_scorer(
    classifier: Classifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(batch: list[np.ndarray]) -> np.ndarray:
        raise ModelError("output has shape (0,)")

    monkeypatch.setattr(classifier, "score_ids", broken)
    batcher = MicroBatcher(classifier, max_batch=8, metrics=Metrics().decide, concurrency=2)
    await batcher.start()
    try:
        with pytest.raises(ModelError):
            await batcher.submit(classifier.encode(["gg"])[0])
        assert batcher.task is not None
        with pytest.raises(ModelError):
            await asyncio.wait_for(asyncio.shield(batcher.task), 5)
    finally:
        await batcher.stop()


def _thread_names() -> list[str]:
    return [(t / "comm").read_text().strip() for t in Path("/proc/self/task").iterdir()]


async def test_the_scoring_thread_is_named_for_the_os(classifier: Classifier) -> None:
    """`top -H` and the benchmark's CPU split tell the model's thread from the event loop's."""
    batcher = MicroBatcher(classifier, max_batch=4, metrics=Metrics().decide)
    await batcher.start()
    try:
        await batcher.submit(classifier.encode(["gg"])[0])
        names = _thread_names()
    finally:
        await batcher.stop()
    assert names.count(SCORER_THREAD_NAME) == 1


def test_score_command_writes_one_decision_per_line_in_order(
    classifier: Classifier, reader: Reader
) -> None:
    lines = [
        '{"text": "gg wp", "message_id": "a"}\n',
        "not json\n",
        '{"text": ""}\n',
        '{"no_text": 1}\n',
        '{"text": "I will find you and kill you"}\n',
    ]
    out = io.StringIO()
    errors = decide_lines(lines, reader, Policy.load(), out)
    rows = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert errors == 2
    assert len(rows) == 5
    assert rows[0]["message_id"] == "a"
    assert rows[0]["action"] in DEFAULT_ACTIONS
    assert rows[1]["error"]["code"] == "invalid_json"
    assert rows[2]["reason"] == "empty_text"
    assert rows[3]["error"]["code"] == "missing_field"
    assert set(rows[4]["scores"]) == set(classifier.labels)
    assert rows[4]["span"] == [0, len("I will find you and kill you")]
    assert rows[4]["truncated"] is False
    assert "language" not in rows[4]


def test_warm_up_runs_each_shape_once_per_classifier(model_dir: Path) -> None:
    """The first run of a shape pays for allocation; `warm_up` pays it before traffic, once."""
    fresh = Classifier(model_dir, threads=1, verify=False)
    calls: list[tuple[int, int]] = []
    score_ids = fresh.score_ids

    def spy(batch: list[np.ndarray]) -> np.ndarray:
        calls.append((len(batch), max(len(ids) for ids in batch)))
        return score_ids(batch)

    fresh.score_ids = spy  # type: ignore[method-assign]
    assert fresh.warm_up(max_batch=8) == len(calls) == 10
    assert {length for _, length in calls} == {8, 16, 32, 64, 128}
    assert {batch for batch, _ in calls} == {1, 8}
    assert fresh.warm_up(max_batch=8) == 0
    assert len(calls) == 10
