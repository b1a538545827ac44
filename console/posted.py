"""A moderator's POST read the one way every action reads it: who sent it, or the 401 answer
(nobody logged in), and its body as JSON (None when it is not JSON: each action says what it
expected). The CSRF token was checked before (console/csrf.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response


async def posted(
    identity: Callable[[Request], str | None], request: Request
) -> tuple[str, Any] | Response:
    """(moderator, JSON body or None), or the 401 answer."""
    who = identity(request)
    if who is None:
        return JSONResponse({"error": "no identity: log in first"}, status_code=401)
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        body = None
    return who, body
