"""A small JSON-over-HTTP client on the standard library, for GPU hosts without extras."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class HttpError(Exception):
    """The collector answered with an error status, or could not be reached.

    ``status`` is the HTTP status, or None when the request never got an answer
    (connection refused, timeout): only those, and 5xx, are worth retrying.
    """

    def __init__(self, status: int | None, message: str):
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message

    @property
    def retryable(self) -> bool:
        return self.status is None or self.status >= 500 or self.status == 429


def request_json(method: str, url: str, payload: Any = None, *, token: str | None = None,
                 timeout: float = 10.0) -> Any:
    """Send ``payload`` as JSON and return the decoded JSON answer (None when empty)."""
    body = None if payload is None else json.dumps(payload, separators=(",", ":")).encode()
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as error:
        detail = error.read().decode(errors="replace")[:500]
        raise HttpError(error.code, detail or error.reason) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise HttpError(None, f"cannot reach {url}: {reason}") from None
    return json.loads(raw) if raw else None


def post_json(url: str, payload: Any, *, token: str | None = None, timeout: float = 10.0) -> Any:
    return request_json("POST", url, payload, token=token, timeout=timeout)
