"""Errors answered in one shape: ``{"detail": <one line>, "field"?: ..., "index"?: ...}``.

Every ``replayscope.contract.errors.ReplayscopeError`` carries its status (one handler, ``problem``); a
database that stopped answering is a 503 to retry; a query or path parameter FastAPI
refuses (``RequestValidationError``) becomes the same body, naming the parameter in
``field``, rather than FastAPI's list. ``responses`` documents the shape per status in OpenAPI.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc

from replayscope.collector import schemas
from replayscope.collector.store import StoreUnavailable
from replayscope.contract.errors import ReplayscopeError

_WHERE = {"query": "query parameter", "path": "path parameter", "header": "header", "cookie": "cookie"}


class InvalidParameter(ReplayscopeError):
    """A query or path parameter out of its declared range or type (422)."""

    status = 422
    body_fields = ("field",)

    def __init__(self, message: str, field: str | None):
        super().__init__(message)
        self.field = field


def invalid_parameter(error: RequestValidationError) -> InvalidParameter:
    """FastAPI's list of parameter errors as one readable line, naming the first parameter."""
    lines, first = [], None
    for item in error.errors():
        where, *path = item.get("loc") or ("request",)
        name = ".".join(str(part) for part in path) or str(where)
        first = first or name
        lines.append(f"{_WHERE.get(where, where)} {name}: {item.get('msg', 'invalid')}")
    return InvalidParameter("; ".join(lines) or "invalid request", first)


async def problem(_request: Request, error: Exception) -> JSONResponse:
    """The one error handler: any ReplayscopeError answers with its status and body."""
    if isinstance(error, sa_exc.OperationalError):
        text = str(error.orig).strip().splitlines()[0] if error.orig else "database error"
        error = StoreUnavailable(f"the store is unavailable ({text}); retry later")
    elif isinstance(error, RequestValidationError):
        error = invalid_parameter(error)
    return JSONResponse(error.body(), status_code=error.status, headers=dict(error.headers) or None)


HANDLED = (ReplayscopeError, sa_exc.OperationalError, RequestValidationError)

_MEANING = {400: "bad request (invalid JSON, a Host this collector does not serve)",
            401: "the token is missing or wrong", 403: "a cross-origin write", 404: "no such run or rule",
            409: "a rule of that name exists", 413: "body over REPLAYSCOPE_MAX_BODY_BYTES",
            415: "a write that is not JSON", 422: "a field or parameter is invalid (named in field)",
            429: "too many wrong tokens from this client: wait Retry-After seconds",
            503: "the store is unavailable: retry"}
READ = (400, 404, 422, 503)
WRITE = (400, 401, 403, 404, 413, 415, 422, 429, 503)


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error statuses, each with the one error body."""
    return {status: {"model": schemas.Problem, "description": _MEANING[status]} for status in sorted(set(statuses))}
