"""Every request that may change state passes one check against cross-site request forgery,
whatever its route and however its sender is identified: a session cookie, or the ID token the
OIDC proxy adds, which a browser behind the proxy brings along as automatically as a cookie.

Its Origin, when the browser sends one, must be this site (`https://` and its host when the
console marks its cookies Secure: behind a TLS-terminating proxy the last hop may be plain HTTP,
and a Secure cookie only ever came over HTTPS), and it must carry the session's CSRF token: the
X-CSRF-Token header (the page's own requests) or the form field `csrf` (the login and logout
forms). One ASGI middleware inside the session middleware, so a route added later cannot forget
it; a refused request never reaches a route (403 `{"error": "csrf"}`).
"""

from __future__ import annotations

import hmac
import secrets

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


def session_token(request: Request) -> str:
    """The session's CSRF token, made on first use."""
    token = request.session.get("csrf")
    if not isinstance(token, str):
        token = request.session["csrf"] = secrets.token_urlsafe(32)
    return token


def renew(request: Request) -> None:
    """A new token for a new session (after a login), so a token seen before it is void."""
    request.session["csrf"] = secrets.token_urlsafe(32)


def csrf_ok(request: Request, given: str | None, *, https: bool = False) -> bool:
    origin = request.headers.get("origin")
    scheme = "https" if https else request.url.scheme
    if origin is not None and origin != f"{scheme}://{request.url.netloc}":
        return False
    expected = request.session.get("csrf")
    return bool(given and isinstance(expected, str) and hmac.compare_digest(given, expected))


class CsrfGuard:
    """Refuses a state-changing request without this session's CSRF token (see above)."""

    def __init__(self, app: ASGIApp, *, https: bool = False) -> None:
        self.app = app
        self.https = https

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        given = request.headers.get("x-csrf-token")
        body: bytes | None = None
        if given is None and request.headers.get("content-type", "").startswith(FORMS):
            body = await request.body()  # read once here, handed on below
            form = await request.form()
            field = form.get("csrf")
            given = field if isinstance(field, str) else None
            await form.close()
        if not csrf_ok(request, given, https=self.https):
            await JSONResponse({"error": "csrf"}, status_code=403)(scope, receive, send)
            return
        await self.app(scope, receive if body is None else replay(body, receive), send)


def replay(body: bytes, receive: Receive) -> Receive:
    """`receive` as if the body had not been read yet."""
    pending = [body]

    async def again() -> Message:
        if pending:
            return {"type": "http.request", "body": pending.pop(), "more_body": False}
        return await receive()

    return again
