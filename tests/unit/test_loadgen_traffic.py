"""Traffic that looks like chat, and malformed records the processor must dead-letter."""

from __future__ import annotations

import random
from collections import Counter

import orjson
import pytest

from loadgen.corpus import default_corpus, parse_lines
from loadgen.traffic import Kind, Malformation, OutRecord, TrafficGenerator, vary
from moderator.errors import InvalidRecord
from moderator.records import parse_message


def generate(n: int, **kwargs: object) -> list[OutRecord]:
    gen = TrafficGenerator(run_id="lgtest", seed=kwargs.pop("seed", 1), **kwargs)  # type: ignore[arg-type]
    return [gen.next_record(sent_at_ms=1_700_000_000_000 + i) for i in range(n)]


def test_corpus_has_hundreds_of_benign_lines_and_a_smaller_toxic_set() -> None:
    corpus = default_corpus()
    assert len(corpus.benign) >= 300
    assert 50 <= len(corpus.toxic) < len(corpus.benign)
    assert all(len(line) >= 100 for line in corpus.long)
    assert not any(line.startswith("#") for line in corpus.benign + corpus.toxic + corpus.long)


def test_parse_lines_drops_comments_and_blanks() -> None:
    assert parse_lines("# header\n\n gg \n# insults\nlol\n") == ("gg", "lol")


def test_valid_records_follow_the_inbound_schema() -> None:
    records = generate(2000, malformed_ratio=0.0)
    for i, record in enumerate(records):
        message = parse_message(record.value, timestamp_ms=0, max_bytes=65536)
        assert message.message_id == record.message_id
        assert record.key == message.channel_id.encode()
        assert message.sent_at_ms == 1_700_000_000_000 + i
        assert message.user_id.startswith("u-")
    ids = [r.message_id for r in records]
    assert len(set(ids)) == len(ids)


def test_message_ids_differ_between_runs_with_the_same_seed() -> None:
    a = TrafficGenerator(run_id="lgaaaa", seed=3).next_record(0)
    b = TrafficGenerator(run_id="lgbbbb", seed=3).next_record(0)
    assert a.message_id != b.message_id
    assert orjson.loads(a.value)["text"] == orjson.loads(b.value)["text"]


def test_lengths_are_mostly_short_with_a_long_tail() -> None:
    texts = [orjson.loads(r.value)["text"] for r in generate(5000, dup_ratio=0.0)]
    words = [len(t.split()) for t in texts]
    short = sum(1 for w in words if w <= 8)
    assert short / len(words) > 0.6
    assert any(len(t) > 200 for t in texts)
    assert max(len(t) for t in texts) < 600


@pytest.mark.parametrize("dup_ratio", [0.0, 0.4, 0.9])
def test_repeat_share_follows_dup_ratio_and_new_lines_are_new(dup_ratio: float) -> None:
    records = generate(4000, dup_ratio=dup_ratio, toxic_ratio=0.1)
    repeats = sum(r.repeat for r in records)
    assert repeats / len(records) == pytest.approx(dup_ratio, abs=0.03)
    fresh = [orjson.loads(r.value)["text"] for r in records if not r.repeat]
    assert len(set(fresh)) == len(fresh)


def test_repeats_include_exact_and_near_copies() -> None:
    records = generate(3000, dup_ratio=0.5, toxic_ratio=0.0)
    seen: set[str] = set()
    exact = near = 0
    for record in records:
        text = orjson.loads(record.value)["text"]
        if record.repeat:
            if text in seen:
                exact += 1
            else:
                near += 1
        seen.add(text)
    assert exact > 500
    assert near > 300


def test_toxic_share_follows_toxic_ratio_and_uses_toxic_lines() -> None:
    records = generate(4000, toxic_ratio=0.2, dup_ratio=0.0)
    kinds = Counter(r.kind for r in records)
    assert kinds[Kind.TOXIC] / len(records) == pytest.approx(0.2, abs=0.03)
    toxic = set(default_corpus().toxic)
    for record in records:
        if record.kind is Kind.TOXIC:
            text = orjson.loads(record.value)["text"]
            assert any(text.endswith(line) for line in toxic)


def test_same_seed_same_traffic() -> None:
    assert [r.value for r in generate(300, seed=9)] == [r.value for r in generate(300, seed=9)]
    assert [r.value for r in generate(300, seed=9)] != [r.value for r in generate(300, seed=10)]


def test_malformed_records_are_rejected_by_the_moderators_parser_and_carry_their_id() -> None:
    records = generate(3000, malformed_ratio=0.3)
    malformed = [r for r in records if r.kind is Kind.MALFORMED]
    assert len(malformed) / len(records) == pytest.approx(0.3, abs=0.03)
    assert {r.malformation for r in malformed} == set(Malformation)
    codes: Counter[str] = Counter()
    for record in malformed:
        with pytest.raises(InvalidRecord) as caught:
            parse_message(record.value, timestamp_ms=0, max_bytes=65536)
        codes[caught.value.code] += 1
        assert record.key == record.message_id.encode()
        assert record.message_id.encode() in record.value
        assert record.message_id.startswith("lgtest-bad-")
    assert len(codes) >= 5


def test_ratios_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="dup_ratio"):
        TrafficGenerator(run_id="x", dup_ratio=1.5)
    with pytest.raises(ValueError, match="channels"):
        TrafficGenerator(run_id="x", channels=0)


def test_vary_keeps_the_line_recognisable() -> None:
    rng = random.Random(0)
    for _ in range(200):
        variant = vary("gg wp", rng)
        assert "gg" in variant.lower() or "GG" in variant
