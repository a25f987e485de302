"""A callback request's body, checked before Dash reads it: a malformed one is a 400 that
names what is wrong, never Dash's 500.

Dash's renderer posts ``/_dash-update-component`` with a JSON object: ``output`` (the key of
one of this dashboard's callbacks), ``outputs``, ``inputs`` and ``state`` (one
``{id, property, value}`` per declared input and state; a list of them for a pattern), and
``changedPropIds``. Dash itself indexes into whatever arrives, so ``{}``, ``[]`` or garbage
answered 500 (issue 36). ``CallbackBodies`` is ASGI middleware: it reads the body (the
collector's ``BodyLimit`` bounds it), checks that shape against the callbacks the dashboard
registered, and hands the same bytes on.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from replayscope.collector.api.guards import send_error
from replayscope.contract.errors import ReplayscopeError

PATH = "/_dash-update-component"
# A page address's parts (dcc.Location's, which Dash's own page router reads as strings).
ADDRESS_PROPERTIES = frozenset({"pathname", "search", "hash", "href"})


def problem(body: Any, callbacks: Mapping[str, Any]) -> str | None:
    """What makes ``body`` not a callback request of this dashboard, or None."""
    if not isinstance(body, dict):
        return "a callback request is a JSON object"
    output = body.get("output")
    if not isinstance(output, str) or output not in callbacks or "callback" not in callbacks[output]:
        return "'output' names no callback this dashboard runs on the server"
    spec = callbacks[output]
    for key in ("inputs", "state"):
        items = body.get(key, [])
        declared = spec.get(key) or []
        if not isinstance(items, list) or len(items) != len(declared):
            return f"'{key}' must list the callback's {len(declared)} {key} (got {_count(items)})"
        if not all(_property(item) or _properties(item) for item in items):
            return f"'{key}' items are {{id, property, value}} objects"
        for item in items:
            if isinstance(item, dict) and item["property"] in ADDRESS_PROPERTIES and \
                    not isinstance(item.get("value"), (str, type(None))):
                return f"'{item['property']}' of {item['id']!r} is a string"
    declared_outputs = output.strip(".").split("...") if output.startswith("..") else None
    outputs = body.get("outputs")
    if declared_outputs is None:            # one output: an object (a list for a pattern)
        if not (_property(outputs) or _properties(outputs)) or not _names(outputs, output):
            return f"'outputs' is the callback's output {output!r}"
    elif not isinstance(outputs, list) or len(outputs) != len(declared_outputs) or not all(
            (_property(o) or _properties(o)) and _names(o, name) for o, name in zip(outputs, declared_outputs)):
        return f"'outputs' lists the callback's {len(declared_outputs)} outputs, in order"
    changed = body.get("changedPropIds", [])
    if not isinstance(changed, list) or not all(isinstance(c, str) for c in changed):
        return "'changedPropIds' is a list of strings"
    return None


def _properties(items: Any) -> bool:
    return isinstance(items, list) and all(_property(i) for i in items)


def _names(item: Any, name: str) -> bool:
    """An output names the one declared (``id.property``); a pattern's ids are objects."""
    if isinstance(item, list):
        return all(_names(i, name) for i in item)
    return not isinstance(item["id"], str) or f"{item['id']}.{item['property']}" == name


def _property(item: Any) -> bool:
    return isinstance(item, dict) and isinstance(item.get("id"), (str, dict)) and isinstance(item.get("property"), str)


def _count(items: Any) -> str:
    return str(len(items)) if isinstance(items, list) else type(items).__name__


class CallbackBodies:
    """ASGI middleware: a callback request whose body is not one (``problem``) is a 400."""

    def __init__(self, app, callbacks: Mapping[str, Any]):
        self.app = app
        self.callbacks = callbacks

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH:
            return await self.app(scope, receive, send)
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return                                        # the client went away
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        try:
            body = json.loads(raw)
        except ValueError:                                    # not JSON, or not UTF-8
            body = _NOT_JSON
        reason = "the body is not JSON" if body is _NOT_JSON else problem(body, self.callbacks)
        if reason is not None:
            return await send_error(send, ReplayscopeError(f"not a dashboard callback request: {reason}"))
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


_NOT_JSON = object()
