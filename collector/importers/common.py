"""What the log importers share: numbers, the run builder that turns facts into wire
events as lines arrive, and the parser that cuts a log into runs.

An engine module (``vllm_log``, ``sglang_log``) supplies ``classify(line) -> [Fact]`` and a
``RunBuilder`` subclass with an ``on_<kind>`` handler per fact kind. ``LogParser`` feeds
it line by line: the same code reads a whole file (``replayscope import``) and a growing
one (``replayscope follow``). Events are emitted (and numbered) as soon as the log has
said all it will say about them, so a stream of them is append-only.

Every rank's facts are kept, each event carrying its ``rank``; the run's headline for a
phase is rank 0's (or the lowest rank that printed it), named in ``config.rank_headline``.
Nothing here raises on the text of a log: a line that does not parse is skipped, a figure
that does not fit the wire is dropped with a warning.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from collector.importers.failures import CHAINED as _CHAINED
from collector.importers.failures import CUT_OFF, ENGINE_CODE, EXCEPTION_LINE, WRAPPER, phase_of_frames
from collector.importers.failures import FRAME as _FRAME
from collector.importers.failures import TRACEBACK as _TRACEBACK
from collector.importers.lines import RANK_AXES, LineReader, LogLine, RankKey, YearGuess, infer_year, split_lines
from runner.errors import ReplayscopeError
from runner.wire import WIRE_VERSION, WireError, validate_event, validate_run

GIB = 2**30
MIB = 2**20
RANK_POLICY = ("per rank: every rank's facts are kept with their rank; the run's headline for each "
               "phase is rank 0's, or the lowest rank that printed it (config.rank_headline)")
MAX_FILE_BYTES = 2 * 2**30
STRAY_FACTS = 200        # exception and frame lines kept while no run is open (a chain's root cause)
NUM = r"(-?\d+(?:\.\d+)?)"

# -- numbers and memory ------------------------------------------------------------------


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


# -- facts -------------------------------------------------------------------------------


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
    return []


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
    return True


# -- a run -------------------------------------------------------------------------------


@dataclass
class Failure:
    """Where and why a rank went down."""
    ts: float | None
    rank: RankKey | None
    rank_label: str | None
    error: str | None = None
    phase: str | None = None
    graph_bs: int | None = None
    fatal: bool = False          # an engine's own "failed to start" line, not only an exception
    wrapper: bool = False        # the error only points at another one
    phase_from: str = "stage"    # explicit (the line said) | frames (the traceback's) | stage (the log's last step)
    frames: list[str] = field(default_factory=list)   # "path func" of the rank's traceback frames, in order
    cut: bool = False            # its last traceback stops before the exception line (set at the end)
    stage: str | None = None     # what the log was doing when the rank failed


class RunBuilder:
    """The events of one run, emitted as the log states them.

    Subclasses add ``on_<kind>(fact)`` handlers, ``model()``, ``backend()``, ``device()``,
    ``config()`` and may override ``close()`` to emit what waited for the end.
    """

    engine = "engine"
    source = "log"

    def __init__(self, run_id: str, *, seq_start: int = 0, fallback_ts: float = 0.0):
        self.run_id = run_id
        self.seq = seq_start
        self.fallback_ts = fallback_ts
        self.events: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self.held: dict[Any, tuple[int, dict[str, Any]]] = {}
        self._held_n = 0
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        self.yearless = False
        self.started = False          # an engine fact seen (a run worth keeping)
        self.saw_start = False        # the startup banner was seen: the run is not partial
        self.progress = False         # beyond the banner: a new banner means a restart
        self.ready = False
        self.failures: list[Failure] = []
        self.stage = "startup"
        self.ranks: dict[str, RankKey] = {}
        self.headline: dict[str, tuple[tuple, str | None]] = {}   # phase -> (rank order, label)
        self.trace: dict[Any, dict[str, Any]] = {}               # rank -> the open traceback
        self.error_lines: dict[Any, LogLine] = {}                # rank -> its last ERROR-level line
        self.closed = False
        self.status: str | None = None

    # -- feeding -----------------------------------------------------------------------
    def observe(self, line: LogLine) -> None:
        if line.ts is not None:
            self.first_ts = line.ts if self.first_ts is None else self.first_ts
            self.last_ts = line.ts
            self.yearless = self.yearless or not line.dated
        if line.rank_label:
            self.ranks.setdefault(line.rank_label, line.rank)
        if line.level in ERROR_LEVELS and line.text and not _TRACEBACK.search(line.text):
            self.error_lines[line.rank] = line

    def apply(self, fact: Fact) -> None:
        handler = getattr(self, "on_" + fact.kind, None)
        if handler is not None:
            handler(fact)

    # -- events ------------------------------------------------------------------------
    def emit(self, event: dict[str, Any]) -> dict[str, Any] | None:
        event = {k: v for k, v in event.items()}
        if event.get("ts") is None:
            event["ts"] = self.last_ts if self.last_ts is not None else self.fallback_ts
        if event.get("kind") == "phase" and event.get("start_ts") is not None and event["start_ts"] < 0:
            event["start_ts"] = None
        for key in ("rank", "provenance", "evidence"):
            if key in event and event[key] is None:
                del event[key]           # absent: the source's default, nothing to say
        event["seq"] = self.seq
        try:
            validate_event(event)
        except WireError as error:
            self.warnings.append(f"dropped a {event.get('kind')} event that does not fit the wire ({error})")
            return None
        self.seq += 1
        self.events.append(event)
        return event

    def hold(self, key: Any, event: dict[str, Any]) -> None:
        """An event a later line may still change: emitted by ``release``."""
        self._held_n += 1
        self.held[key] = (self._held_n, event)

    def release(self, keep: Callable[[Any], bool] = lambda key: False) -> None:
        """Emit the held events, except those whose key ``keep`` says to go on holding."""
        for key, (_, event) in sorted(self.held.items(), key=lambda item: item[1][0]):
            if not keep(key):
                del self.held[key]
                self.emit(event)

    def phase(self, fact: Fact, name: str, duration: float | None, mem: int | None = None, *,
              hold: bool = False) -> None:
        """A startup phase as one rank logged it (duration None: the log gives no length)."""
        ts = fact.line.ts
        if duration is not None:
            duration = max(0.0, duration)
        event = {"kind": "phase", "ts": ts, "phase": name, "duration_s": duration,
                 "start_ts": None if ts is None or duration is None else ts - duration, "mem_bytes": mem,
                 "rank": fact.line.rank_label}
        self.note_headline(name, fact.line)
        if hold:
            self.hold(("phase", name, fact.line.rank_label), event)
        else:
            self.emit(event)

    def note_headline(self, what: str, line: LogLine) -> None:
        order = rank_order(line.rank)
        current = self.headline.get(what)
        if current is None or order < current[0]:
            self.headline[what] = (order, line.rank_label)

    def warn(self, fact: Fact | None, message: str, code: str | None = None) -> None:
        """A warning event (stored with the run) and the same text in --json."""
        self.warnings.append(message)
        self.emit({"kind": "warning", "ts": fact.line.ts if fact else None, "message": clip(message, 4000),
                   "code": code, "rank": fact.line.rank_label if fact else None})

    # -- failures ----------------------------------------------------------------------
    # A traceback before the server is ready is a failure of its start, cut or whole; so is an
    # engine's "going down" line and an exception line. The root cause is the first exception
    # of a rank's chain; where the excerpt cuts it off, the failure says so.
    def _open_trace(self, fact: Fact) -> dict[str, Any]:
        trace = self.trace[fact.line.rank] = {"frames": [], "fact": fact, "error": False}
        return trace

    def on_traceback(self, fact: Fact) -> None:
        self._open_trace(fact)
        if not self.ready:
            # logger.exception(msg): the ERROR line just above its traceback is what the engine
            # said about it (often the exception's own text); the exception line, if the excerpt
            # has it, still wins
            said = self.error_lines.get(fact.line.rank)
            adjacent = said is not None and said.lineno == fact.line.lineno - 1 and said.ts == fact.line.ts
            message = said.text if adjacent else None
            self.fail(fact, clip(message, 4000), wrapper=True if message else None)

    def on_chained(self, fact: Fact) -> None:
        """"During handling of the above exception ...": the exception above stays the root
        cause; the next traceback is part of the same failure."""
        if not self.ready or self.trace.get(fact.line.rank, {}).get("fatal"):
            self.fail(fact, None)

    def on_frame(self, fact: Fact) -> None:
        frame = f"{fact.data['path']} {fact.data['func']}"
        trace = self.trace.get(fact.line.rank)
        if trace is None and not self.ready:
            trace = self._open_trace(fact)    # a traceback whose start the excerpt cut off
            self.fail(fact, None)
        if trace is not None:
            trace["frames"].append(frame)
        failure = self._failure_of(fact.line.rank)
        if failure is not None:
            failure.frames.append(frame)
            self._place(failure)
        if ENGINE_CODE[self.engine].search(fact.data["path"]):
            self.started = True

    def on_fatal(self, fact: Fact) -> None:
        """An engine's own "going down" line: the exception's text where the line carries it;
        otherwise the line stands in for the error until a traceback says why."""
        text = fact.data["text"]
        traceback = bool(_TRACEBACK.search(text))
        if traceback:
            self._open_trace(fact)
        error = (fact.data.get("error") or "").strip()
        if error:
            self.fail(fact, clip(error, 4000), fatal=True, wrapper=False)
            if traceback:
                self.trace[fact.line.rank]["error"] = True
        else:
            self.fail(fact, clip(_TRACEBACK.sub("", text).strip().rstrip(":"), 4000), fatal=True, wrapper=True)

    def on_exception(self, fact: Fact) -> None:
        trace = self.trace.get(fact.line.rank)
        text = clip(fact.data["text"], 4000)
        if self.ready and not (trace and trace.get("fatal")):
            return                            # a request's error while serving: not the run's
        if trace is not None:
            trace["error"] = True
        self.fail(fact, text)

    def _failure_of(self, rank: RankKey | None) -> Failure | None:
        return next((f for f in self.failures if f.rank == rank), None)

    def fail(self, fact: Fact, error: str | None, *, fatal: bool = False, phase: str | None = None,
             graph_bs: int | None = None, wrapper: bool | None = None) -> Failure:
        """Record a failure on the fact's rank; the first root cause per rank wins."""
        rank = fact.line.rank
        failure = self._failure_of(rank)
        if failure is None:
            failure = Failure(fact.line.ts, rank, fact.line.rank_label, stage=self.failing_stage())
            self.failures.append(failure)
        wrapper = bool(error and WRAPPER.search(error)) if wrapper is None else wrapper
        if error and (failure.error is None or (failure.wrapper and not wrapper)):
            failure.error, failure.wrapper = error, wrapper
        failure.fatal = failure.fatal or fatal
        if phase:
            failure.phase, failure.phase_from = phase, "explicit"
        self._place(failure)
        if graph_bs is not None:
            failure.graph_bs = graph_bs
        trace = self.trace.get(rank)
        if trace is not None and self.ready and fatal:
            trace["fatal"] = True
        return failure

    def _place(self, failure: Failure) -> None:
        """Where the failure happened: what the line said, else the traceback's frames, else
        the last startup step the log showed; and the size being captured, if it was."""
        if failure.phase_from != "explicit":
            from_frames = phase_of_frames(failure.frames)
            if from_frames:
                failure.phase, failure.phase_from = from_frames, "frames"
            elif failure.phase is None:
                failure.phase = self.failing_stage()
        if failure.phase == "capture" and failure.graph_bs is None:
            failure.graph_bs = self.capturing_bs()

    def failing_stage(self) -> str:
        return "serving" if self.ready else self.stage

    def capturing_bs(self) -> int | None:
        """The graph size being captured now, when the engine's log says."""
        return None

    def failed(self) -> bool:
        """A rank went down (or its traceback says it did, even cut)."""
        return bool(self.failures)

    def went_down(self) -> bool:
        """A rank said why or that it is going down (an exception, a fatal line), not only
        a traceback whose end the excerpt cut off."""
        return any(f.error is not None or f.fatal for f in self.failures)

    def headline_failure(self) -> Failure | None:
        """Rank 0's (or the lowest failing rank's) root cause; a rank that only says
        "see above", or whose exception the excerpt cut off, yields to one that says why."""
        if not self.failures:
            return None
        return min(self.failures, key=lambda f: (f.wrapper or f.error is None, rank_order(f.rank)))

    # -- the end -----------------------------------------------------------------------
    def close(self) -> None:
        """Emit what waited for more lines; subclasses add their own."""
        self.release()

    def finish(self, *, last: bool, ends_mid_line: bool, restarted: bool) -> None:
        if self.closed:
            return
        self.closed = True
        self.close()
        for failure in self.failures:
            trace = self.trace.get(failure.rank)
            failure.cut = trace is not None and not trace["error"]
            if failure.cut and failure.stage == "capture" and failure.phase_from != "explicit":
                # the frames the excerpt kept are the outer calls (engine init, KV-cache set-up):
                # the log shows a capture under way when it went down
                failure.phase = "capture"
                failure.graph_bs = failure.graph_bs if failure.graph_bs is not None else self.capturing_bs()
        failure = self.headline_failure()
        specific = next((f.phase for f in self.failures if f.phase not in (None, "startup")), None)
        for other in self.failures:       # a rank that only went down with the others failed where they did
            if other.phase in (None, "startup") and specific:
                other.phase = specific
        status = run_status(ready=self.ready, failed=failure is not None and (not self.ready or failure.fatal
                                                                                or failure.phase == "serving"),
                            last=last, ends_mid_line=ends_mid_line, restarted=restarted, warnings=self.warnings)
        if status == "failed" and failure is not None and not self.ready:
            failure.phase = failure.phase if failure.phase != "serving" else self.stage
        self.status = status
        if status == "failed" and failure is not None:
            for other in self.failures:
                if other is not failure and other.rank_label and (other.error or other.fatal):
                    self.emit({"kind": "warning", "ts": other.ts, "code": "rank_failed", "rank": other.rank_label,
                               "message": clip(f"{other.rank_label} failed"
                                               + (f" in {other.phase}" if other.phase else "")
                                               + f": {other.error or 'the process went down'}", 4000)})
        self.emit({"kind": "run_end", "ts": self.last_ts, "status": status,
                   "error": self.error_text(failure) if status == "failed" else None,
                   "rank": failure.rank_label if status == "failed" and failure else None,
                   "phase": failure.phase if status == "failed" and failure else None,
                   "graph_bs": failure.graph_bs if status == "failed" and failure else None})

    def error_text(self, failure: Failure | None) -> str | None:
        """The failure's text as the log has it; where the excerpt cuts the exception off,
        what it does show (the engine's line, the last frame) and that the rest is cut."""
        if failure is None:
            return None
        if failure.error and not failure.wrapper:
            return clip(failure.error, 4000)
        if failure.cut or (failure.error is None and failure.frames):
            where = ""
            if failure.frames:
                path, _, func = failure.frames[-1].rpartition(" ")
                where = f" (the traceback stops in {func}, {os.path.basename(path)})"
            head = f"{failure.error.rstrip('.:')}: " if failure.error else ""
            return clip(head + CUT_OFF + where, 4000)
        return clip(failure.error, 4000) or "the engine went down (no exception text in the log)"

    # -- the run record ----------------------------------------------------------------
    def model(self) -> str | None:
        return None

    def backend(self) -> str | None:
        return None

    def device(self) -> str | None:
        return None

    def config(self) -> dict[str, Any]:
        return {}

    def record(self, *, name: str, log_file: str) -> dict[str, Any]:
        started_at = self.first_ts if self.first_ts is not None else self.fallback_ts
        labels = sorted(self.ranks, key=lambda label: rank_order(self.ranks[label]))
        config = dict(self.config(), ranks=labels, log_file=log_file, rank_policy=RANK_POLICY,
                      rank_headline={what: label for what, (_, label) in sorted(self.headline.items())})
        model = self.model()
        record = {
            "run_id": self.run_id, "name": clip(name + (f" ({model})" if model else ""), 200) or self.run_id,
            "source": self.source, "started_at": max(0.0, float(started_at)),
            "backend": clip(self.backend(), 64) or "unknown", "model": clip(model, 300) or "unknown",
            "device": clip(self.device(), 200) or "unknown", "torch_version": None, "config": config,
            "wire_version": WIRE_VERSION, "partial": not self.saw_start,
            "time_provenance": "inferred" if self.yearless or self.first_ts is None else "log",
        }
        validate_run(record)
        return record


def run_status(*, ready: bool, failed: bool, last: bool, ends_mid_line: bool, restarted: bool,
               warnings: list[str]) -> str:
    """failed: it went down (before serving, or with a fatal error while serving);
    finished: the server came up; interrupted: the log stops (or restarts) before either."""
    if failed:
        return "failed"
    if last and ends_mid_line:
        warnings.append("the log ends in the middle of a line (truncated?): imported as far as it goes")
        return "interrupted"
    if not ready:
        warnings.append("the server restarted before it was ready" if restarted and not last
                        else "the log ends before the server was ready (truncated?): imported as far as it goes")
        return "interrupted"
    return "finished"


# -- the parser --------------------------------------------------------------------------


@dataclass
class Engine:
    """What an engine module gives the parser."""
    name: str                                       # vllm | sglang
    source: str                                     # vllm-log | sglang-log
    label: str                                      # vLLM | SGLang
    classify: Callable[[LogLine], list[Fact]]
    new_run: Callable[..., RunBuilder]
    # Lines only this engine prints (its process tags, stamps, startup lines, source paths):
    # how a log that is the other engine's is told apart.
    markers: re.Pattern
    # Fact kinds that state the server's configuration (printed between one startup banner
    # and the next, e.g. vLLM's API server and its engine core): not progress of a run.
    setup: frozenset[str] = frozenset()


def wrong_engine(engine: Engine, others: Iterable[Engine], text: str) -> str | None:
    """Why ``text`` is not ``engine``'s log, when it is plainly another's: lines only that
    engine prints and none of ``engine``'s own. None when it may be ``engine``'s (a log with
    neither, or both, is read)."""
    head = text[:4_000_000]
    if engine.markers.search(head):
        return None
    for other in others:
        found: list[str] = []
        for m in other.markers.finditer(head):
            if m.group(0) not in found:
                found.append(m.group(0))
            if len(found) == 3:
                break
        if found:
            return (f"this looks like a {other.label} log, not {engine.label}: it has {other.label}'s lines "
                    f"({'; '.join(repr(f[:60]) for f in found)}) and none of {engine.label}'s. "
                    f"Import it with `replayscope import {other.name} FILE`")
    return None


class LogParser:
    """Feeds lines to runs: a banner after the current run made progress, or a weight load
    after it was ready or failed, starts a new run. ``feed`` takes raw lines (already cut at
    newlines and carriage returns); ``finish`` ends the last run."""

    def __init__(self, engine: Engine, *, year: YearGuess, run_id: Callable[[int, LogLine], str],
                 fallback_ts: float, first_seq: int = 0, continued: bool = False, continued_ready: bool = False):
        self.engine = engine
        self.reader = LineReader(year)
        self.make_run_id = run_id
        self.fallback_ts = fallback_ts
        self.runs: list[RunBuilder] = []
        self.current: RunBuilder | None = None
        self.pending_lines: list[LogLine] = []     # lines before the first fact of a run
        self.stray: list[Fact] = []                # exception and frame facts while no run was open
        self.first_seq = first_seq
        self.continued = continued
        self.continued_ready = continued_ready   # the run went on was already serving
        self.lineno = 0
        self.failures = 0
        self.warnings: list[str] = []
        self.year = year

    def feed(self, raw: str) -> None:
        self.lineno += 1
        try:
            lines = self.reader.read(self.lineno, raw)
            for line in lines:
                if not line.text:
                    if self.current is not None:
                        self.current.observe(line)
                    continue
                for fact in self.engine.classify(line) or common_facts(line):
                    self._route(fact)
                if self.current is not None:
                    self.current.observe(line)
                else:
                    self.pending_lines.append(line)
                    del self.pending_lines[:-50]
        except Exception as error:  # a parser bug must not lose the rest of the log
            self.failures += 1
            if self.failures <= 5:
                self.warnings.append(f"line {self.lineno}: skipped, could not be read ({type(error).__name__})")

    def _route(self, fact: Fact) -> None:
        run = self.current
        if run is not None and ((fact.kind == BANNER and run.progress)
                                or (fact.kind == LOAD and (run.ready or run.went_down()))):
            run.finish(last=False, ends_mid_line=False, restarted=True)
            run = None
        if run is None:
            if not self.continued and not starts_a_run(fact, self.engine.name):
                if fact.kind in (EXCEPTION, FRAME):
                    self.stray.append(fact)       # it may yet turn out to be the root cause of a chain
                    del self.stray[:-STRAY_FACTS]
                return                         # a stray line is not a run yet
            index = len(self.runs)
            run = self.engine.new_run(self.make_run_id(index, fact.line),
                                      seq_start=self.first_seq if index == 0 else 0,
                                      fallback_ts=self.fallback_ts)
            if self.continued and index == 0:
                run.saw_start = run.started = True
                if self.continued_ready:
                    run.ready, run.stage = True, "serving"
            self.runs.append(run)
            self.current = run
            for line in self.pending_lines:
                run.observe(line)
            self.pending_lines = []
            # "During handling of the above exception": the exception above is this failure's root
            replay, self.stray = (self.stray if fact.kind == CHAINED else []), []
            for earlier in replay:
                self._apply(run, earlier)
        self._apply(run, fact)

    def _apply(self, run: RunBuilder, fact: Fact) -> None:
        if fact.kind == BANNER and not run.progress:
            run.saw_start = True
        elif fact.kind not in TRACE_KINDS + (READY,) and fact.kind not in self.engine.setup:
            run.progress = True
        if fact.kind not in TRACE_KINDS + (READY,) or (fact.kind in TRACE_KINDS
                                                        and logged_by_the_engine(fact.line)):
            run.started = True          # a traceback the engine logged at ERROR level is the engine's
        run.observe(fact.line)
        try:
            run.apply(fact)
        except Exception as error:  # one odd line must not lose the run
            run.warnings.append(f"line {fact.line.lineno}: skipped ({type(error).__name__})")

    def finish(self, *, ends_mid_line: bool) -> list[RunBuilder]:
        if self.current is not None:
            self.current.finish(last=True, ends_mid_line=ends_mid_line, restarted=False)
        return self.kept()

    def kept(self) -> list[RunBuilder]:
        """Runs with an engine fact in them (not only a stray traceback)."""
        return [r for r in self.runs if r.started]

    # -- resuming (follow) ---------------------------------------------------------------
    def resumable(self) -> dict[str, Any]:
        """What a later parser needs to go on where this one stops: the line reader (its
        year, last stamp and rank), the open run with all it has seen, the lines waiting
        for a run. Finished runs are not part of it."""
        current = self.current if self.current is not None and not self.current.closed else None
        return {"reader": self.reader, "current": current, "pending_lines": self.pending_lines,
                "stray": self.stray, "lineno": self.lineno}

    def resume(self, state: dict[str, Any]) -> None:
        """Go on from ``resumable()`` of an earlier parser of the same log."""
        self.reader = state["reader"]
        self.year = self.reader.year
        self.current = state["current"]
        self.runs = [self.current] if self.current is not None else []
        self.pending_lines = list(state["pending_lines"])
        self.stray = list(state.get("stray") or [])
        self.lineno = int(state["lineno"])
        self.continued = False


# -- whole files -------------------------------------------------------------------------


def read_log_file(path: str) -> tuple[str, float, str]:
    """(text, mtime, sha256) of a log file; ReplayscopeError for anything not a text log."""
    if not os.path.exists(path):
        raise ReplayscopeError(f"{path}: no such file")
    if os.path.isdir(path):
        raise ReplayscopeError(f"{path} is a directory, not a log file")
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise ReplayscopeError(f"{path}: {size} bytes is more than a log importer reads (2 GiB)")
        with open(path, "rb") as handle:
            data = handle.read()
        mtime = os.path.getmtime(path)
    except OSError as error:
        raise ReplayscopeError(f"{path}: cannot read: {error.strerror or error}") from None
    if looks_binary(data):
        raise ReplayscopeError(f"{path} is a binary file, not a server log")
    return data.decode("utf-8", errors="replace"), mtime, hashlib.sha256(data).hexdigest()


def looks_binary(data: bytes) -> bool:
    head = data[:65536]
    if not head:
        return False
    if b"\x00" in head:
        return True
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 13, 27, 12, 8))
    return controls > len(head) * 0.05


def stamp_warning(reader: LineReader, year: YearGuess) -> str:
    """Where the year (or the day) of stamps that do not print it came from."""
    if reader.saw_dateless and not reader.saw_yearless:
        return f"the log's stamps print only a clock: the first day is taken from {year.evidence}"
    return f"the log's stamps print no year: {year.year} is inferred from {year.evidence}"


def run_id_for(source: str, digest: str, index: int) -> str:
    """Stable across re-imports of the same bytes: the content hash and the run's index."""
    return f"{source}-{digest[:20]}-{index}"


def stated_figures(config: dict[str, Any]) -> dict[str, Any]:
    """The figures an engine's log states about the capture sizes and the KV cache, from an
    imported run's config (both engines use the same keys); null where the log does not say.
    What ``--json`` prints and the Startup page shows."""
    def by_rank(key: str) -> dict[str, Any] | None:
        return config.get(key + "_by_rank") or None

    cap = config.get("capture_size_cap")
    return {
        "capture_sizes": {"count": config.get("capture_count"), "max": config.get("max_capture_size"),
                          "sizes": config.get("capture_sizes") or None,
                          "capped_from": cap.get("from") if isinstance(cap, dict) else None},
        "kv_cache": {"tokens": config.get("kv_tokens"), "gpu_blocks": config.get("kv_blocks"),
                     "cpu_blocks": config.get("cpu_blocks"), "tokens_by_rank": by_rank("kv_tokens"),
                     "gpu_blocks_by_rank": by_rank("kv_blocks"), "max_concurrency": config.get("max_concurrency")},
        "graph_mem_estimate_bytes": config.get("graph_mem_estimate_bytes"),
        "compile_cache": {"hits": config.get("compile_cache_hits"), "saves": config.get("compile_cache_saves")},
    }


@dataclass
class ImportedRun:
    run: dict[str, Any]
    events: list[dict[str, Any]]
    status: str
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    ranks: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """What --json prints for this run."""
        config = self.run.get("config") or {}
        headline = config.get("rank_headline") or {}

        def is_headline(event: dict[str, Any], what: str) -> bool:
            return what not in headline or event.get("rank") == headline[what]

        phases = [{"phase": e["phase"], "duration_s": e["duration_s"], "mem_bytes": e.get("mem_bytes"),
                   "rank": e.get("rank")} for e in self.events if e["kind"] == "phase"]
        captures = [{k: e.get(k) for k in ("graph_bs", "stage", "duration_s", "pool_bytes",
                                           "pool_delta_bytes", "status", "error", "variant", "rank")}
                    for e in self.events if e["kind"] == "capture"]
        steps = {"graph": 0, "padded": 0, "eager": 0}
        reasons: dict[str, int] = {}
        for e in self.events:
            if e["kind"] in ("step", "step_counts"):
                n = e.get("count", 1)
                steps[e["mode"]] += n
                if e.get("reason"):
                    reasons[e["reason"]] = reasons.get(e["reason"], 0) + n
        capture = [p for p in phases if p["phase"] == "capture" and is_headline(p, "capture")]
        timed = [c["duration_s"] for c in captures if c["duration_s"] is not None and is_headline(c, "captures")]
        end = next((e for e in self.events if e["kind"] == "run_end"), {})
        return {
            "run_id": self.run["run_id"], "name": self.run["name"], "source": self.run["source"],
            "backend": self.run["backend"], "model": self.run["model"], "device": self.run["device"],
            "started_at": self.run["started_at"], "partial": self.run.get("partial"),
            "time_provenance": self.run.get("time_provenance"), "status": self.status, "error": self.error,
            "failure": {k: end.get(k) for k in ("rank", "phase", "graph_bs")} if self.status == "failed" else None,
            "ranks": self.ranks, "phases": phases, "captures": captures,
            "capture_total_s": (capture[0]["duration_s"] if capture
                                else (round(sum(timed), 6) if timed else None)),
            "graph_mem_bytes": config.get("graph_mem_bytes"),
            **stated_figures(config),
            "steps": steps, "reasons": reasons, "events": len(self.events),
            "warnings": self.warnings,
        }


@dataclass
class ImportResult:
    """Every run found in one log."""
    source: str
    path: str
    runs: list[ImportedRun]
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"source": self.source, "file": self.path, "rank_policy": RANK_POLICY,
                "runs": [r.summary() for r in self.runs], "warnings": self.warnings}


def imported(run: RunBuilder, name: str, log_file: str) -> ImportedRun:
    record = run.record(name=name, log_file=log_file)
    end = next((e for e in reversed(run.events) if e["kind"] == "run_end"), None)
    return ImportedRun(record, run.events, run.status or "interrupted", run.warnings,
                       end.get("error") if end else None, record["config"]["ranks"])


def parse_text(engine: Engine, text: str, *, path: str, mtime: float, digest: str | None) -> ImportResult:
    """A whole log's text into runs; never raises on its content."""
    if digest is None:
        digest = hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()
    try:
        year = infer_year(text, mtime)
        parser = LogParser(engine, year=year, run_id=lambda index, _line: run_id_for(engine.name, digest, index),
                           fallback_ts=mtime)
        pieces, ends_mid_line = split_lines(text)
        for raw in pieces:
            parser.feed(raw)
        runs = parser.finish(ends_mid_line=ends_mid_line)
        base = os.path.basename(path) or f"{engine.name}.log"
        out = [imported(run, f"{base} run {i + 1}", base) for i, run in enumerate(runs)]
        for run, builder in zip(out, runs):
            if builder.yearless:
                run.warnings.append(stamp_warning(parser.reader, parser.reader.year))
    except Exception as error:  # never let a log's content crash the command
        return ImportResult(engine.source, path, [], [f"the importer failed on this log "
                                                      f"({type(error).__name__}: {error}); nothing imported"])
    result = ImportResult(engine.source, path, out, parser.warnings)
    if not out:
        result.warnings.append(f"no {engine.label} server start, startup line or failure found in this log")
    return result


def first(items: Iterable[Any], default: Any = None) -> Any:
    return next(iter(items), default)
