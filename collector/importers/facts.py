"""What the log importers share about a line: its numbers (``num``, ``mem_bytes``, ...) and
its facts (``Fact``: the kinds every engine's lines share, such as a banner, an exception
or a traceback frame), and when a fact starts a run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from replayscope.collector.importers.failures import CHAINED as _CHAINED
from replayscope.collector.importers.failures import (CRASH_NAMES_ENGINE, ENGINE_CODE, EXCEPTION_LINE,
                                                      crash_line)
from replayscope.collector.importers.failures import FRAME as _FRAME
from replayscope.collector.importers.failures import TRACEBACK as _TRACEBACK
from replayscope.collector.importers.lines import RANK_AXES, LogLine, RankKey


GIB = 2**30
MIB = 2**20
NUM = r"(-?\d+(?:\.\d+)?)"


def num(text: str | None) -> float | None:
    """A finite float, or None."""
    if text is None:
        return None
    try:
        value = float(text.replace(",", ""))
    except (ValueError, OverflowError):
        return None
    return value if math.isfinite(value) and abs(value) < 1e15 else None


def to_int(text: str | None) -> int | None:
    value = num(text)
    if value is None or value != int(value) or abs(value) > 2**62:
        return None
    return int(value)


def mem_bytes(value: float | str | None, unit: str = "GiB") -> int | None:
    """Bytes from an engine's memory figure. ``GB`` counts as GiB: SGLang and vLLM both
    divide by ``1 << 30`` before printing, whatever they call the unit."""
    if isinstance(value, str):
        value = num(value)
    if value is None:
        return None
    scale = MIB if unit.upper().startswith("M") else (2**40 if unit.upper().startswith("T") else GIB)
    result = round(value * scale)
    return result if abs(result) <= 2**62 else None


def int_list(text: str) -> list[int]:
    """``1, 2, 4`` (the inside of a printed Python list) as ints; junk entries dropped."""
    out = []
    for part in text.split(","):
        value = to_int(part.strip())
        if value is not None and value >= 1:
            out.append(value)
    return out


def clip(text: str | None, limit: int) -> str | None:
    if text is None:
        return None
    text = "".join(ch if ch.isprintable() else " " for ch in text).strip()
    return text[:limit]


def rank_order(rank: RankKey | None) -> tuple:
    """Lower is more primary: no rank (the driver, a single process), then rank 0 on every
    axis, ...; a process known only by its pid last."""
    if rank is None:
        return (-1,)
    parts = dict(rank)
    if "pid" in parts:
        return (10**9, parts["pid"])
    return tuple(parts.get(k, 0) for k in (*RANK_AXES, "rank"))


@dataclass
class Fact:
    line: LogLine
    kind: str
    data: dict[str, Any] = field(default_factory=dict)


# Fact kinds the parser itself understands; everything else is engine-specific.
BANNER = "banner"        # a startup banner: the start of a run
LOAD = "load"            # weights begin to load: a new run after a ready or failed one
READY = "ready"          # the server answers requests
FATAL = "fatal"          # the process is going down
EXCEPTION = "exception"  # an exception line (the root cause is the first of a failure)
TRACEBACK = "traceback"  # "Traceback (most recent call last):"
CHAINED = "chained"      # "During handling of the above exception, another exception occurred:"
FRAME = "frame"          # a traceback frame: File "...", line N, in func
CRASH = "crash"          # native code or the interpreter went down (failures.CRASH_LINES): no traceback
# Kinds that belong to a failure's traceback, not to the engine's own account of its start.
TRACE_KINDS = (EXCEPTION, FRAME, TRACEBACK, CHAINED)
ERROR_LEVELS = ("ERROR", "CRITICAL", "FATAL")


def common_facts(line: LogLine) -> list[Fact]:
    """Traceback starts, chain lines, frames and exception lines, the same for every engine."""
    text = line.text
    if _TRACEBACK.search(text):
        return [Fact(line, TRACEBACK, {"text": text})]
    if _CHAINED.match(text):
        return [Fact(line, CHAINED, {"text": text})]
    m = _FRAME.match(text)
    if m:
        return [Fact(line, FRAME, {"path": m["path"], "func": m["func"]})]
    m = EXCEPTION_LINE.match(text)
    if m:
        return [Fact(line, EXCEPTION, {"text": text})]
    crash = crash_fact(line)
    return [crash] if crash else []


def crash_fact(line: LogLine) -> Fact | None:
    """A native crash line (``failures.CRASH_LINES``), also where it ends a progress bar's
    line (tqdm's redraw, then ``terminate called ...``)."""
    found = crash_line(line.text)
    return Fact(line, CRASH, {"error": found[0], "wrapper": found[1], "text": line.text}) if found else None


def logged_by_the_engine(line: LogLine) -> bool:
    """An ERROR-level line of the engine itself (a worker, the engine core, V0's driver), not
    of the API server in front of it."""
    return line.level in ERROR_LEVELS and line.process != "APIServer"


def starts_a_run(fact: Fact, engine: str) -> bool:
    """Whether a fact seen while no run is open is evidence of one: any engine fact, a
    traceback (or a chain line), a frame in the engine's own code (a traceback whose start
    the excerpt cut off), an exception or frame the engine logged at ERROR level. A lone
    exception or frame elsewhere, or a ready line, is not."""
    if fact.kind == READY:
        return False
    if fact.kind == FRAME:
        return bool(ENGINE_CODE[engine].search(fact.data["path"])) or logged_by_the_engine(fact.line)
    if fact.kind == EXCEPTION:
        return logged_by_the_engine(fact.line)
    if fact.kind == CRASH:
        return logged_by_the_engine(fact.line) or bool(CRASH_NAMES_ENGINE.search(fact.data["text"]))
    return True


def first(items: Iterable[Any], default: Any = None) -> Any:
    return next(iter(items), default)
