"""Who may write: the bearer token, the dashboard's session cookie and the Origin check.

With ``REPLAYSCOPE_TOKEN`` set, every write needs it: API clients send
``Authorization: Bearer <token>``; the dashboard asks for the token once and keeps a
signed, HttpOnly, SameSite=Strict session cookie (``SESSION_COOKIE``) whose signature is
keyed by the token, so changing the token ends every session. Wrong tokens are limited
per client address (``replayscope.collector.api.throttle``); the right one is always checked and accepted,
so nobody sharing an address can lock a runner out. Without a token every
caller is a writer (``replayscope serve`` refuses to listen beyond loopback then, unless
``--insecure``). Either way a browser's cross-origin write is refused (``origin_allowed``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import time
from typing import TYPE_CHECKING, Mapping
from urllib.parse import urlsplit

from replayscope.contract.environment import B64TOKEN
from replayscope.contract.errors import TooManyRequests

if TYPE_CHECKING:
    from replayscope.collector.api.throttle import WrongTokens

SESSION_COOKIE = "replayscope_session"
SESSION_TTL_S = 12 * 3600


def token_matches(supplied: str | None, token: str | None) -> bool:
    """Constant-time comparison; with no token configured everything matches."""
    if not token:
        return True
    return supplied is not None and hmac.compare_digest(supplied.encode(), token.encode())


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization`` header, parsed as RFC 6750 (2.1) writes it:
    ``Bearer``, one or more spaces, the token (``replayscope.contract.environment.B64TOKEN``), nothing
    else. The scheme's case is free (RFC 7235: schemes are case-insensitive); tabs, other
    whitespace or anything around the token are not, and such a header carries no token."""
    scheme, space, rest = (authorization or "").partition(" ")
    supplied = rest.lstrip(" ")
    if not space or scheme.lower() != "bearer" or not B64TOKEN.fullmatch(supplied):
        return None
    return supplied


def _session_key(token: str) -> bytes:
    return hashlib.sha256(b"replayscope-session\0" + token.encode()).digest()


def new_session(token: str, now: float | None = None) -> str:
    """A session cookie value: its expiry and an HMAC of it keyed by the token."""
    expires = int((time.time() if now is None else now) + SESSION_TTL_S)
    signature = hmac.new(_session_key(token), str(expires).encode(), hashlib.sha256).hexdigest()
    return f"{expires}.{signature}"


def session_valid(value: str | None, token: str | None, now: float | None = None) -> bool:
    if not token:
        return True
    if not value or "." not in value:
        return False
    expires, _, signature = value.partition(".")
    if not expires.isdigit():
        return False
    expected = hmac.new(_session_key(token), expires.encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(signature.encode(), expected.encode()) and \
        int(expires) > (time.time() if now is None else now)


def is_writer(headers: Mapping[str, str], cookies: Mapping[str, str], token: str | None, *,
              client: str | None = None, limiter: "WrongTokens | None" = None) -> bool:
    """A request carries the right to write: no token configured, the bearer token, or a
    valid session. With a ``limiter``, a wrong bearer token counts against ``client``, and
    one from a ``client`` that gave too many is refused (``TooManyRequests``); the right one
    is accepted from anyone."""
    if not token:
        return True
    supplied = bearer(headers.get("authorization"))
    if supplied is not None:
        if check_token(supplied, token, client=client, limiter=limiter):
            return True
    return session_valid(cookies.get(SESSION_COOKIE), token)


def check_token(supplied: str, token: str, *, client: str | None = None, limiter: "WrongTokens | None" = None) -> bool:
    """Whether ``supplied`` is the token. It is always compared (in constant time), so the
    right one is accepted from any address, however many wrong ones came from it: a runner
    behind the same NAT, proxy or host as a guesser is never locked out. A wrong one counts
    against ``client`` (``replayscope.collector.api.throttle``), and while ``client`` has given too many it
    is answered ``TooManyRequests`` instead of False."""
    if token_matches(supplied, token):
        return True
    if limiter is not None:
        wait = limiter.wait_s(client)
        limiter.wrong(client)
        if wait > 0:
            raise TooManyRequests(limiter.message(wait), wait)
    return False


def origin_allowed(headers: Mapping[str, str]) -> bool:
    """A write from a browser must come from this server's own pages: an ``Origin`` header,
    when present, names the same host the request was sent to (non-browser clients send none)."""
    origin = headers.get("origin")
    if origin is None:
        return True
    if origin == "null":
        return False
    host = headers.get("x-forwarded-host") or headers.get("host") or ""
    return urlsplit(origin).netloc.lower() == host.split(",")[0].strip().lower()


def is_loopback(host: str) -> bool:
    """Whether a bind address is reachable from this machine only."""
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
