"""A mapping that keeps only its newest `size` keys, for the board's joins between topics.

The board remembers, per message, what one topic said until another topic's record about the
same message is read: its label (review topic), its first verdict (verdict topic) and its final
decision (decision topic). Those records of a message come within its review timeout of each
other, so only the last few minutes of held messages are ever joined; kept for good, the
memory of a console grew with every held message it ever read (issue 44). The oldest key goes
first (by when it was first set, not last read), so what a message joins with never depends on
how often a page looked at it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, MutableMapping
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Newest(MutableMapping[K, V]):
    """At most `size` keys; setting a new one past that forgets the one set longest ago."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self.size = size
        self._data: OrderedDict[K, V] = OrderedDict()

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __setitem__(self, key: K, value: V) -> None:
        self._data[key] = value  # a key set again keeps its place: its age is its first record's
        while len(self._data) > self.size:
            self._data.popitem(last=False)

    def __delitem__(self, key: K) -> None:
        del self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)
