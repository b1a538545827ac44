"""compacted.Table and TopicState without a broker: each record of a compacted topic, in order,
reaches the book; what the book refuses changes nothing and is reported; the operators' read notes
which keys' last record is refused."""

from __future__ import annotations

import hashlib

from aiokafka.structs import ConsumerRecord

from moderator.kafka.compacted import Table, TopicState
from moderator.review.overrides import InvalidOverride, Override, OverrideBook

DIGEST = hashlib.sha256(b"some text").hexdigest()


def override(action: str, expires_at_ms: int | None = None) -> Override:
    return Override(DIGEST, "global", None, action, "mod-ann", "m-1", None, 1, expires_at_ms)


def record(offset: int, key: str | None, value: bytes | None) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        "chat.overrides", 0, offset, 0, 0, None if key is None else key.encode(), value,
        None, 0, 0, (),
    )  # fmt: skip


class Seen:
    """What a table told its owner, in order."""

    def __init__(self) -> None:
        self.told: list[tuple[str, str]] = []

    def changed(self, key: str, outcome: str) -> None:
        self.told.append((key, outcome))

    def refused(self, key: str, exc: Exception) -> None:
        assert isinstance(exc, InvalidOverride)
        self.told.append((key, "refused"))


def table(seen: Seen) -> Table[OverrideBook]:
    return Table(
        OverrideBook(),
        "chat.overrides",
        {},
        what="overrides",
        refusal=InvalidOverride,
        on_change=seen.changed,
        on_refused=seen.refused,
    )


def test_the_latest_accepted_record_of_a_key_wins_and_a_refused_one_changes_nothing() -> None:
    seen = Seen()
    t = table(seen)
    t.take(record(0, DIGEST, override("block").encode()))
    t.take(record(1, DIGEST, override("nudge").encode()))
    t.take(record(2, DIGEST, b"{not json"))
    t.take(record(3, None, override("warn").encode()))  # no key: not the key its fields make
    assert [o.action for o in t.book.entries()] == ["nudge"]
    assert seen.told == [(DIGEST, "applied"), (DIGEST, "applied"), (DIGEST, "refused"),
                         ("", "refused")]  # fmt: skip


def test_a_tombstone_deletes_its_key() -> None:
    seen = Seen()
    t = table(seen)
    t.take(record(0, DIGEST, override("block").encode()))
    t.take(record(1, DIGEST, None))
    assert t.book.entries() == []
    assert seen.told[-1] == (DIGEST, "removed")


def test_the_operators_read_notes_the_refused_last_records_and_counts_what_each_did() -> None:
    state = TopicState(OverrideBook(), InvalidOverride)
    state.take(DIGEST, override("block").encode())
    state.take(DIGEST, b"[]")
    assert list(state.refused) == [DIGEST], "its last record is refused"
    assert [o.action for o in state.book.entries()] == ["block"], "the earlier one stays"
    state.take(DIGEST, override("nudge", expires_at_ms=2).encode())  # read already expired
    assert state.refused == {}
    assert state.book.entries() == []
    assert state.outcomes == {"applied": 1, "expired": 1}
