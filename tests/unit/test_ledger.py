"""The offset ledger alone: plain calls, no asyncio, no producer."""

from __future__ import annotations

from aiokafka.structs import TopicPartition

from moderator.kafka.ledger import OffsetLedger

A, B = TopicPartition("chat.messages", 0), TopicPartition("chat.messages", 1)


def test_the_committable_offset_moves_over_the_acknowledged_prefix_only() -> None:
    ledger = OffsetLedger()
    ledger.assign([A])
    e10, e11, e12 = (ledger.track(A, offset) for offset in (10, 11, 12))
    assert ledger.committable(A) is None
    ledger.ack(e11)  # out of order: held behind offset 10
    assert ledger.committable(A) is None
    ledger.ack(e10)
    assert ledger.committable(A) == 12, "10 and 11 are acknowledged, 12 is not"
    ledger.ack(e12)
    assert ledger.committable(A) == 13
    assert ledger.pending([A]) == 0


def test_in_flight_counts_fetched_records_until_acknowledged_once() -> None:
    ledger = OffsetLedger()
    ledger.assign([A, B])
    a, b = ledger.track(A, 0), ledger.track(B, 0)
    assert ledger.in_flight == 2
    ledger.ack(a)
    ledger.ack(a)  # a repeated ack counts once
    assert ledger.in_flight == 1
    ledger.ack(b)
    assert ledger.in_flight == 0


def test_commits_are_offered_once_and_per_partition() -> None:
    ledger = OffsetLedger()
    ledger.assign([A, B])
    ledger.ack(ledger.track(A, 5))
    ledger.ack(ledger.track(B, 7))
    assert ledger.to_commit() == {A: 6, B: 8}
    assert ledger.to_commit([B]) == {B: 8}
    ledger.mark_committed({A: 6})
    assert ledger.committed(A) == 6
    assert ledger.to_commit() == {B: 8}, "A is committed up to its committable offset"
    ledger.ack(ledger.track(A, 6))
    assert ledger.to_commit() == {A: 7, B: 8}


def test_a_partition_given_up_forgets_its_state_and_its_work_is_no_longer_in_flight() -> None:
    ledger = OffsetLedger()
    ledger.assign([A, B])
    done, held, later = ledger.track(A, 0), ledger.track(A, 1), ledger.track(A, 2)
    kept = ledger.track(B, 0)
    ledger.ack(done)
    ledger.ack(later)  # acknowledged, but behind the unacknowledged offset 1
    ledger.mark_committed({A: 1})
    given_up = ledger.abandon([A])
    assert given_up == [held], "only the unacknowledged work is handed back"
    assert held.abandoned
    assert ledger.in_flight == 1, "only B's record is still in flight"
    assert not ledger.owns(A)
    assert ledger.committable(A) is None
    assert ledger.committed(A) is None
    assert ledger.to_commit() == {}
    ledger.ack(held)  # its late acknowledgement changes nothing
    assert ledger.in_flight == 1
    ledger.mark_committed({A: 3})  # a commit answered after the hand-over is not recorded
    assert ledger.committed(A) is None
    ledger.ack(kept)
    assert ledger.in_flight == 0
    assert ledger.partitions == {B}


def test_a_partition_taken_back_starts_afresh() -> None:
    ledger = OffsetLedger()
    ledger.assign([A])
    old = ledger.track(A, 3)
    ledger.abandon([A])
    ledger.assign([A])
    new = ledger.track(A, 3)  # the new owner had not committed it: fetched again
    ledger.ack(old)
    assert ledger.committable(A) is None, "the old fetch's ack is not this fetch's"
    ledger.ack(new)
    assert ledger.committable(A) == 4


def test_acks_out_of_order_commit_the_acknowledged_prefix_never_the_highest_ack() -> None:
    ledger = OffsetLedger()
    ledger.assign([A])
    entries = {offset: ledger.track(A, offset) for offset in range(20, 26)}
    seen = []
    for offset in (25, 22, 20, 23, 21, 24):
        ledger.ack(entries[offset])
        seen.append((offset, ledger.committable(A), ledger.to_commit()))
    assert seen == [
        (25, None, {}),
        (22, None, {}),
        (20, 21, {A: 21}),  # only 20: 21 is still out
        (23, 21, {A: 21}),
        (21, 24, {A: 24}),  # 21 fills the gap: 20..23 are the prefix, 24 is still out
        (24, 26, {A: 26}),
    ]
    assert ledger.pending([A]) == 0


def test_giving_up_a_partition_never_owned_changes_nothing() -> None:
    ledger = OffsetLedger()
    ledger.assign([A])
    entry = ledger.track(A, 0)
    assert ledger.abandon([B]) == []
    assert ledger.in_flight == 1
    ledger.ack(entry)
    assert ledger.committable(A) == 1
