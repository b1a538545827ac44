"""The shadow model beside the primary, without Kafka: its queue sheds what does not fit and
counts it, each message is read under its channel's policy by the shadow's own model and language
gate, each pair is counted by label and language, and a disagreement goes to the producer without
being awaited. The shadow is the candidate of devstack/candidate.py, a real model directory."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka.errors import KafkaError, KafkaTimeoutError

from devstack.candidate import LANGUAGES, SWAPPED, candidate_model
from devstack.child import child_pids
from moderator.decide.batcher import MicroBatcher
from moderator.decide.cache import ScoreCache
from moderator.decide.classifier import Classifier, ModelInfo
from moderator.decide.degrade import Fallback
from moderator.decide.screen import Judged, Reader, decide_texts, reader_for
from moderator.errors import ModelError
from moderator.metric_models import ShadowMetrics
from moderator.metrics import Metrics
from moderator.pipeline import Pipeline
from moderator.policy.rules import Policy, Ruling, read_spec
from moderator.records import ChatMessage
from moderator.shadow.agreement import Compared, Primary, compare, disagreement_record
from moderator.shadow.scorer import THREAD_NAME, Shadow, read
from moderator.threads import LOWEST
from tests.contract import check_shadow
from tests.unit.test_pipeline import Record, message, old_message
from tests.waiting import eventually, eventually_blocking

# Real chat lines on which the candidate agrees with the primary on some and not on others (the
# tests check that they do both): friendly profanity, insults, a threat, Spanish.
TEXTS = [
    "gg wp everyone",
    "you are a fucking idiot",
    "holy shit that was a great play",
    "eres un idiota y te voy a matar, cállate",
    "hola amigos, ¿cómo están todos hoy en el juego?",
    "I will kill you and your family",
    "what the fuck lol",
    "nice shot dude",
]


@pytest.fixture(scope="module")
def candidate(tmp_path_factory: pytest.TempPathFactory) -> Reader:
    folder = candidate_model(tmp_path_factory.mktemp("candidate"))
    return reader_for(Classifier(folder, threads=1))


def primaries(reader: Reader, policy: Policy, texts: Sequence[str]) -> list[Primary]:
    """Each text as the primary decides it: its reading and its policy's ruling."""
    out = []
    for i, (text, judged) in enumerate(
        zip(texts, decide_texts(reader, policy, texts), strict=True)
    ):
        chat = ChatMessage(f"m-{i}", f"c-{i % 2}", "u-1", text, 1_000)
        model = reader.classifier.info.ident
        out.append(Primary(chat, policy, model, judged.ruling, judged.scores, judged.language))
    return out


def alone(reader: Reader, items: Sequence[Primary]) -> list[Judged]:
    """The shadow's reading of each item by itself, as a shadow with `max_batch=1` reads it (a
    batch pads its members to its longest, which moves int8 scores a little)."""
    return [read(reader, [item])[0] for item in items]


class Producer:
    """A stand-in for the producer's `send`: each record is kept with the future its delivery
    resolves, which the test settles; `refuse` makes the next sends raise instead."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes, asyncio.Future[None]]] = []
        self.refuse = 0

    async def send(self, topic: str, value: Any, key: Any, headers: Any) -> asyncio.Future[None]:
        if self.refuse:
            self.refuse -= 1
            raise KafkaTimeoutError()
        delivery: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sent.append((topic, key, value, delivery))
        return delivery


def value(metrics: ShadowMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(f"moderator_shadow_{name}", labels) or 0.0


def total(metrics: ShadowMetrics, name: str) -> float:
    """`moderator_shadow_<name>` summed over its series."""
    return sum(
        s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == f"moderator_shadow_{name}"
    )


def counted(metrics: ShadowMetrics, family: str, label: str) -> Counter[tuple[str, str, str]]:
    """The non-zero series of `shadow_decisions_total` or `shadow_languages_total`."""
    (metric,) = (m for m in metrics.registry.collect() if m.name == f"moderator_shadow_{family}")
    return Counter(
        {
            (s.labels["primary_action"], s.labels["shadow_action"], s.labels[label]): int(s.value)
            for s in metric.samples
            if s.name.endswith("_total") and s.value
        }
    )


@pytest.fixture
async def started() -> AsyncIterator[list[Shadow]]:
    """Shadows a test starts, stopped after it."""
    shadows: list[Shadow] = []
    yield shadows
    for shadow in shadows:
        await shadow.stop()


def test_the_candidate_is_a_model_directory_the_loader_accepts(
    candidate: Reader, classifier: Classifier, tmp_path: Path
) -> None:
    info = candidate.classifier.info
    assert info.sha256 == classifier.info.sha256  # the same graph, checked at load
    assert info.ident != classifier.info.ident
    a, b = (classifier.labels.index(name) for name in SWAPPED)
    assert (info.labels[a], info.labels[b]) == SWAPPED[::-1]
    assert info.languages == tuple(LANGUAGES)
    assert candidate.gate is not None
    assert candidate.gate.supported == set(LANGUAGES)
    assert classifier.info.languages == ("en",)  # a manifest that names none reads English
    manifest = json.loads((candidate.classifier.model_dir / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps({**manifest, "languages": []}))
    with pytest.raises(ModelError, match="'languages'"):
        ModelInfo.load(tmp_path)
    unknown = candidate.classifier.model_dir.parent / "unknown-language"
    candidate_model(unknown)
    manifest = json.loads((unknown / "manifest.json").read_text())
    (unknown / "manifest.json").write_text(json.dumps({**manifest, "languages": ["en", "xx"]}))
    with pytest.raises(ModelError, match=r"'languages'.*xx"):
        reader_for(Classifier(unknown))


def test_a_pair_is_counted_by_the_reason_that_acted_and_the_language_a_gate_named(
    reader: Reader, candidate: Reader
) -> None:
    policy = Policy.load()
    pairs = [
        compare(p, s)
        for p, s in zip(
            primaries(reader, policy, TEXTS), decide_texts(candidate, policy, TEXTS), strict=True
        )
    ]
    assert pairs[0] == Compared("allow", "allow", "none", "unnamed")
    assert pairs[2] == Compared("allow", "nudge", "toxicity", "unnamed")  # the shadow's reason
    assert pairs[3] == Compared("review", "nudge", "unsupported_language", "es")  # the primary's
    assert pairs[5] == Compared("block", "block", "threat", "unnamed")
    assert [p.agreed for p in pairs] == [p.primary == p.shadow for p in pairs]


def test_a_disagreement_record_holds_ids_actions_reasons_and_top_scores(
    reader: Reader, candidate: Reader
) -> None:
    policy = Policy.load()
    (primary,) = primaries(reader, policy, [TEXTS[3]])
    (shadow,) = decide_texts(candidate, policy, [TEXTS[3]])
    got = disagreement_record(primary, shadow, candidate.classifier.info.ident, 42)
    top = max(shadow.scores, key=lambda label: shadow.scores[label])
    assert got == {
        "message_id": "m-0",
        "channel_id": "c-0",
        "policy": policy.ident,
        "language": "es",
        "primary": {
            "model": reader.classifier.info.ident,
            "action": "review",
            "reason": "unsupported_language:es",
            "top": got["primary"]["top"],
        },
        "shadow": {
            "model": candidate.classifier.info.ident,
            "action": shadow.ruling.action,
            "reason": shadow.ruling.reason,
            "top": {"label": top, "score": round(shadow.scores[top], 4)},
        },
        "at_ms": 42,
    }
    assert got["primary"]["top"]["label"] in reader.classifier.labels
    check_shadow(orjson.loads(orjson.dumps(got)))  # as the topic holds it
    unscored = primary._replace(scores={}, language=None)
    assert disagreement_record(unscored, shadow, "x@1", 42)["primary"]["top"] is None
    neither = disagreement_record(unscored, shadow._replace(language=None), "x@1", 42)
    assert neither["language"] is None
    check_shadow(neither)


def test_each_message_is_read_under_its_own_channels_policy(candidate: Reader) -> None:
    spec = read_spec()
    strict = Policy.from_mapping(
        {**spec, "name": "strict", "labels": {"toxicity": {"block": 0.01}}}
    )
    texts = ["nice shot dude", "gg wp everyone"]
    items = primaries(candidate, Policy.load(), texts) + primaries(candidate, strict, texts)
    got = read(candidate, items)
    assert got[:2] == decide_texts(candidate, Policy.load(), texts)
    assert got[2:] == decide_texts(candidate, strict, texts)
    assert [j.ruling for j in got[:2]] != [j.ruling for j in got[2:]], "the policies differ"


async def test_a_full_queue_sheds_and_counts_what_it_skipped(
    reader: Reader, candidate: Reader, started: list[Shadow]
) -> None:
    metrics = Metrics().shadow
    shadow = Shadow(candidate, metrics, producer=None, topic="", queue_size=3, max_batch=1)
    items = primaries(reader, Policy.load(), TEXTS[:5])
    shadow.offer(items)  # nothing takes from the queue before start()
    assert (value(metrics, "skipped_total"), value(metrics, "queued")) == (2, 3)
    started.append(shadow)
    await shadow.start()
    await eventually(lambda: sum(counted(metrics, "decisions", "label").values()) == 3, "3 read")
    assert (value(metrics, "skipped_total"), value(metrics, "queued")) == (2, 0)
    # Compared in the order offered: the first three, never the shed ones.
    expected = [compare(p, s) for p, s in zip(items, alone(candidate, items[:3]), strict=False)]
    assert counted(metrics, "decisions", "label") == Counter(
        (c.primary, c.shadow, c.label) for c in expected
    )


def children(name: str) -> list[int]:
    """This process's child processes the OS knows as `name` (/proc's comm)."""
    out = []
    for pid in child_pids(os.getpid()):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == name:
                out.append(pid)
    return out


def priorities(pid: int) -> list[tuple[int, int]]:
    """(niceness, scheduling class) of each thread of process `pid` (/proc's stat, field 19, and
    the kernel's own answer)."""
    return [
        (
            int((t / "stat").read_text().rsplit(")", 1)[1].split()[16]),
            os.sched_getscheduler(int(t.name)),
        )
        for t in Path(f"/proc/{pid}/task").iterdir()
    ]


def affinities(pid: int) -> set[frozenset[int]]:
    """The CPU sets the threads of process `pid` may run on."""
    return {
        frozenset(os.sched_getaffinity(int(t.name))) for t in Path(f"/proc/{pid}/task").iterdir()
    }


async def test_the_shadow_reads_in_a_process_of_its_own_named_for_the_os_that_yields_the_cpu(
    reader: Reader, candidate: Reader, started: list[Shadow]
) -> None:
    """`top` and the shadow benchmark's CPU split tell it from the primary, and none of its
    threads (ONNX Runtime's pool of two included) takes a core or the GIL from the primary's;
    kept to the CPU it was given, all of them."""
    metrics = Metrics().shadow
    last = max(os.sched_getaffinity(0))
    shadow = Shadow(
        candidate, metrics, producer=None, topic="", queue_size=10, threads=2,
        cpus=frozenset({last}),
    )  # fmt: skip
    assert children(THREAD_NAME) == []
    started.append(shadow)
    await shadow.start()
    shadow.offer(primaries(reader, Policy.load(), TEXTS[:4]))
    await eventually(lambda: sum(counted(metrics, "decisions", "label").values()) == 4, "4 read")
    [child] = children(THREAD_NAME)
    threads = priorities(child)
    assert len(threads) >= 2, "ONNX Runtime's pool of two, at least"
    assert set(threads) == {(LOWEST, os.SCHED_IDLE)}, "the shadow waits, not the primary"
    assert affinities(child) == {frozenset({last})}, "every thread on the CPU it was given"
    assert all(t.name != THREAD_NAME for t in threading.enumerate()), "none in this process"
    await shadow.stop()
    await eventually(lambda: children(THREAD_NAME) == [], "the child ended with the shadow")


async def test_a_stop_kills_a_child_that_cannot_finish_its_batch(
    reader: Reader, candidate: Reader, started: list[Shadow]
) -> None:
    """An idle-class child on a busy host may not run for minutes: a stop waits `stop_wait_s`
    for its batch, then kills it, and never hangs its caller (a stopped child stands in here)."""
    metrics = Metrics().shadow
    shadow = Shadow(
        candidate, metrics, producer=None, topic="", queue_size=10, max_batch=1, stop_wait_s=0.5
    )
    started.append(shadow)
    await shadow.start()
    [child] = children(THREAD_NAME)
    os.kill(child, signal.SIGSTOP)  # it never finishes the batch it is handed next
    shadow.offer(primaries(reader, Policy.load(), TEXTS[:1]))
    await eventually(lambda: value(metrics, "batches_total") == 1, "the batch handed over")
    await asyncio.wait_for(shadow.stop(), 60)  # without the bound: waits for the child forever
    await eventually(lambda: children(THREAD_NAME) == [], "the child was killed")


async def test_a_shadow_whose_process_dies_reads_again_in_a_new_one(
    reader: Reader, candidate: Reader, started: list[Shadow], caplog: pytest.LogCaptureFixture
) -> None:
    """A child killed (the OOM killer, an operator) costs skipped comparisons, never the shadow."""
    metrics = Metrics().shadow
    shadow = Shadow(candidate, metrics, producer=None, topic="", queue_size=100, max_batch=2)
    started.append(shadow)
    await shadow.start()
    items = primaries(reader, Policy.load(), TEXTS[:4])
    shadow.offer(items[:2])
    await eventually(lambda: sum(counted(metrics, "decisions", "label").values()) == 2, "read")
    [first] = children(THREAD_NAME)
    os.kill(first, signal.SIGKILL)
    await eventually(lambda: children(THREAD_NAME) == [], "the child is gone")
    shadow.offer(items[2:3])  # read by the dead pool: skipped
    await eventually(lambda: value(metrics, "skipped_total") == 1, "the batch skipped")
    shadow.offer(items[3:])
    await eventually(lambda: sum(counted(metrics, "decisions", "label").values()) == 3, "read")
    assert children(THREAD_NAME) not in ([], [first]), "a new child read it"
    assert "process ended" in caplog.text
    assert shadow.task is not None
    assert not shadow.task.done()


async def test_pairs_are_counted_and_each_disagreement_handed_to_the_producer(
    reader: Reader, candidate: Reader, started: list[Shadow]
) -> None:
    metrics, producer = Metrics().shadow, Producer()
    shadow = Shadow(
        candidate,
        metrics,
        producer=producer,
        topic="chat.shadow",
        queue_size=100,
        threads=2,
        max_batch=1,
    )
    started.append(shadow)
    await shadow.start()
    items = primaries(reader, Policy.load(), TEXTS)
    shadow.offer(items)
    judged = alone(candidate, items)
    pairs = [compare(p, s) for p, s in zip(items, judged, strict=True)]
    disagreed = [i for i, pair in enumerate(pairs) if not pair.agreed]
    assert 0 < len(disagreed) < len(items), "the texts make the models agree and disagree"
    await eventually(lambda: len(producer.sent) == len(disagreed), "a record per disagreement")
    await eventually(
        lambda: sum(counted(metrics, "languages", "language").values()) == len(items),
        "every pair counted by language",
    )
    assert counted(metrics, "decisions", "label") == Counter(
        (p.primary, p.shadow, p.label) for p in pairs
    )
    assert counted(metrics, "languages", "language") == Counter(
        (p.primary, p.shadow, p.language) for p in pairs
    )
    assert total(metrics, "disagreements_total") == len(disagreed)
    (family,) = (
        m for m in metrics.registry.collect() if m.name == "moderator_shadow_disagreements"
    )
    by_both = Counter(
        {
            (s.labels["label"], s.labels["language"]): int(s.value)
            for s in family.samples
            if s.name.endswith("_total") and s.value
        }
    )
    assert by_both == Counter((pairs[i].label, pairs[i].language) for i in disagreed)
    records = {
        orjson.loads(v)["message_id"]: (topic, key, orjson.loads(v))
        for topic, key, v, _ in producer.sent
    }
    for i in disagreed:
        topic, key, got = records[items[i].chat.message_id]
        want = disagreement_record(
            items[i], judged[i], candidate.classifier.info.ident, got["at_ms"]
        )
        assert (topic, key, got) == ("chat.shadow", items[i].chat.channel_id.encode(), want)
    assert value(metrics, "records_total", result="sent") == 0, "counted once delivered"
    for *_, delivery in producer.sent:
        delivery.set_result(None)
    await eventually(
        lambda: value(metrics, "records_total", result="sent") == len(disagreed),
        "deliveries counted",
    )
    assert value(metrics, "records_total", result="failed") == 0


async def test_a_refused_or_failed_record_is_counted_and_the_shadow_goes_on(
    reader: Reader, candidate: Reader, started: list[Shadow]
) -> None:
    metrics, producer = Metrics().shadow, Producer()
    shadow = Shadow(candidate, metrics, producer=producer, topic="chat.shadow", queue_size=100)
    started.append(shadow)
    await shadow.start()
    spanish = primaries(reader, Policy.load(), [TEXTS[3], TEXTS[4], TEXTS[3]])
    producer.refuse = 1
    shadow.offer(spanish)
    await eventually(lambda: len(producer.sent) == 2, "the next two records sent")
    producer.sent[0][3].set_exception(KafkaError("delivery failed"))
    producer.sent[1][3].set_result(None)
    await eventually(lambda: value(metrics, "records_total", result="failed") == 2, "2 failed")
    assert value(metrics, "records_total", result="sent") == 1
    assert total(metrics, "disagreements_total") == 3


async def test_without_a_topic_disagreements_are_counted_only(
    reader: Reader, candidate: Reader, started: list[Shadow]
) -> None:
    metrics, producer = Metrics().shadow, Producer()
    shadow = Shadow(candidate, metrics, producer=producer, topic="", queue_size=100)
    started.append(shadow)
    await shadow.start()
    shadow.offer(primaries(reader, Policy.load(), [TEXTS[4]]))
    await eventually(lambda: total(metrics, "disagreements_total") == 1, "the pair compared")
    assert producer.sent == []


class BrokenPolicy(Policy):
    """A policy that fails on every text: the shadow's reading of its batch fails."""

    def without_allowed(self, text: Any) -> str:
        raise RuntimeError("broken")


async def test_a_batch_the_shadow_fails_on_is_skipped_and_the_next_read(
    reader: Reader, candidate: Reader, started: list[Shadow], caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics().shadow
    shadow = Shadow(candidate, metrics, producer=None, topic="", queue_size=100, max_batch=2)
    broken = BrokenPolicy.from_mapping(read_spec())
    items = primaries(reader, Policy.load(), TEXTS[:4])
    for item in items[:2]:
        shadow.offer([item._replace(policy=broken)])
    started.append(shadow)
    await shadow.start()
    await eventually(lambda: value(metrics, "skipped_total") == 2, "the broken batch skipped")
    shadow.offer(items[2:])
    await eventually(lambda: sum(counted(metrics, "decisions", "label").values()) == 2, "read")
    assert "the shadow model" in caplog.text
    assert "RuntimeError: broken" in caplog.text
    assert shadow.task is not None
    assert not shadow.task.done()


async def pipeline_with(classifier: Classifier, shadow: Shadow | None) -> Pipeline:
    metrics = Metrics()
    batcher = MicroBatcher(classifier, max_batch=8, metrics=metrics.decide)
    await batcher.start()
    cache = ScoreCache("", metrics=metrics.decide, ttl_s=60, l1_size=100, timeout_ms=25)
    return Pipeline(
        classifier,
        Policy.load(),
        batcher,
        cache,
        metrics.decide,
        max_record_bytes=65536,
        budget_ms=50,
        shadow=shadow,
    )


def decided(outcome_value: bytes | None) -> dict[str, Any]:
    """A decision without what differs from run to run (its times)."""
    decision = orjson.loads(outcome_value or b"")
    for timed in ("latency_ms", "decided_at_ms", "over_budget"):
        decision.pop(timed)
    return dict(decision)


async def test_the_pipeline_offers_what_the_model_read_and_decides_as_without_a_shadow(
    classifier: Classifier, candidate: Reader, started: list[Shadow]
) -> None:
    metrics = Metrics().shadow
    shadow = Shadow(candidate, metrics, producer=None, topic="", queue_size=100, max_batch=1)
    started.append(shadow)
    await shadow.start()
    by_itself, beside = (
        await pipeline_with(classifier, None),
        await pipeline_with(classifier, shadow),
    )
    first = [message(i, text) for i, text in enumerate(TEXTS)] + [Record(b"{broken", offset=99)]
    # Then, degraded (late cache misses): decided without the model, so not the shadow's.
    late = [old_message(20, "KYS loser"), old_message(21, "nice shot dude")]
    outcomes: list[list[bytes | None]] = []
    for pipeline in (by_itself, beside):
        try:
            got = await pipeline.process(first)
            pipeline.fallback = Fallback.load("lexical")
            got += await pipeline.process(late)
            outcomes.append([o.value for o in got])
        finally:
            await pipeline.model.calls.batcher.stop()
    assert outcomes[1][len(TEXTS)] == b"{broken"  # a dead letter, untouched
    assert [decided(v) for v in outcomes[1] if v != b"{broken"] == [
        decided(v) for v in outcomes[0] if v != b"{broken"
    ]
    await eventually(
        lambda: sum(counted(metrics, "decisions", "label").values()) == len(TEXTS) + 1,
        "the texts and the cached late one compared",
    )
    # What the shadow was handed: every decision the model read (not the degraded one).
    texts = {f"m-{i}": text for i, text in enumerate(TEXTS)} | {"m-21": "nice shot dude"}
    read_by_model = [decided(v) for v in outcomes[1] if v != b"{broken"]
    read_by_model = [d for d in read_by_model if not d["degraded"]]
    assert [d["message_id"] for d in read_by_model] == list(texts)
    items = [primary_of(d, texts[d["message_id"]]) for d in read_by_model]
    pairs = [compare(p, s) for p, s in zip(items, alone(candidate, items), strict=True)]
    assert counted(metrics, "decisions", "label") == Counter(
        (p.primary, p.shadow, p.label) for p in pairs
    )


def primary_of(decision: dict[str, Any], text: str) -> Primary:
    """The primary's decision as a published record says it."""
    chat = ChatMessage(decision["message_id"], decision["channel_id"], decision["user_id"], text, 0)
    ruling = Ruling(decision["action"], decision["reason"])
    return Primary(
        chat, Policy.load(), decision["model"], ruling, decision["scores"], decision.get("language")
    )


ORPHAN = """
import os, signal, sys
from pathlib import Path
from moderator.shadow import process
if __name__ == "__main__":
    pool = process.reading_process(Path(sys.argv[1]), threads=1, max_windows=4, warm=1)
    print(pool.submit(process.pid).result(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_shadows_process_dies_with_a_moderator_killed_with_sigkill(
    candidate: Reader, tmp_path: Path
) -> None:
    """No orphan keeps a model's memory after its moderator is killed (chaos, the OOM killer)."""
    script = tmp_path / "killed.py"
    script.write_text(ORPHAN)
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    run = subprocess.run(
        [sys.executable, str(script), str(candidate.classifier.model_dir)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == -signal.SIGKILL, run.stderr
    child = int(run.stdout)
    eventually_blocking(lambda: not Path(f"/proc/{child}").exists(), "the child died with it")


async def test_the_worker_lingers_for_a_batch_and_stops_lingering_once_one_waits(
    reader: Reader, candidate: Reader, started: list[Shadow]
) -> None:
    """At chat rates a hand-over carries several messages; a whole batch is not kept waiting."""
    metrics = Metrics().shadow
    shadow = Shadow(
        candidate, metrics, producer=None, topic="", queue_size=100, max_batch=4, linger_s=3600
    )
    started.append(shadow)
    await shadow.start()
    items = primaries(reader, Policy.load(), TEXTS[:4])
    shadow.offer(items[:1])
    await eventually(shadow._queue.empty, "the first taken, the worker lingering")
    shadow.offer(items[1:3])
    shadow.offer(items[3:])  # the batch is whole: read now, not in an hour
    await eventually(lambda: sum(counted(metrics, "decisions", "label").values()) == 4, "read")
    assert value(metrics, "batches_total") == 1, "the four in one hand-over"
