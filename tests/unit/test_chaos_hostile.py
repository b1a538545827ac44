"""Hostile records: each case gets what it says, checked against the real parser (no broker)."""

from __future__ import annotations

from collections import Counter

import pytest

from chaos.hostile import CASES, DECISION, JUNK, VALID, burst, judge
from moderator.errors import InvalidRecord
from moderator.records import parse_message


def outcome(value: bytes | None) -> str:
    try:
        parse_message(value, timestamp_ms=0, max_bytes=65536)
    except InvalidRecord as err:
        return err.code
    return DECISION


def test_a_burst_has_the_counts_asked_for_and_every_case() -> None:
    records = burst(1000, 100, seed=3)
    kinds = Counter(CASES[r.case].valid for r in records)
    assert kinds == {False: 1000, True: 100}
    assert {r.case for r in records} == set(CASES)
    assert len({r.key for r in records}) == len(records), "keys identify records"
    assert Counter(r.case for r in records)["text_1mib"] <= 5, "heavy cases are capped"


def test_the_same_seed_gives_the_same_burst() -> None:
    first, second = burst(200, 20, seed=9), burst(200, 20, seed=9)
    assert [(r.key, r.case) for r in first] == [(r.key, r.case) for r in second]
    random_bytes = [r.value for r in first if r.case == "random_bytes"]
    assert random_bytes == [r.value for r in second if r.case == "random_bytes"]


@pytest.mark.parametrize("case", JUNK + VALID, ids=lambda c: c.name)
def test_each_case_gets_what_it_expects_from_the_parser(case: object) -> None:
    records = [r for r in burst(600, 60, seed=4) if r.case == case.name]  # type: ignore[attr-defined]
    assert records
    for record in records:
        assert outcome(record.value) in case.expect  # type: ignore[attr-defined]


def test_judge_tells_what_each_case_got() -> None:
    records = burst(40, 10, seed=1)
    dead = {r.key: "invalid_json" for r in records if not CASES[r.case].valid}
    decided = {r.key.decode() for r in records if CASES[r.case].valid}
    decided.discard(records[-1].key.decode())
    rows = {row.case.name: row for row in judge(records, dead, decided)}
    assert rows["truncated_json"].ok
    assert not rows["tombstone"].ok, "a tombstone must get empty_value, not invalid_json"
    last = rows[records[-1].case]
    assert last.outcomes is not None
    assert last.outcomes.get("nothing") == 1
    assert not last.ok
