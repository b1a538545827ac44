"""The console's ASGI app (Starlette): one page, its event stream, and the moderators' actions.

Access: a moderator is whoever the identity header names (set by an authenticating proxy, when
configured) or whoever logged in with a token (the session cookie, signed). Nothing but the login
works without an identity. Every POST is checked against CSRF twice: its Origin (when the browser
sends one) must be this site, and it must carry the session's CSRF token (a form field, or the
X-CSRF-Token header of the page's own requests). The page builds every user text with
`textContent` and the CSP allows no inline script, so a chat message is only ever text.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib.resources import files
from typing import Any

import orjson
from aiokafka.errors import KafkaError
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from console.board import Board
from console.claims import Claims
from console.config import ConsoleSettings, token_matches
from console.feed import Feed
from console.records import SCOPES, VERDICTS, Verdict, now_ms

log = logging.getLogger(__name__)

STATIC = files("console") / "static"
TICK_S = 1.0  # claims refreshed from Redis, deadlines and the overview, this often
STREAM_BACKLOG = 2000  # events a slow page may fall behind by before it is made to reconnect
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make the form posts say `Origin: null`
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


class SecurityHeaders:
    """The headers above on every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


class Console:
    """The app's state and handlers."""

    def __init__(self, settings: ConsoleSettings, board: Board, feed: Feed, claims: Claims) -> None:
        self.settings = settings
        self.logins = settings.logins()
        self.board = board
        self.feed = feed
        self.claims = claims

    # -- identity and CSRF ---------------------------------------------------------------------

    def identity(self, request: Request) -> str | None:
        if self.settings.identity_header:
            who = request.headers.get(self.settings.identity_header, "").strip()
            if who:
                return who
        found = request.session.get("moderator_id")
        return found if isinstance(found, str) and found else None

    def csrf(self, request: Request) -> str:
        token = request.session.get("csrf")
        if not isinstance(token, str):
            token = request.session["csrf"] = secrets.token_urlsafe(32)
        return token

    def csrf_ok(self, request: Request, given: str | None) -> bool:
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
            return False
        expected = request.session.get("csrf")
        return bool(given and isinstance(expected, str) and hmac.compare_digest(given, expected))

    # -- pages ---------------------------------------------------------------------------------

    async def index(self, request: Request) -> Response:
        self.csrf(request)
        return FileResponse(str(STATIC / "index.html"), media_type="text/html; charset=utf-8")

    async def session(self, request: Request) -> Response:
        return JSONResponse({
            "moderator_id": self.identity(request),
            "csrf": self.csrf(request),
            "token_login": bool(self.logins),
        })  # fmt: skip

    async def login(self, request: Request) -> Response:
        form = await request.form()
        csrf, token = form.get("csrf"), form.get("token")
        if not self.csrf_ok(request, csrf if isinstance(csrf, str) else None):
            return JSONResponse({"error": "csrf"}, status_code=403)
        who = token_matches(token, self.logins) if isinstance(token, str) else None
        if who is None:
            log.warning("console: a login with an unknown token")
            return RedirectResponse("/?login=failed", status_code=303)
        request.session["moderator_id"] = who
        request.session["csrf"] = secrets.token_urlsafe(32)  # a new session, a new token
        log.info("console: %s logged in", who)
        return RedirectResponse("/", status_code=303)

    async def logout(self, request: Request) -> Response:
        form = await request.form()
        csrf = form.get("csrf")
        if not self.csrf_ok(request, csrf if isinstance(csrf, str) else None):
            return JSONResponse({"error": "csrf"}, status_code=403)
        request.session.clear()
        return RedirectResponse("/", status_code=303)

    async def health(self, request: Request) -> Response:
        return JSONResponse(self.board.status)

    async def events(self, request: Request) -> Response:
        who = self.identity(request)
        if who is None:
            return JSONResponse({"error": "log in first"}, status_code=401)
        return EventSourceResponse(self._stream(who), ping=15, send_timeout=30)

    async def _stream(self, who: str) -> AsyncIterator[ServerSentEvent]:
        queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue(STREAM_BACKLOG)

        def listener(event: str, data: dict[str, Any]) -> None:
            with contextlib.suppress(asyncio.QueueFull):  # the page reconnects, gets a snapshot
                queue.put_nowait((event, data))
            if queue.full():
                self.board.listeners.remove(listener)

        self.board.listeners.append(listener)
        try:
            snapshot = {**self.board.snapshot(), "me": who}
            yield ServerSentEvent(orjson.dumps(snapshot).decode(), event="snapshot")
            while listener in self.board.listeners or not queue.empty():
                event, data = await queue.get()
                yield ServerSentEvent(orjson.dumps(data).decode(), event=event)
        finally:
            with contextlib.suppress(ValueError):
                self.board.listeners.remove(listener)

    # -- actions (JSON posts from the page) ----------------------------------------------------

    async def _action(
        self, request: Request, handle: Callable[[str, dict[str, Any]], Awaitable[Response]]
    ) -> Response:
        if not self.csrf_ok(request, request.headers.get("x-csrf-token")):
            return JSONResponse({"error": "csrf"}, status_code=403)
        who = self.identity(request)
        if who is None:
            return JSONResponse({"error": "no identity: log in first"}, status_code=401)
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("message_id"), str):
            return JSONResponse({"error": "expected JSON with a message_id"}, status_code=400)
        return await handle(who, body)

    def _gone(self, message_id: str) -> Response | None:
        first = self.board.first.get(message_id)
        if first is not None:
            return JSONResponse(
                {"error": "gone", "decided_by": first.moderator_id, "verdict": first.verdict},
                status_code=409,
            )
        if message_id not in self.board.items:
            return JSONResponse({"error": "not waiting (unknown or timed out)"}, status_code=404)
        return None

    async def claim(self, request: Request) -> Response:
        async def handle(who: str, body: dict[str, Any]) -> Response:
            message_id = body["message_id"]
            if (gone := self._gone(message_id)) is not None:
                return gone
            if body.get("release"):
                await self.claims.release(message_id, who)
                self.board.set_claim(message_id, None)
                return JSONResponse({"released": True})
            holder = await self.claims.claim(message_id, who)
            self.board.set_claim(message_id, holder)
            code = 200 if holder["moderator_id"] == who else 409
            return JSONResponse({"claim": holder}, status_code=code)

        return await self._action(request, handle)

    async def verdict(self, request: Request) -> Response:
        async def handle(who: str, body: dict[str, Any]) -> Response:
            message_id = body["message_id"]
            checked = self._checked(body)
            if isinstance(checked, Response):
                return checked
            if (gone := self._gone(message_id)) is not None:
                return gone
            claim = self.board.claims.get(message_id)
            if claim and claim["moderator_id"] != who and claim["until_ms"] > now_ms():
                return JSONResponse({"error": "claimed", "claim": claim}, status_code=409)
            verdict = Verdict(message_id, checked[0], who, checked[1], checked[2], now_ms())
            first = await self.claims.first_verdict(message_id, verdict.shown())
            if (first["moderator_id"], first["at_ms"]) != (who, verdict.at_ms):
                first_by = {"decided_by": first["moderator_id"], "verdict": first["verdict"]}
                return JSONResponse({"error": "gone", **first_by}, status_code=409)
            return await self._send(verdict)

        return await self._action(request, handle)

    async def undo(self, request: Request) -> Response:
        async def handle(who: str, body: dict[str, Any]) -> Response:
            message_id = body["message_id"]
            checked = self._checked(body)
            if isinstance(checked, Response):
                return checked
            first = self.board.first.get(message_id)
            if first is None or first.moderator_id != who:
                return JSONResponse({"error": "only the moderator who decided may undo, once "
                                     "their verdict is on the topic"}, status_code=409)  # fmt: skip
            verdict = Verdict(message_id, checked[0], who, checked[1], checked[2], now_ms())
            if not self.board.is_correction(first, verdict):
                return JSONResponse({"error": "the undo grace period is over"}, status_code=409)
            if self.board.effective[message_id].verdict == verdict.verdict:
                return JSONResponse({"error": "that is the verdict already"}, status_code=409)
            await self.claims.correct(message_id, verdict.shown())
            return await self._send(verdict)

        return await self._action(request, handle)

    def _checked(self, body: dict[str, Any]) -> tuple[str, str | None, str] | Response:
        """(verdict, reason, scope) of a verdict post, or the 400 answer."""
        verdict, reason, scope = body.get("verdict"), body.get("reason"), body.get("scope")
        scope = scope or "global"
        if verdict not in VERDICTS or scope not in SCOPES:
            return JSONResponse({"error": f"verdict: {VERDICTS}, scope: {SCOPES}"}, 400)
        if reason is not None and not isinstance(reason, str):
            return JSONResponse({"error": "reason: a string"}, status_code=400)
        return verdict, (reason or "").strip()[:500] or None, scope

    async def _send(self, verdict: Verdict) -> Response:
        try:
            sent = await self.feed.send(verdict, self.settings.send_timeout_s)
        except KafkaError as exc:
            log.error("console: verdict on %s not sent: %r", verdict.message_id, exc)
            return JSONResponse({"error": f"not sent: {exc}"}, status_code=503)
        log.info("console: %s %s %s", verdict.moderator_id, verdict.verdict, verdict.message_id)
        if sent:
            return JSONResponse({"sent": True, "verdict": verdict.shown()})
        return JSONResponse(
            {"sent": False, "queued": True, "verdict": verdict.shown()}, status_code=202
        )

    # -- background ----------------------------------------------------------------------------

    async def tick(self) -> None:
        """Claims as Redis has them (other consoles'), deadlines, and the overview."""
        while True:
            held = await self.claims.held(list(self.board.items))
            if held is not None:
                self.board.set_claims(held)
            self.board.set_status(redis="up" if self.claims.shared else "down")
            self.board.expire()
            self.board.publish_overview()
            await asyncio.sleep(TICK_S)


def create_app(settings: ConsoleSettings, board: Board, feed: Feed, claims: Claims) -> Starlette:
    console = Console(settings, board, feed, claims)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await feed.start()
        ticker = asyncio.create_task(console.tick(), name="console-tick")
        try:
            yield
        finally:
            ticker.cancel()
            await feed.stop()
            await claims.close()

    return Starlette(
        routes=[
            Route("/", console.index),
            Route("/healthz", console.health),
            Route("/api/session", console.session),
            Route("/login", console.login, methods=["POST"]),
            Route("/logout", console.logout, methods=["POST"]),
            Route("/events", console.events),
            Route("/api/claim", console.claim, methods=["POST"]),
            Route("/api/verdict", console.verdict, methods=["POST"]),
            Route("/api/undo", console.undo, methods=["POST"]),
            Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
        ],
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(
                SessionMiddleware,
                secret_key=settings.secret or secrets.token_urlsafe(32),
                session_cookie="console_session",
                same_site="strict",
                https_only=settings.secure_cookies,
            ),
        ],
        lifespan=lifespan,
    )
