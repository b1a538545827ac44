"""The user panel: one user's recent held messages with what became of each (waiting, the
moderator's verdict, or the final decision: a verdict applied or the review timeout's fallback),
and the user's strikes and mutes as the moderator keeps them in Redis (moderator/users/state.py,
whose key functions name them here too). The console only reads those keys: it never counts a
strike or lifts a mute.

The messages are what the board keeps of the topics it reads anyway, per user
(console/recent.py, bounded).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from console.recent import RecentByUser
from console.records import now_ms
from moderator.users.state import mute_keys, strikes_key


class UserPanel:
    """`GET /api/user?user_id=`: the panel's data, read when a moderator opens it."""

    def __init__(self, recent: RecentByUser, redis: aioredis.Redis | None) -> None:
        self.recent = recent
        self.redis = redis

    async def state(self, user_id: str, channels: list[str]) -> dict[str, Any] | None:
        """The user's strikes (message ids and times, newest first) and live mutes (everywhere,
        and in each of `channels`), from the moderator's keys; None when Redis cannot say."""
        if self.redis is None:
            return None
        every = mute_keys(user_id, "")[0]
        per_channel = [mute_keys(user_id, c)[1] for c in channels]
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.zrange(strikes_key(user_id), 0, -1, desc=True, withscores=True)
            pipe.mget([every, *per_channel])
            strikes, mutes = await pipe.execute()
        except (RedisError, OSError):
            return None
        now = now_ms()
        until = [int(v) if v is not None else 0 for v in mutes]
        return {
            "strikes": [{"message_id": _text(m), "at_ms": int(t)} for m, t in strikes],
            "muted_everywhere_until_ms": until[0] if until[0] > now else None,
            "muted_in": {c: u for c, u in zip(channels, until[1:], strict=True) if u > now},
        }

    def routes(self, identity: Callable[[Request], str | None]) -> list[Route]:
        async def user(request: Request) -> Response:
            if identity(request) is None:
                return JSONResponse({"error": "log in first"}, status_code=401)
            user_id = request.query_params.get("user_id", "")
            if not user_id:
                return JSONResponse({"error": "user_id: whose panel"}, status_code=400)
            messages = self.recent.recent(user_id)
            channels = sorted({str(m["channel_id"]) for m in messages})
            state = await self.state(user_id, channels)
            body = {"user_id": user_id, "messages": messages, "state": state}
            return Response(orjson.dumps(body), media_type="application/json")

        return [Route("/api/user", user)]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
