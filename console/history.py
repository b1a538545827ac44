"""The history beyond the newest entries the board keeps in memory: every console writes each
history entry it reads (a verdict from the verdict topic) to Redis, and any console serves older
pages from there on demand, so paging goes back past the board's last `history_size` while no
console holds more than that.

Why Redis and not the verdict topic: a verdict record carries no text, user or channel (they are
in the review topic, which has no index by message id), so an older page read from the topics
would mean reading both back from the end and joining them at every click; Redis answers a page
with one range read, and the consoles already share it (console/claims.py, same prefix).

- `<prefix>history`: a sorted set of entry keys (board.history_key: the time, then the ids; all
  scored 0, so ZRANGE BYLEX pages them in order and two entries of one millisecond stay apart).
- `<prefix>history:entries`: key -> the entry, as the board made it (the verdict's fields).
- `<prefix>history:reviews`: message id -> {channel_id, user_id, text} of its review record,
  joined to the entries when a page is read: one written after its verdict still reaches them.

Writes are idempotent (every console writes what it reads, a restarted one writes its replay
again) and trimmed to the newest `KEPT`. Best effort: while Redis is away an entry is dropped
with one warning a minute, and the older pages answer 503; the newest ones, in memory, still show.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from console.board import ABOUT, Board

log = logging.getLogger(__name__)

KEPT = 50_000  # entries kept in Redis (a few MB): months of a busy team's verdicts
PAGE = 50
BATCH = 200  # entries written in one round trip
QUEUED = 20_000  # entries waiting to be written before new ones are dropped (Redis slow)
WARN_EVERY_S = 60.0


class History:
    """Writes the board's history entries to Redis; reads older pages back."""

    def __init__(self, board: Board, redis: aioredis.Redis | None, prefix: str) -> None:
        self.board = board
        self.redis = redis
        self.key = prefix + "history"
        self.queue: asyncio.Queue[tuple[str, dict[str, Any]]] | None = None  # made in start()
        self.task: asyncio.Task[None] | None = None
        self._warned = 0.0

    def listen(self, event: str, data: dict[str, Any]) -> None:
        """A board listener: entries (`verdict`) and late review records (`reviewed`)."""
        if self.queue is None or event not in ("verdict", "reviewed"):
            return
        try:
            self.queue.put_nowait((event, data))
        except asyncio.QueueFull:
            self._warn("the history store falls behind Redis; older pages miss entries")

    def start(self) -> None:
        """Listen before the feed replays the topics, so the replay is written too (no Redis
        configured: nothing to write, no older pages)."""
        if self.redis is None:
            return
        self.queue = asyncio.Queue(QUEUED)
        self.board.listeners.append(self.listen)
        self.task = asyncio.create_task(self._write(), name="console-history")
        self.task.add_done_callback(_ended)

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            self.board.listeners.remove(self.listen)
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None
        self.queue = None

    async def _write(self) -> None:
        queue = self.queue
        assert queue is not None
        while True:
            batch = [await queue.get()]
            while len(batch) < BATCH and not queue.empty():
                batch.append(queue.get_nowait())
            try:
                await self._put(batch)
            except (RedisError, OSError) as exc:
                self._warn(f"Redis unreachable ({exc!r}): older history pages miss entries")

    async def _put(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        assert self.redis is not None
        entries = {e["key"]: orjson.dumps(_entry(e)) for kind, e in batch if kind == "verdict"}
        reviews = {
            e["message_id"]: orjson.dumps({f: e[f] for f in ABOUT})
            for _, e in batch
            if e.get("text") is not None
        }
        pipe = self.redis.pipeline(transaction=False)
        if entries:
            pipe.zadd(self.key, dict.fromkeys(entries, 0))
            pipe.hset(self.key + ":entries", mapping=entries)
        if reviews:
            pipe.hset(self.key + ":reviews", mapping=reviews)
        pipe.zcard(self.key)
        size = (await pipe.execute())[-1]
        if size > KEPT + BATCH:  # trimmed now and then, not at every write
            old = _names(await self.redis.zrange(self.key, 0, size - KEPT - 1))
            pipe = self.redis.pipeline(transaction=False)
            pipe.zrem(self.key, *old)
            pipe.hdel(self.key + ":entries", *old)
            pipe.hdel(self.key + ":reviews", *{k.split(":", 2)[1] for k in old})
            await pipe.execute()

    async def older(self, before: str, limit: int = PAGE) -> list[dict[str, Any]] | None:
        """Up to `limit` entries older than the key `before`, newest first, each with its review
        record's text and user where one was read; None when Redis cannot say."""
        if self.redis is None:
            return None
        try:
            keys = _names(
                await self.redis.zrange(
                    self.key, f"({before}", "-", desc=True, bylex=True, offset=0, num=limit
                )
            )
            if not keys:
                return []
            found = await self.redis.hmget(self.key + ":entries", keys)
            entries = [orjson.loads(v) for v in found if v is not None]
            ids = [e["message_id"] for e in entries]
            about = await self.redis.hmget(self.key + ":reviews", ids)
        except (RedisError, OSError) as exc:
            self._warn(f"Redis unreachable ({exc!r}): no older history page")
            return None
        for entry, review in zip(entries, about, strict=True):
            entry.update(orjson.loads(review) if review else dict.fromkeys(ABOUT))
        return entries

    def routes(self, identity: Callable[[Request], str | None]) -> list[Route]:
        """`GET /api/history?before=KEY`: the page of entries older than KEY, for a moderator."""

        async def older(request: Request) -> Response:
            if identity(request) is None:
                return JSONResponse({"error": "log in first"}, status_code=401)
            before = request.query_params.get("before", "")
            if not before:
                return JSONResponse({"error": "before: the key of the oldest entry shown"}, 400)
            entries = await self.older(before)
            if entries is None:
                return JSONResponse({"error": "older history needs Redis, unreachable"}, 503)
            return JSONResponse({"entries": entries, "more": len(entries) == PAGE})

        return [Route("/api/history", older)]

    def _warn(self, what: str) -> None:
        if time.monotonic() - self._warned >= WARN_EVERY_S:
            self._warned = time.monotonic()
            log.warning("console: %s", what)


def _entry(entry: dict[str, Any]) -> dict[str, Any]:
    """What is stored of an entry: all but its review record's fields (kept once per message)."""
    return {k: v for k, v in entry.items() if k not in ABOUT}


def _ended(task: asyncio.Task[None]) -> None:
    """A writer that died (a bug, not Redis: that is caught) says so loudly, once."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("console: the history writer stopped; older pages miss entries from now",
                  exc_info=exc)  # fmt: skip


def _names(found: list[Any]) -> list[str]:
    return [k.decode() if isinstance(k, bytes) else str(k) for k in found]
