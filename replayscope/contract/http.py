"""A small JSON-over-HTTP client on the standard library: the one HTTP client of replayscope.

The runner's sink, the importers' sink and the collector's alert notifications all post
through it, so every feature works on a stock install (no extras) and on GPU hosts.

``urllib.request`` (with ``ssl`` and ``email``, ~0.1 s on some hosts) is imported at the first
request: every process ``replayscope trace`` follows imports this module, most never post.
"""

from __future__ import annotations

import json
from typing import Any


class HttpError(Exception):
    """The collector answered with an error status, or could not be reached.

    ``status`` is the HTTP status, or None when the request got no complete answer
    (connection refused, timeout, an answer cut off): only those, and 5xx, are worth retrying.
    """

    def __init__(self, status: int | None, message: str, payload: Any = None):
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.payload = payload      # the error answer's JSON, when it was JSON

    @property
    def detail(self) -> str:
        """What the server said was wrong (its ``detail``), else the message."""
        if isinstance(self.payload, dict) and isinstance(self.payload.get("detail"), str):
            return self.payload["detail"]
        return self.message

    @property
    def retryable(self) -> bool:
        return self.status is None or self.status >= 500 or self.status == 429


_OPENERS: dict[bool, Any] = {}       # follow_redirects -> its opener, built at the first request


def _opener(follow_redirects: bool) -> Any:
    opener = _OPENERS.get(follow_redirects)
    if opener is None:
        import urllib.request

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            """A redirect is answered as the error it is: a notification never follows one elsewhere."""

            def redirect_request(self, req, fp, code, msg, headers, newurl):
                return None
        opener = _OPENERS[follow_redirects] = urllib.request.build_opener(
            *(() if follow_redirects else (NoRedirect(),)))
    return opener


def request_json(method: str, url: str, payload: Any = None, *, token: str | None = None,
                 timeout: float = 10.0, decode: bool = True, follow_redirects: bool = True) -> Any:
    """Send ``payload`` as JSON and return the decoded JSON answer (None when empty);
    with ``decode=False`` the answer's bytes, whatever they are."""
    import http.client
    import urllib.error
    import urllib.request

    body = None if payload is None else json.dumps(payload, separators=(",", ":")).encode()
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with _opener(follow_redirects).open(request, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as error:
        raw = error.read()
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = None
        detail = raw.decode(errors="replace")[:500]
        raise HttpError(error.code, detail or error.reason, payload) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise HttpError(None, f"cannot reach {url}: {reason}") from None
    except http.client.HTTPException as error:    # e.g. the server died mid-answer (IncompleteRead)
        raise HttpError(None, f"no complete answer from {url}: {error!r}") from None
    if not decode:
        return raw
    return json.loads(raw) if raw else None


def post_json(url: str, payload: Any, *, token: str | None = None, timeout: float = 10.0, **kwargs) -> Any:
    return request_json("POST", url, payload, token=token, timeout=timeout, **kwargs)
