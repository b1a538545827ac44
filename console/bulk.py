"""Bulk verdicts: one request carrying several held messages' ids, answered per id. Each id goes
through the one-item path (`Console.decide`), so a batch obeys the same rules as a single click:
an item another moderator claimed, or one already decided, is refused and named in the answer,
never acted on; each verdict takes its first-verdict lock and waits out the undo grace; one undo
request takes back every verdict of the batch still in its grace (`Console.take_back` for each).
The CSRF check is the app's one middleware, as for every post.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from console.posted import posted

if TYPE_CHECKING:
    from console.app import Answer, Console

MAX_IDS = 500  # one page's worth of cards; a larger batch is refused whole, nothing decided


def bulk_routes(console: Console) -> list[Route]:
    """`/api/bulk/verdict` and `/api/bulk/undo` for `console`."""

    async def verdicts(request: Request) -> Response:
        parsed = await _parsed(console, request)
        if isinstance(parsed, Response):
            return parsed
        who, body, ids = parsed
        checked = console.check_verdict(body, who)
        if isinstance(checked, Response):
            return checked  # a bad verdict, scope or reason refuses the whole batch
        return _per_id(ids, [await console.decide(who, m, checked) for m in ids])

    async def undo(request: Request) -> Response:
        parsed = await _parsed(console, request)
        if isinstance(parsed, Response):
            return parsed
        who, _, ids = parsed
        return _per_id(ids, [await console.take_back(who, m) for m in ids])

    return [
        Route("/api/bulk/verdict", verdicts, methods=["POST"]),
        Route("/api/bulk/undo", undo, methods=["POST"]),
    ]


async def _parsed(
    console: Console, request: Request
) -> tuple[str, dict[str, Any], list[str]] | Response:
    """(moderator, body, its distinct ids in order), or the 401 / 400 answer."""
    got = await posted(console.identity, request)
    if isinstance(got, Response):
        return got
    who, body = got
    ids = body.get("message_ids") if isinstance(body, dict) else None
    if (
        not isinstance(body, dict)
        or not isinstance(ids, list)
        or not ids
        or not all(isinstance(m, str) and m for m in ids)
    ):
        return JSONResponse({"error": "expected JSON with message_ids: a list of ids"}, 400)
    if len(ids) > MAX_IDS:
        return JSONResponse({"error": f"at most {MAX_IDS} message_ids at once"}, 400)
    return who, body, list(dict.fromkeys(ids))


def _per_id(ids: list[str], answers: list[Answer]) -> Response:
    """200 with each id's own status and answer, in the order asked; `done` lists those it took."""
    results = [
        {"message_id": m, "status": status, **data}
        for m, (status, data) in zip(ids, answers, strict=True)
    ]
    done = [r["message_id"] for r in results if r["status"] < 300]
    return JSONResponse({"results": results, "done": done})
