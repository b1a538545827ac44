"""The console's ASGI app (Starlette): one page, its event stream, and the moderators' actions.

Access: a moderator is whoever logged in with a token (the session cookie, signed), or whoever
the ID token an OIDC proxy passes names once verified (console/auth.py); no header is taken at
its word. Nothing but the login works without an identity. Every request that may change state
passes console/csrf.py's one check (its Origin, and the session's CSRF token), whichever way its
sender is identified. The page builds every user text with `textContent` and the CSP allows no
inline script, so a chat message is only ever text.

A verdict waits out the undo grace period (`undo_grace_s`) in this console before it is
produced: the item leaves this console's pages at once, other consoles show it as being decided
(the verdict lock, console/claims.py), and an undo within the grace cancels it and puts the
item back: nothing reaches the verdict topic, so the moderator's "first verdict decides" holds
for what the moderator meant. A console stopped meanwhile sends what it holds back at once; one
that dies sends nothing, and the lock lapses after the grace plus a margin: the item is back in
every queue (the verdict lost, visibly, never applied half-way).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
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

from console.auth import TokenRefused, verifier_from
from console.board import Board
from console.bulk import bulk_routes
from console.claims import PENDING_MARGIN_MS, Claims
from console.config import ConsoleSettings, token_matches
from console.csrf import CsrfGuard, renew, session_token
from console.feed import Feed
from console.history import History
from console.metrics import metrics_endpoint
from console.overrides import OverrideDesk, Refused, verdict_scope
from console.posted import posted
from console.records import VERDICTS, Verdict, now_ms
from console.users_panel import UserPanel

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


# A handler's answer before it is a response: (HTTP status, JSON body); a bulk request gives one
# per item. A checked verdict post: (verdict, reason, scope, the override's expiry in s).
Answer = tuple[int, dict[str, Any]]
Checked = tuple[str, str | None, str, int | None]


def answer(result: Answer) -> Response:
    return JSONResponse(result[1], status_code=result[0])


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


@dataclass
class Pending:
    """A verdict waiting out its undo grace period; `lock` is its record in the verdict lock."""

    verdict: Verdict
    lock: dict[str, Any]
    task: asyncio.Task[None] | None = None


class Console:
    """The app's state and handlers."""

    def __init__(
        self,
        settings: ConsoleSettings,
        board: Board,
        feed: Feed,
        claims: Claims,
        overrides: OverrideDesk | None = None,
    ) -> None:
        self.settings = settings
        self.overrides = overrides  # the overrides list, revocations and the verdicts' audit
        self.logins = settings.logins()
        self.verifier = verifier_from(settings)
        self.board = board
        self.feed = feed
        self.claims = claims
        self.pending: dict[str, Pending] = {}  # by message_id

    # -- identity and CSRF ---------------------------------------------------------------------

    def identity(self, request: Request) -> str | None:
        """The proxy's verified ID token's moderator (a bad token names nobody, it never falls
        back to the session), else the session's login."""
        if self.verifier is not None and (token := self.verifier.token(request.headers)):
            try:
                return self.verifier.moderator(token)
            except TokenRefused as exc:
                log.warning("console: an ID token refused: %s", exc)
                return None
        found = request.session.get("moderator_id")
        return found if isinstance(found, str) and found else None

    def csrf(self, request: Request) -> str:
        return session_token(request)

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
        token = (await request.form()).get("token")  # its CSRF token checked by CsrfGuard
        who = token_matches(token, self.logins) if isinstance(token, str) else None
        if who is None:
            log.warning("console: a login with an unknown token")
            return RedirectResponse("/?login=failed", status_code=303)
        request.session["moderator_id"] = who
        renew(request)  # a new session, a new CSRF token
        log.info("console: %s logged in", who)
        return RedirectResponse("/", status_code=303)

    async def logout(self, request: Request) -> Response:
        request.session.clear()  # its CSRF token checked by CsrfGuard
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
        got = await posted(self.identity, request)  # its CSRF token checked by CsrfGuard
        if isinstance(got, Response):
            return got
        who, body = got
        if not isinstance(body, dict) or not isinstance(body.get("message_id"), str):
            return JSONResponse({"error": "expected JSON with a message_id"}, status_code=400)
        return await handle(who, body)

    def _gone(self, message_id: str) -> Answer | None:
        first = self.board.first.get(message_id)
        if first is None and message_id in self.pending:
            first = self.pending[message_id].verdict
        if first is not None:
            return 409, {"error": "gone", "decided_by": first.moderator_id,
                         "verdict": first.verdict}  # fmt: skip
        if message_id not in self.board.items:
            return 404, {"error": "not waiting (unknown or timed out)"}
        return None

    async def claim(self, request: Request) -> Response:
        async def handle(who: str, body: dict[str, Any]) -> Response:
            message_id = body["message_id"]
            if (gone := self._gone(message_id)) is not None:
                return answer(gone)
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
            checked = self.check_verdict(body, who)
            if isinstance(checked, Response):
                return checked
            return answer(await self.decide(who, body["message_id"], checked))

        return await self._action(request, handle)

    async def decide(self, who: str, message_id: str, checked: Checked) -> Answer:
        """`who`'s verdict on one item under the claim and first-verdict rules, held back for
        the undo grace; console/bulk.py sends each of a batch's items through here too."""
        if (gone := self._gone(message_id)) is not None:
            return gone
        claim = self.board.claims.get(message_id)
        if claim and claim["moderator_id"] != who and claim["until_ms"] > now_ms():
            return 409, {"error": "claimed", "claim": claim}
        at, expires_s = now_ms(), checked[3]
        expires_at = at + expires_s * 1000 if expires_s is not None else None
        verdict = Verdict(message_id, checked[0], who, checked[1], checked[2], at, expires_at)
        grace_ms = int(self.settings.undo_grace_s * 1000)
        lock = {**verdict._asdict(), "send_at_ms": verdict.at_ms + grace_ms}
        first = await self.claims.first_verdict(
            message_id, lock, ttl_ms=grace_ms + PENDING_MARGIN_MS
        )
        if (first["moderator_id"], first["at_ms"]) != (who, verdict.at_ms):
            return 409, {"error": "gone", "decided_by": first["moderator_id"],
                         "verdict": first["verdict"]}  # fmt: skip
        pending = self.pending[message_id] = Pending(verdict, lock)
        if grace_ms <= 0:
            return await self._release(pending)
        self.board.hold_back(verdict)
        pending.task = asyncio.create_task(self._after_grace(pending, grace_ms / 1000))
        log.info("console: %s %s %s, sent in %s s unless undone", who, verdict.verdict,
                 message_id, self.settings.undo_grace_s)  # fmt: skip
        return 200, {"pending": True, "verdict": verdict._asdict(),
                     "send_at_ms": lock["send_at_ms"]}  # fmt: skip

    async def undo(self, request: Request) -> Response:
        async def handle(who: str, body: dict[str, Any]) -> Response:
            return answer(await self.take_back(who, body["message_id"]))

        return await self._action(request, handle)

    async def take_back(self, who: str, message_id: str) -> Answer:
        """Cancel `who`'s verdict on `message_id` while it waits out its grace: the item is back."""
        pending = self.pending.get(message_id)
        if pending is None or pending.verdict.moderator_id != who:
            nothing = "nothing of yours to undo: the grace period is over, or it was not yours"
            return 409, {"error": nothing}
        del self.pending[message_id]
        if pending.task is not None:
            pending.task.cancel()
        await self.claims.cancel(message_id, pending.lock)
        self.board.put_back(message_id)
        log.info("console: %s undid %s on %s", who, pending.verdict.verdict, message_id)
        return 200, {"undone": True, "verdict": pending.verdict._asdict()}

    async def _after_grace(self, pending: Pending, grace_s: float) -> None:
        await asyncio.sleep(grace_s)
        await self._release(pending)

    async def _release(self, pending: Pending) -> Answer:
        """The grace is over (or the console stops): produce the verdict, unless its lock lapsed
        meanwhile (then the item waits again). Every page hears how it went (`sent`)."""
        verdict = pending.verdict
        if self.pending.get(verdict.message_id) is pending:
            del self.pending[verdict.message_id]
        if not await self.claims.confirm(verdict.message_id, pending.lock):
            log.warning("console: the lock of %s on %s lapsed before it went out; not sent",
                        verdict.moderator_id, verdict.message_id)  # fmt: skip
            self.board.put_back(verdict.message_id)
            return self._sent(verdict, "lapsed", 409)
        if self.overrides is not None:  # its audit entry, queued ahead of it
            await self.overrides.audit_verdict(verdict)
        try:
            sent = await self.feed.send(verdict, self.settings.send_timeout_s)
        except KafkaError as exc:
            log.error("console: verdict on %s not sent: %r", verdict.message_id, exc)
            await self.claims.cancel(verdict.message_id, pending.lock)
            self.board.put_back(verdict.message_id)
            return self._sent(verdict, f"not sent: {exc}", 503)
        log.info("console: %s %s %s", verdict.moderator_id, verdict.verdict, verdict.message_id)
        return self._sent(verdict, "sent" if sent else "queued", 200 if sent else 202)

    def _sent(self, verdict: Verdict, outcome: str, code: int) -> Answer:
        self.board.tell("sent", {"outcome": outcome, "verdict": verdict._asdict()})
        return code, {"sent": code == 200, "queued": code == 202, "outcome": outcome,
                      "verdict": verdict._asdict()}  # fmt: skip

    async def flush(self) -> None:
        """Stopping: send every verdict still in its grace period now, all at once (each waits
        for the broker `send_timeout_s` at most; one it did not take yet stays queued in the
        producer, which delivers what it can as it stops)."""
        held_back = list(self.pending.values())
        for pending in held_back:
            if pending.task is not None:
                pending.task.cancel()
        await asyncio.gather(*(self._release(p) for p in held_back), return_exceptions=True)

    def check_verdict(self, body: dict[str, Any], who: str) -> Checked | Response:
        """(verdict, reason, scope, override expiry in s) of `who`'s verdict post, or the 400
        answer (403: a global scope from a moderator without the role, console/overrides.py)."""
        verdict, reason = body.get("verdict"), body.get("reason")
        scope = verdict_scope(body, who, self.settings.global_moderator_ids())
        if isinstance(scope, Refused):
            return JSONResponse({"error": scope.error}, status_code=scope.status)
        if verdict not in VERDICTS:
            return JSONResponse({"error": f"verdict: {VERDICTS}"}, 400)
        if reason is not None and not isinstance(reason, str):
            return JSONResponse({"error": "reason: a string"}, status_code=400)
        return verdict, (reason or "").strip()[:500] or None, *scope

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


def create_app(
    settings: ConsoleSettings,
    board: Board,
    feed: Feed,
    claims: Claims,
    overrides: OverrideDesk | None = None,
) -> Starlette:
    console = Console(settings, board, feed, claims, overrides)
    own = overrides.routes(console.identity) if overrides is not None else []
    history = History(board, claims.redis, claims.prefix)  # the pages beyond the board's

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        history.start()  # before the feed: the topics' replay is written too
        await feed.start()
        if overrides is not None:
            await overrides.start()
        ticker = asyncio.create_task(console.tick(), name="console-tick")
        try:
            yield
        finally:
            ticker.cancel()
            await console.flush()
            if overrides is not None:
                await overrides.stop()
            await feed.stop()
            await history.stop()
            await claims.close()

    return Starlette(
        routes=[
            Route("/", console.index),
            Route("/healthz", console.health),
            Route("/metrics", metrics_endpoint(board.disagreements)),
            Route("/api/session", console.session),
            Route("/login", console.login, methods=["POST"]),
            Route("/logout", console.logout, methods=["POST"]),
            Route("/events", console.events),
            Route("/api/claim", console.claim, methods=["POST"]),
            Route("/api/verdict", console.verdict, methods=["POST"]),
            Route("/api/undo", console.undo, methods=["POST"]),
            *bulk_routes(console),  # /api/bulk/*: several items, answered per id
            *history.routes(console.identity),  # /api/history: older pages, from Redis
            *UserPanel(board.recent, claims.redis).routes(console.identity),  # reads, never writes
            *own,  # /api/overrides: the list, and revoking one
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
            Middleware(CsrfGuard, https=settings.secure_cookies),  # inside the session: every POST
        ],
        lifespan=lifespan,
    )
