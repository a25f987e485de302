"""What every request passes before a route sees it.

ASGI middleware, API and dashboard alike: ``HostGuard`` (the ``Host`` is one this collector
serves, ``replayscope.collector.api.hosts``: no DNS rebinding), ``BodyLimit`` (413 for a body over
``settings.max_body_bytes``, declared or streamed) and ``WriteGuard`` (a browser writes only
from this server's own pages, and only JSON). And the ``require_writer`` dependency: with a
token set, every write needs it (``replayscope.collector.api.auth``); OpenAPI shows it as the ``bearer``
security scheme on each write.
"""

from __future__ import annotations

import json

from fastapi import Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from replayscope.collector.api import auth
from replayscope.collector.api.hosts import is_served
from replayscope.contract.errors import (Forbidden, ReplayscopeError, TooLarge, Unauthorized,
                                         UnsupportedMediaType)

# Documents the scheme in OpenAPI; the check itself is ``replayscope.collector.api.auth.is_writer`` (which
# also takes the dashboard's session cookie), so a missing header is not refused here.
BEARER = HTTPBearer(scheme_name="bearer", auto_error=False,
                    description="REPLAYSCOPE_TOKEN, as 'Authorization: Bearer <token>'; every write needs it "
                                "when the collector has a token (the dashboard's signed session cookie counts too)")


def is_writer(request: Request) -> bool:
    """Whether the request may write (the token, a valid session, or no token configured)."""
    state = request.app.state
    client = request.client.host if request.client else None
    return auth.is_writer(request.headers, request.cookies, state.settings.token, client=client,
                          limiter=state.wrong_tokens)


def require_writer(request: Request, _credentials: HTTPAuthorizationCredentials | None = Security(BEARER)) -> None:
    """The dependency of every write: 401 without the right to write."""
    if not is_writer(request):
        raise Unauthorized("writes need 'Authorization: Bearer <token>' (REPLAYSCOPE_TOKEN)")


async def send_error(send, error: ReplayscopeError) -> None:
    """An error answered from ASGI middleware, before FastAPI's handler can see it: same body."""
    body = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _BodyTooLarge(Exception):
    pass


class BodyLimit:
    """ASGI middleware: 413 for a body over ``limit`` bytes, declared or streamed."""

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.limit:
                    return await self._refuse(send)
        seen = 0
        started = False

        async def limited_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _BodyTooLarge
            return message

        async def tracking_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send):
        await send_error(send, TooLarge(f"request body larger than {self.limit} bytes "
                                        f"(REPLAYSCOPE_MAX_BODY_BYTES); send smaller batches"))


_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class WriteGuard:
    """ASGI middleware for every write, API and dashboard alike: a browser may write only
    from this server's own pages (``Origin``), and only JSON (``Content-Type``), so no
    other web page can forge a write with a simple cross-origin form or text POST."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in _WRITE_METHODS:
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())}
        if not auth.origin_allowed(headers):
            return await send_error(send, Forbidden(f"cross-origin write refused (Origin "
                                                    f"{headers.get('origin')!r} is not this server)"))
        if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:   # it has a body
            media = headers.get("content-type", "").split(";")[0].strip().lower()
            if media != "application/json" and not media.endswith("+json"):
                return await send_error(send, UnsupportedMediaType(
                    f"writes take application/json, not {media or 'no content type'}"))
        return await self.app(scope, receive, send)


class HostGuard:
    """ASGI middleware for every request, API and dashboard alike: the ``Host`` it names is one
    this collector serves (``replayscope.collector.api.hosts``), so a rebound DNS name reaches nothing."""

    def __init__(self, app, hosts: frozenset[str] | None):
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.hosts is None:
            return await self.app(scope, receive, send)
        host = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"), None)
        if not is_served(host, self.hosts):
            return await send_error(send, ReplayscopeError(
                f"Host {host!r} is not a name this collector serves; if it is, add it to "
                f"REPLAYSCOPE_ALLOWED_HOSTS"))
        return await self.app(scope, receive, send)
