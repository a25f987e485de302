"""User-facing errors, one hierarchy for the command line and the collector's API.

The command line prints any of them as one line and exits 2. The API answers each with
its ``status`` and the JSON body ``{"detail": <message>, <body_fields>...}`` (one handler,
``replayscope.collector.api.errors``). Pure Python: the runner and the collector both import it without torch.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

# What a command's exit code says (docs/commands.md): it did its job; it ran but did not do
# all of it (events not delivered, a runner that failed); nothing was done (bad input, a
# ReplayscopeError); Ctrl-C; the reader of its output went away (``| head``), as SIGPIPE.
EXIT_DONE, EXIT_INCOMPLETE, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_PIPE_CLOSED = 0, 1, 2, 130, 141


class ReplayscopeError(Exception):
    """Bad input or an unusable environment, explained in one line for the user."""

    status: ClassVar[int] = 400                          # the HTTP status the API answers with
    body_fields: ClassVar[tuple[str, ...]] = ()          # attributes sent next to "detail"
    headers: ClassVar[Mapping[str, str]] = {}            # response headers (Retry-After, ...)

    def body(self) -> dict[str, Any]:
        return {"detail": str(self), **{name: getattr(self, name) for name in self.body_fields}}


class Unauthorized(ReplayscopeError):
    status = 401
    headers = {"WWW-Authenticate": "Bearer"}


class Forbidden(ReplayscopeError):
    status = 403


class NotFound(ReplayscopeError):
    status = 404


class Conflict(ReplayscopeError):
    status = 409


class TooLarge(ReplayscopeError):
    status = 413


class UnsupportedMediaType(ReplayscopeError):
    status = 415


class TooManyRequests(ReplayscopeError):
    """Too many wrong attempts from one client; ``retry_after_s`` says when to try again (429)."""

    status = 429

    def __init__(self, message: str, retry_after_s: float):
        super().__init__(message)
        self.headers = {"Retry-After": str(max(1, round(retry_after_s)))}


class Invalid(ReplayscopeError):
    """A well-formed request whose content is wrong; ``field`` names what (422)."""

    status = 422
    body_fields = ("field",)

    def __init__(self, field: str | None, message: str, text: str | None = None):
        super().__init__(text or (f"{field}: {message}" if field else message))
        self.field = field
        self.message = message


class Unavailable(ReplayscopeError):
    """Something the request needs cannot answer right now; retrying may help (503)."""

    status = 503
    headers = {"Retry-After": "1"}


def describe_error(error: BaseException) -> str:
    """Any exception as the text of an event's ``error`` field: the error and, for CUDA's
    'previous error during capture', the original cause; at most 4000 characters."""
    text = f"{type(error).__name__}: {error}".strip()
    cause = error.__cause__ or error.__context__
    if cause is not None and str(cause) not in text:
        text += f" (caused by {type(cause).__name__}: {cause})"
    return text[:4000]
