"""The console's `/metrics`: its process's figures for Prometheus.

What matters is that it answers: the scrape job's `up{job="moderator-console"}` is what the
ModeratorConsoleDown alert watches (a console down leaves the queue unworked, and its held
messages fall back to their policy's action when their timeout passes). No identity is needed,
as for `/healthz`: nothing here names a moderator or a message.
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from starlette.requests import Request
from starlette.responses import Response

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)  # process_start_time_seconds: restarts
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)


async def metrics(request: Request) -> Response:
    return Response(generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})
