"""What the board remembers of each recent held message, for its joins between topics, within a
bound.

The board remembers, per message, what one topic said until another topic's record about the
same message is read: its label (review topic), its first verdict (verdict topic) and its final
decision (decision topic). Those records of a message come within its review timeout of each
other, so only the last few minutes of held messages are ever joined; kept for good, the
memory of a console grew with every held message it ever read (issue 44). The oldest message
goes first (by when its first record was read, not last read), so what a message joins with
never depends on how often a page looked at it.

The three facts live in one entry per message (`Joins`), not in three maps: a message is
forgotten whole, the bound fills at the rate messages are held (not at the slower rate of
verdicts), and a message costs one entry. `Joins.field` gives each fact as a mapping, for the
code that reads one of them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeVar

from console.records import Verdict

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


@dataclass(slots=True)
class Joined:
    """One held message's facts from the three topics; None: not read yet."""

    label: str | None = None  # the label that held it (review topic)
    first: Verdict | None = None  # the verdict that decided it (verdict topic)
    final: tuple[str, str | None] | None = None  # its final action and reason (decision topic)


class Joins:
    """The newest `size` held messages' facts, one entry each."""

    def __init__(self, size: int) -> None:
        self.entries: Newest[str, Joined] = Newest(size)

    def field(self, name: str) -> Field[Any]:
        if name not in Joined.__slots__:
            raise ValueError(f"no such fact: {name!r}")
        return Field(self, name)

    def entry(self, message_id: str) -> Joined:
        """The message's entry, made (as the newest) when it has none."""
        joined = self.entries.get(message_id)
        if joined is None:
            joined = self.entries[message_id] = Joined()
        return joined

    def __len__(self) -> int:
        return len(self.entries)


class Field(MutableMapping[str, V]):
    """One fact of every kept message, as a mapping: the messages whose fact was read."""

    def __init__(self, joins: Joins, name: str) -> None:
        self.joins = joins
        self.name = name

    def __getitem__(self, message_id: str) -> V:
        joined = self.joins.entries.get(message_id)
        value = None if joined is None else getattr(joined, self.name)
        if value is None:
            raise KeyError(message_id)
        return value  # type: ignore[no-any-return]

    def __setitem__(self, message_id: str, value: V) -> None:
        setattr(self.joins.entry(message_id), self.name, value)

    def __delitem__(self, message_id: str) -> None:
        joined = self.joins.entries.get(message_id)
        if joined is None or getattr(joined, self.name) is None:
            raise KeyError(message_id)
        setattr(joined, self.name, None)

    def __iter__(self) -> Iterator[str]:
        return (m for m, j in self.joins.entries.items() if getattr(j, self.name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)
