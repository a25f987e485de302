"""One notification POST to one receiver, on the standard library (``http.client``).

``post_json(url, payload, timeout_s=..., policy=...)`` returns when the receiver answered
2xx; otherwise it raises ``DeliveryFailed`` whose text says what happened in words a
reader may see: never the URL, its credentials, its path or query, nor anything the
receiver answered (its body and reason phrase are never read). ``unanswered`` tells apart
a request that was sent but got no answer in time (the receiver may have it: a retry may
duplicate it) from one that never got there or was refused (a retry duplicates nothing).

The host is resolved here and only addresses ``TargetPolicy`` allows are connected to (the
TLS certificate is still checked against the host name), so a name that resolves to a
loopback or private address is refused like the address itself. ``user:password@`` is sent
as basic auth. Redirects are never followed. The whole exchange, connect to status line,
ends at ``timeout_s`` however slowly the receiver trickles its answer.
"""

from __future__ import annotations

import http
import http.client
import ipaddress
import json
import socket
import ssl
import threading
from typing import Any

from replayscope.collector.alerting.webhook_urls import (BadURL, ReceiverURL, RefusedTarget, TargetPolicy,
                                                         parse)


class DeliveryFailed(Exception):
    def __init__(self, text: str, *, unanswered: bool = False, status: int | None = None):
        super().__init__(text)
        self.unanswered = unanswered    # sent, no answer in time: the receiver may have it
        self.status = status            # the receiver's non-2xx status, when it answered


def _addresses(url: ReceiverURL, policy: TargetPolicy, timeout_s: float) -> list[tuple[Any, tuple]]:
    try:
        infos = socket.getaddrinfo(url.host, url.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise DeliveryFailed(f"cannot resolve the receiver's host ({_reason(error)})") from None
    by_address = {ipaddress.ip_address(info[4][0].split("%")[0]): info for info in infos}
    try:
        allowed = policy.allowed_addresses(url.host, by_address)
    except RefusedTarget as error:
        raise DeliveryFailed(f"refused: {error}") from None
    return [(by_address[a][0], by_address[a][4]) for a in allowed]


def _connect(url: ReceiverURL, policy: TargetPolicy, timeout_s: float) -> socket.socket:
    last: OSError | None = None
    for family, sockaddr in _addresses(url, policy, timeout_s):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.connect(sockaddr)
            return sock
        except OSError as error:
            sock.close()
            last = error
    raise DeliveryFailed(f"cannot connect to the receiver ({_reason(last)})")


def _reason(error: BaseException | None) -> str:
    if isinstance(error, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(error, socket.gaierror):
        return "name not known" if error.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", -5)) else \
            "lookup failed"
    if isinstance(error, ssl.SSLError):
        return f"TLS: {error.reason or type(error).__name__}"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return type(error).__name__ if error is not None else "no address"


def _connection(url: ReceiverURL, policy: TargetPolicy, timeout_s: float) -> http.client.HTTPConnection:
    def create_connection(_address, timeout=None, _source=None):
        return _connect(url, policy, timeout_s)

    if url.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            url.host, url.port, timeout=timeout_s, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(url.host, url.port, timeout=timeout_s)
    conn._create_connection = create_connection      # noqa: SLF001 (http.client's own hook)
    return conn


def _phrase(status: int) -> str:
    """The standard reason phrase of a status (the receiver's own text is never shown)."""
    try:
        return " " + http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def _abort(conn: http.client.HTTPConnection, fired: threading.Event) -> None:
    fired.set()
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def post_json(url: str, payload: Any, *, timeout_s: float, policy: TargetPolicy) -> int:
    """POST ``payload`` as JSON; the receiver's 2xx status, else ``DeliveryFailed``."""
    try:
        target = parse(url)
    except BadURL as error:
        raise DeliveryFailed(f"not a receiver URL: {error}") from None
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body)),
               "User-Agent": "replayscope-notifier"}
    if target.authorization:
        headers["Authorization"] = target.authorization
    conn = _connection(target, policy, timeout_s)
    late = threading.Event()
    deadline = threading.Timer(timeout_s, _abort, (conn, late))     # the whole exchange, not each read
    deadline.daemon = True
    deadline.start()
    try:
        try:
            conn.request("POST", target.target, body=body, headers=headers)
        except DeliveryFailed:
            raise
        except (OSError, http.client.HTTPException) as error:
            raise DeliveryFailed(f"cannot send to the receiver ({_reason(error)})") from None
        try:
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as error:
            what = "timed out" if late.is_set() or isinstance(error, (TimeoutError, socket.timeout)) \
                else f"connection closed: {_reason(error)}"
            raise DeliveryFailed(f"no answer within {timeout_s:g}s ({what}); the receiver may have "
                                 f"received it", unanswered=True) from None
        status = response.status
        if not 200 <= status < 300:
            moved = " (redirects are not followed)" if 300 <= status < 400 else ""
            raise DeliveryFailed(f"the receiver answered HTTP {status}{_phrase(status)}{moved}", status=status)
        return status
    finally:
        deadline.cancel()
        conn.close()
