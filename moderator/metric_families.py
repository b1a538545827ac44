"""How a wing's metrics are made and bound: one registry, the moderator's namespace, and a
labelled family's children bound once per label value (moderator/metric_wings.py uses these;
what each wing counts is there)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

NAMESPACE = "moderator"

M = TypeVar("M", bound=MetricWrapperBase)
Key = str | tuple[str, ...]


class ByLabel(Generic[M]):
    """A labelled metric's children by label value, each bound on first use: for a value read
    from the message or a policy (an action, a language code, a topic-partition), one
    `.labels()` per new value instead of one per event. It holds what the family holds anyway
    (a child per value ever seen), no more."""

    def __init__(self, family: M, *values: Key) -> None:
        self._family = family
        self._children: dict[Key, M] = {}
        for value in values:  # each series at 0 from the start
            self[value]

    def __getitem__(self, value: Key) -> M:
        child = self._children.get(value)
        if child is None:
            child = self._family.labels(*((value,) if isinstance(value, str) else value))
            self._children[value] = child
        return child

    def remove(self, value: Key) -> None:
        """Drop `value`'s series (a partition handed over); nothing if it has none."""
        if self._children.pop(value, None) is not None:
            self._family.remove(*((value,) if isinstance(value, str) else value))


class Families:
    """Makes the metrics of one registry, under the moderator's namespace."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def counter(self, name: str, doc: str, *labels: str) -> Counter:
        return Counter(name, doc, labels, namespace=NAMESPACE, registry=self.registry)

    def gauge(self, name: str, doc: str, *labels: str) -> Gauge:
        return Gauge(name, doc, labels, namespace=NAMESPACE, registry=self.registry)

    def histogram(self, name: str, doc: str, buckets: Sequence[float], *labels: str) -> Histogram:
        return Histogram(
            name, doc, labels, buckets=buckets, namespace=NAMESPACE, registry=self.registry
        )


class Wing:
    """A wing's metrics, on the registry `f` makes them on (read a sample back from it)."""

    def __init__(self, f: Families) -> None:
        self.registry = f.registry
