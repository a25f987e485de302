"""Reading a write's JSON body: its structure checked before any parser runs, then parsed.

A body nested deeper than ``MAX_JSON_DEPTH`` or holding more than ``MAX_JSON_CONTAINERS``
objects and arrays is refused unparsed: the check scans the bytes at C speed (brackets
inside strings never count), so a hostile body costs a scan, never a parse. Bodies over
``OFF_LOOP_BYTES`` are checked and parsed in a worker thread.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from replayscope.contract.errors import ReplayscopeError

try:  # optional: a faster parser for the hot path, same results for valid JSON
    import orjson as _orjson

    def _loads(body: bytes) -> Any:
        try:
            return _orjson.loads(body)
        except _orjson.JSONDecodeError as error:
            if "recursion" in str(error).lower():
                raise RecursionError from None
            raise ValueError(str(error)) from None
except ImportError:  # pragma: no cover
    def _not_json(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    def _loads(body: bytes) -> Any:
        return json.loads(body, parse_constant=_not_json)     # as orjson: no NaN, no Infinity


MAX_JSON_DEPTH = 32
# Objects and arrays in one body: a runner's batch of 5000 events has ~5000; parsing millions
# (an 8 MB body of nested brackets) would hold the interpreter for seconds.
MAX_JSON_CONTAINERS = 200_000
OFF_LOOP_BYTES = 64 * 1024          # larger bodies are checked and parsed in a worker thread
_NOT_QUOTES_OR_BRACKETS = bytes(c for c in range(256) if c not in b'"[]{}')
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
_AS_SQUARE = bytes.maketrans(b"{}", b"[]")
_STEP = [0] * 256
_STEP[ord("[")], _STEP[ord("]")] = 1, -1
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def _structure(body: bytes) -> bytes:
    """The JSON text's brackets outside strings, as ``[`` and ``]``, at C speed."""
    if b"\\" in body:                         # escapes: take the strings out properly
        return _STRING.sub(b"", body).translate(_AS_SQUARE, _NOT_BRACKETS)
    marks = body.translate(None, _NOT_QUOTES_OR_BRACKETS)
    # Without escapes quotes alternate open/close: when every string's quotes are adjacent
    # here, no string holds a bracket; else keep every other piece between quotes.
    brackets = marks.replace(b'""', b"")
    if b'"' in brackets:
        brackets = b"".join(marks.split(b'"')[0::2])
    return brackets.translate(_AS_SQUARE)


def _bracket_depth(brackets: bytes, limit: int) -> int:
    """Deepest nesting of a text of ``[`` and ``]``; exact up to ``limit`` + 1 for balanced text."""
    if b"[" * (limit + 1) in brackets:
        return limit + 1
    removed = 0
    while brackets and removed < 3:            # the common shallow case, at C speed
        shorter = brackets.replace(b"[]", b"")
        if shorter == brackets:
            break
        brackets, removed = shorter, removed + 1
    deepest = 0
    for level in accumulate(map(_STEP.__getitem__, brackets)):
        if level > deepest:
            deepest = level
            if removed + deepest > limit:
                break
    return removed + deepest


def check_structure(body: bytes) -> None:
    """Refuse, before parsing, a body nested too deep or holding too many objects and arrays."""
    structure = _structure(body)
    too_deep = ReplayscopeError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    if b"[" * (MAX_JSON_DEPTH + 1) in structure:          # the plainest deep text, at C speed
        raise too_deep
    if structure.count(b"[") > MAX_JSON_CONTAINERS:
        raise ReplayscopeError(f"JSON with more than {MAX_JSON_CONTAINERS} objects and arrays; send smaller batches")
    if _bracket_depth(structure, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise too_deep


def decode(body: bytes) -> Any:
    """The parsed body, once its structure passed ``check_structure``; 400 for anything else."""
    check_structure(body)
    try:
        return _loads(body)
    except RecursionError:
        raise ReplayscopeError("JSON nested too deeply") from None
    except ValueError as error:
        raise ReplayscopeError(f"invalid JSON: {error}") from None


async def json_body(request: Request) -> Any:
    """A write's body, checked and parsed (off the event loop when it is large)."""
    body = await request.body()
    if not body:
        raise ReplayscopeError("empty body: expected JSON")
    if len(body) > OFF_LOOP_BYTES:     # never hold up other requests while a big body is checked
        return await run_in_threadpool(decode, body)
    return decode(body)
