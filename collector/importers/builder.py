"""The run builder: turns a run's facts into wire events as lines arrive.

An engine module (``vllm_log``, ``sglang_log``) subclasses ``RunBuilder`` with an
``on_<kind>`` handler per fact kind. Events are emitted (and numbered) as soon as the log
has said all it will say about them, so a stream of them is append-only.

Every rank's facts are kept, each event carrying its ``rank``; the run's headline for a
phase is rank 0's (or the lowest rank that printed it), named in ``config.rank_headline``.
Nothing here raises on the text of a log: a figure that does not fit the wire is dropped
with a warning.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

from replayscope.collector.importers.facts import ERROR_LEVELS, TRACE_KINDS, Fact, clip, rank_order
from replayscope.collector.importers.failures import CUT_OFF, ENGINE_CODE, WRAPPER, phase_of_frames
from replayscope.collector.importers.failures import TRACEBACK as _TRACEBACK
from replayscope.collector.importers.lines import LogLine, RankKey
from replayscope.contract.wire import WIRE_VERSION, WireError, validate_event, validate_run


RANK_POLICY = ("per rank: every rank's facts are kept with their rank; the run's headline for each "
               "phase is rank 0's, or the lowest rank that printed it (config.rank_headline)")
QUIET_LEVELS = ("DEBUG", "INFO", "WARNING", "WARN")   # a traceback at these levels is the engine's warning
STRAY_FACTS = 200        # exception and frame lines kept while no run is open (a chain's root cause)


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
        self.ready_ts: float | None = None     # the stamp of the first line that said it was ready
        self.failures: list[Failure] = []
        self.stage = "startup"
        self.ranks: dict[str, RankKey] = {}
        self.headline: dict[str, tuple[tuple, str | None]] = {}   # phase -> (rank order, label)
        self.trace: dict[Any, dict[str, Any]] = {}               # rank -> the open traceback
        self.error_lines: dict[Any, LogLine] = {}                # rank -> its last ERROR-level line
        self.closed = False
        self.status: str | None = None
        self.stopping = False          # the server was asked to stop (a signal, the end of an offline run)

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
        if fact.kind in TRACE_KINDS and fact.line.level in QUIET_LEVELS:
            return         # a traceback the engine logged as a warning (or info) is not a failure
        handler = getattr(self, "on_" + fact.kind, None)
        if handler is not None:
            handler(fact)

    def mark_ready(self, fact: Fact) -> None:
        """The server (or offline engine) is ready: the end of its startup (config ``ready_at``)."""
        self.ready = True
        if self.ready_ts is None:
            self.ready_ts = fact.line.ts if fact.line.ts is not None else self.last_ts

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

    def on_crash(self, fact: Fact) -> None:
        """Native code or the interpreter went down (no traceback follows): a failure of the
        run whether it was starting or serving; ``terminate called ...`` and ``Fatal Python
        error`` only say so, the ``what()`` or error line beside them says why."""
        wrapper = bool(fact.data["wrapper"])
        self.fail(fact, clip(fact.data["error"], 4000), fatal=True, wrapper=wrapper)

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

    def on_shutdown(self, fact: Fact) -> None:
        """The server was asked to stop (Ctrl-C, SIGTERM, an offline program's end): what it
        prints while it goes down (an ``EngineDeadError`` traceback) is not a failure."""
        self.stopping = True

    def fail(self, fact: Fact, error: str | None, *, fatal: bool = False, phase: str | None = None,
             graph_bs: int | None = None, wrapper: bool | None = None) -> Failure:
        """Record a failure on the fact's rank; the first root cause per rank wins. After a
        stop the server was asked for, an error is its shutdown's: a warning, not a failure."""
        rank = fact.line.rank
        if self.stopping:
            if not any("while it stopped" in w for w in self.warnings):
                self.warn(fact, clip(f"an error while the server stopped after it was asked to (not a failure of the "
                                     f"run): {error or fact.line.text}", 4000), "shutdown_error")
            return Failure(fact.line.ts, rank, fact.line.rank_label, error=error)
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

    def engine_version(self) -> str | None:
        """The engine's release as its log names it ("vllm 0.13.0"): the run record's
        ``version``, which the fleet groups and filters by."""
        return None

    def record(self, *, name: str, log_file: str) -> dict[str, Any]:
        started_at = self.first_ts if self.first_ts is not None else self.fallback_ts
        labels = sorted(self.ranks, key=lambda label: rank_order(self.ranks[label]))
        config = dict(self.config(), ranks=labels, log_file=log_file, rank_policy=RANK_POLICY,
                      rank_headline={what: label for what, (_, label) in sorted(self.headline.items())})
        if self.ready_ts is not None:
            config["ready_at"] = max(0.0, float(self.ready_ts))
        model = self.model()
        record = {
            "run_id": self.run_id, "name": clip(name + (f" ({model})" if model else ""), 200) or self.run_id,
            "source": self.source, "started_at": max(0.0, float(started_at)),
            "backend": clip(self.backend(), 64) or "unknown", "model": clip(model, 300) or "unknown",
            "device": clip(self.device(), 200) or "unknown", "torch_version": None, "config": config,
            "wire_version": WIRE_VERSION, "partial": not self.saw_start, "version": clip(self.engine_version(), 64),
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
