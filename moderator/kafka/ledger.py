"""Which input offsets may be committed: the records fetched, per partition, and which of them
were acknowledged.

An offset is committable only once the record and every earlier fetched record of its partition
are acknowledged (their decision or dead letter is on the broker); acknowledgements may come
out of order, the committable offset moves over the acknowledged prefix only. Pure and
synchronous, like faust's "highest contiguous acknowledged offset" and quix-streams'
`Checkpoint`: the service feeds it fetches, acks, commits and rebalances; no Kafka, no asyncio.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aiokafka.structs import TopicPartition


@dataclass(eq=False, slots=True)
class Entry:
    """One fetched record, until its partition's committable offset moves past it."""

    tp: TopicPartition
    offset: int
    acked: bool = False
    abandoned: bool = False  # its partition moved to another member, which redoes the input

    @property
    def settled(self) -> bool:
        """No longer in flight: acknowledged, or given up."""
        return self.acked or self.abandoned


class OffsetLedger:
    """Fetched records per owned partition, the acknowledged prefix, and what is committed."""

    def __init__(self) -> None:
        self._open: dict[TopicPartition, deque[Entry]] = {}  # fetch order, prefix unacked
        self._committable: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        """Records fetched and neither acknowledged nor given up (the fetch cap counts these)."""
        return self._in_flight

    @property
    def partitions(self) -> set[TopicPartition]:
        """The partitions owned now."""
        return set(self._open)

    def owns(self, tp: TopicPartition) -> bool:
        return tp in self._open

    def assign(self, tps: Iterable[TopicPartition]) -> None:
        """Own `tps` (already owned ones keep their state)."""
        for tp in tps:
            self._open.setdefault(tp, deque())

    def track(self, tp: TopicPartition, offset: int) -> Entry:
        """A record of an owned partition was fetched; offsets must come in fetch order."""
        entry = Entry(tp, offset)
        self._open[tp].append(entry)
        self._in_flight += 1
        return entry

    def ack(self, entry: Entry) -> None:
        """`entry`'s outcome was acknowledged; move its partition's committable offset over the
        acknowledged prefix. Acks of entries given up, or repeated, change nothing."""
        if entry.settled:
            return
        entry.acked = True
        self._in_flight -= 1
        queue = self._open[entry.tp]
        while queue and queue[0].acked:
            self._committable[entry.tp] = queue.popleft().offset + 1

    def committable(self, tp: TopicPartition) -> int | None:
        """The offset to commit for `tp`: one past its acknowledged prefix; None before any."""
        return self._committable.get(tp)

    def committed(self, tp: TopicPartition) -> int | None:
        """The offset last committed for `tp` by this member; None before any."""
        return self._committed.get(tp)

    def pending(self, tps: Iterable[TopicPartition]) -> int:
        """Records of `tps` not yet under the committable offset."""
        return sum(len(self._open.get(tp, ())) for tp in tps)

    def to_commit(self, only: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """Committable offsets not committed yet (of the partitions in `only`, if given)."""
        wanted = None if only is None else set(only)
        return {
            tp: offset
            for tp, offset in self._committable.items()
            if self._committed.get(tp) != offset and (wanted is None or tp in wanted)
        }

    def mark_committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        """The broker took these commits (partitions given up meanwhile are left out)."""
        for tp, offset in offsets.items():
            if tp in self._open:
                self._committed[tp] = offset

    def abandon(self, tps: Iterable[TopicPartition]) -> list[Entry]:
        """Give up `tps` (now owned elsewhere): forget their state; their unacknowledged entries
        are no longer in flight, or the fetch cap would stay taken by work never acknowledged
        here. Returns those entries, so whoever is still publishing them can stop."""
        given_up = []
        for tp in tps:
            for entry in self._open.pop(tp, ()):
                if not entry.settled:
                    entry.abandoned = True
                    self._in_flight -= 1
                    given_up.append(entry)
            self._committable.pop(tp, None)
            self._committed.pop(tp, None)
        return given_up
