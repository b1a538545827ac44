"""The console's `/metrics`: its process's figures for Prometheus, and which model the moderators'
verdicts side with where the shadow model disagreed with the primary.

What matters first is that it answers: the scrape job's `up{job="moderator-console"}` is what the
ModeratorConsoleDown alert watches (a console down leaves the queue unworked, and its held
messages fall back to their policy's action when their timeout passes). No identity is needed,
as for `/healthz`: nothing here names a moderator or a message.

`moderator_console_shadow_verdicts{agrees}` is a gauge over the disagreements the console keeps
(the newest `disagreements_kept` of the shadow topic, console/disagreements.py), not a counter:
a console that starts reads the topic's retention again, and would count every verdict twice.
Only a message the primary held gets a verdict, so the figure leans toward the primary.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from console.disagreements import SIDES, Disagreements


class VerdictSides(Collector):
    """The disagreements kept with a verdict, by the model the verdict sides with."""

    def __init__(self, disagreements: Disagreements) -> None:
        self.disagreements = disagreements

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "moderator_console_shadow_verdicts",
            "Disagreements kept by the console whose message has a verdict, by the model the "
            "verdict sides with (primary, shadow, neither); only messages the primary held get "
            "verdicts, so it leans toward the primary",
            labels=["agrees"],
        )
        counts = self.disagreements.sides()
        for side in SIDES:
            family.add_metric([side], counts[side])
        yield family


def metrics_endpoint(disagreements: Disagreements) -> Callable[[Request], Awaitable[Response]]:
    """The `/metrics` handler of one console app: a registry of its own, so two apps in one
    process (the tests) never register a collector twice."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)  # process_start_time_seconds: restarts
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    registry.register(VerdictSides(disagreements))

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    return metrics
