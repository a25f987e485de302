"""``replayscope follow vllm|sglang FILE|-``: a growing server log, streamed as it grows.

A ``LogTail`` reads what was appended to a file since the last read, across rotation (the
path now names another file: the old one is read to its end first) and truncation (the
file got shorter: read again from its start), and keeps its place in a state file so a
restart resumes at the saved offset. ``-`` reads standard input (``kubectl logs -f ... |``).

The state file also holds the parser's own state (``LogParser.resumable``: the open run with
everything it has seen, the line reader with its year, last stamp and rank), so a restarted
``follow`` goes on with the run's context instead of reading the rest of the log on its own.
It is a pickle restricted to the importer's own classes (``_SnapshotUnpickler``).

``LiveImport`` feeds the lines to the engine's incremental parser (the one ``import`` uses)
and sends each run to a sink as soon as there is something to say: the run record once
its startup is over (ready, failed, or its first batch; its config is complete by then),
then its events as the parser emits them, a heartbeat while the log is quiet, and
``run_end`` when the run ends (a restart, the end of standard input, or ``--idle-exit``).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import pickle
import re
import sys
import time
import zlib
from dataclasses import asdict, dataclass, field
from typing import IO, Any, Callable

from replayscope.collector.importers import refuse_other_engine
from replayscope.collector.importers.builder import RunBuilder
from replayscope.collector.importers.log_source import MAX_LINE_CHARS, check_log_path, refuse_binary
from replayscope.collector.importers.years import YearGuess, infer_year
from replayscope.collector.importers.parser import Engine, LogParser
from replayscope.contract.errors import ReplayscopeError

READ_CHUNK = 1 << 20
_BREAKS = re.compile(rb"[\r\n]")
MAX_READ = 8 << 20       # bytes one read takes of a file that grew (the rest at the next)
HEARTBEAT_S = 30.0
POST_AFTER_S = 120.0     # a run still starting after this long is sent anyway


@dataclass
class TailState:
    """Where following stopped: the file (by inode), the offset, and the run being sent."""
    path: str
    inode: int | None = None
    offset: int = 0
    run_id: str | None = None
    next_seq: int = 0
    run_posted: bool = False
    run_ready: bool = False
    run_index: int = 0
    parser: str | None = None        # the parser's resumable state (dump_parser), taken at ``offset``

    @classmethod
    def load(cls, path: str | None, log_path: str) -> "TailState":
        if path and os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as handle:
                    data = json.load(handle)
                if data.get("path") == log_path:
                    return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
            except (OSError, ValueError, TypeError) as error:
                raise ReplayscopeError(f"{path}: not a follow state file ({error})") from None
        return cls(path=log_path)

    def save(self, path: str | None, *, pending: int = 0) -> None:
        """Write the state; ``pending`` bytes of a line not yet complete are read again on resume."""
        if not path:
            return
        data = asdict(self)
        data["offset"] = max(0, self.offset - pending)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.replace(tmp, path)


# -- the parser's state across a restart ---------------------------------------------------

SNAPSHOT_VERSION = 3         # 3: the importers split (common -> facts, builder, parser)
# Everything a parser's resumable state is made of; nothing else may be unpickled.
_SNAPSHOT_CLASSES = {
    ("replayscope.collector.importers.lines", "LineReader"), ("replayscope.collector.importers.lines", "LogLine"),
    ("replayscope.collector.importers.years", "YearGuess"), ("replayscope.collector.importers.facts", "Fact"),
    ("replayscope.collector.importers.builder", "Failure"), ("replayscope.collector.importers.vllm_log", "VllmRun"),
    ("replayscope.collector.importers.sglang_log", "SglangRun"), ("replayscope.collector.importers.sglang_capture", "_Section"),
}


class _SnapshotUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SNAPSHOT_CLASSES:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a follow state")


def dump_parser(parser: LogParser) -> str:
    state = {"version": SNAPSHOT_VERSION, "engine": parser.engine.name, **parser.resumable()}
    return base64.b64encode(zlib.compress(pickle.dumps(state, protocol=4))).decode("ascii")


def load_parser(text: str, engine: Engine) -> dict[str, Any] | None:
    """A parser state saved by ``dump_parser`` for this engine; None when it cannot be used
    (another version's, another engine's, damaged)."""
    try:
        state = _SnapshotUnpickler(io.BytesIO(zlib.decompress(base64.b64decode(text.encode("ascii"))))).load()
    except Exception:  # any damage means: go on without it
        return None
    if not isinstance(state, dict) or state.get("version") != SNAPSHOT_VERSION or state.get("engine") != engine.name:
        return None
    return state


class LogTail:
    """The new complete lines of a file (or a stream) since the last ``read``."""

    def __init__(self, path: str, state: TailState, stream: IO[bytes] | None = None):
        self.path = path
        self.state = state
        self.stream = stream
        self.handle: IO[bytes] | None = None
        self.buffer = b""
        self.eof = False           # a stream ended
        self.behind = False        # the last read stopped at MAX_READ: more is waiting
        self.stream_first = True

    def _open(self) -> bool:
        try:
            handle = open(self.path, "rb")
        except OSError:
            return False
        inode = os.fstat(handle.fileno()).st_ino
        if self.state.inode is not None and inode != self.state.inode:
            self.state.offset = 0        # not the file the saved offset was in
        self.state.inode = inode
        handle.seek(self.state.offset)
        self.handle = handle
        return True

    def read(self) -> list[str]:
        if self.stream is not None:
            return self._read_stream()
        if self.handle is None and not self._open():
            return []
        data = self._drain()
        if self.behind:
            return self._lines(data)          # more is waiting: rotation and truncation once caught up
        try:
            current = os.stat(self.path)
        except OSError:
            current = None                # moved away and not yet recreated: keep the old one
        if current is not None and current.st_ino != self.state.inode:
            data += self._drain()         # rotated: the old file's last lines first
            self.handle.close()
            self.handle = None
            self.state.offset, self.state.inode = 0, None
            if self._open():
                data += self._drain()
        elif current is not None and current.st_size < self.state.offset:
            self.state.offset = 0         # truncated in place (copytruncate): start again
            self.buffer = b""
            self.handle.seek(0)
            data += self._drain()
        return self._lines(data)

    def _drain(self) -> bytes:
        """What was appended, up to ``MAX_READ`` bytes (the next read goes on): the working
        set stays bounded however much the file grew. Binary content is refused, as import
        refuses it."""
        chunks = []
        size = 0
        while size < MAX_READ:
            chunk = self.handle.read(READ_CHUNK)
            if not chunk:
                break
            refuse_binary(self.path, chunk, first=self.state.offset == 0)
            chunks.append(chunk)
            size += len(chunk)
            self.state.offset += len(chunk)
        self.behind = size >= MAX_READ
        return b"".join(chunks)

    def _read_stream(self) -> list[str]:
        chunk = self.stream.readline(READ_CHUNK) if not self.eof else b""
        if chunk:
            refuse_binary("standard input", chunk, first=self.stream_first)
            self.stream_first = False
        if not chunk:
            self.eof = True
            rest, self.buffer = self.buffer, b""
            return [rest.decode("utf-8", errors="replace")] if rest else []
        return self._lines(chunk)

    def _lines(self, data: bytes) -> list[str]:
        """Complete lines only (cut at \\n or \\r, as tqdm writes); a partial line waits."""
        if not data:
            return []
        pieces = _BREAKS.split(self.buffer + data)
        self.buffer = pieces.pop()
        out = [piece.decode("utf-8", errors="replace") for piece in pieces]
        while len(self.buffer) > MAX_LINE_CHARS:        # a line that never ends is read in pieces
            out.append(self.buffer[:MAX_LINE_CHARS].decode("utf-8", errors="replace"))
            self.buffer = self.buffer[MAX_LINE_CHARS:]
        return out

    def pending_bytes(self) -> int:
        return len(self.buffer)

    def pending_line(self) -> list[str]:
        """The line not yet complete, as text (kept: a restart reads it again)."""
        return [self.buffer.decode("utf-8", errors="replace")] if self.buffer else []

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


@dataclass
class _Sending:
    run: RunBuilder
    sink: Any = None
    record: dict[str, Any] | None = None     # the run record as last sent
    last_sent_at: float = field(default_factory=time.time)


class LiveImport:
    """Parses lines as they come and sends runs to sinks made by ``open_sink(run_record)``
    (an object with ``write(events)`` and ``close()``). A run keeps only the events it has
    not sent yet."""

    def __init__(self, engine: Engine, source_name: str, open_sink: Callable[[dict[str, Any]], Any], *,
                 state: TailState, year: YearGuess, clock: Callable[[], float] = time.time,
                 log: Callable[[str], None] = lambda message: None):
        self.engine = engine
        self.source_name = source_name
        self.open_sink = open_sink
        self.state = state
        self.clock = clock
        self.log = log
        self.index_base = state.run_index
        saved = load_parser(state.parser, engine) if state.parser else None
        if state.parser and saved is None:
            log("the saved parser state cannot be used (another version's?): the run goes on without what "
                "it had read before the restart")
        resumed = saved is not None and saved["current"] is not None
        self.parser = LogParser(engine, year=year, run_id=self._run_id, fallback_ts=clock(),
                                first_seq=state.next_seq if state.run_id and saved is None else 0,
                                continued=state.run_id is not None and saved is None,
                                continued_ready=state.run_ready)
        if saved is not None:
            self.parser.resume(saved)
        # the first run goes on with one the last process was sending (counted there already)
        self.carried = 1 if resumed or (saved is None and state.run_id) else 0
        self.sending: dict[int, _Sending] = {}
        self.runs_sent: list[str] = []
        self.resumed_posted = bool(state.run_id and state.run_posted)

    def _run_id(self, index: int, line) -> str:
        if index == 0 and self.state.run_id and self.carried:
            return self.state.run_id       # a restart of follow goes on with the run it was sending
        seed = f"{os.path.abspath(self.source_name)}|{line.text}|{line.ts}|{self.index_base + index}"
        return f"{self.engine.name}-follow-{hashlib.sha256(seed.encode()).hexdigest()[:20]}"

    def feed(self, lines: list[str]) -> None:
        for raw in lines:
            self.parser.feed(raw)

    def flush(self, *, final: bool = False, ends_mid_line: bool = False) -> None:
        """Send what can be sent; ``final`` ends the last run too."""
        if final:
            self.parser.finish(ends_mid_line=ends_mid_line)
        runs = self.parser.runs
        now = self.clock()
        for index, run in enumerate(runs):
            if not run.started:
                continue
            sending = self.sending.setdefault(index, _Sending(run))
            if sending.sink is False:
                continue
            if sending.sink is None and not (run.closed or run.ready or run.failed() or self._has_steps(run)
                                             or (index == 0 and self.resumed_posted)
                                             or (run.first_ts is not None and now - run.first_ts > POST_AFTER_S)):
                continue
            record = run.record(name=f"{os.path.basename(self.source_name) or 'stdin'} (follow)",
                                log_file=os.path.basename(self.source_name) or "-")
            if sending.sink is None:
                sending.sink = self.open_sink(record)
                self.runs_sent.append(run.run_id)
                self.log(f"run {run.run_id}: sending")
            elif record != sending.record:
                # what the log said since (the device, the capture sizes, whose figures are the
                # headline): the run's record as import would write it
                sending.sink.update_run(record)
            sending.record = record
            if not run.events and not run.closed and now - sending.last_sent_at >= HEARTBEAT_S:
                run.emit({"kind": "heartbeat", "ts": now})
            if run.events:
                sending.sink.write(list(run.events))
                sending.last_sent_at = now
                run.events.clear()
            if run.closed:
                sending.sink.close()
                sending.sink = False          # done
        current = runs[-1] if runs else None
        if current is not None and not current.closed:
            self.state.run_id = current.run_id
            self.state.next_seq = current.seq - len(current.events)   # the first event not sent yet
            self.state.run_posted = bool(self.sending.get(len(runs) - 1) and self.sending[len(runs) - 1].sink)
            self.state.run_ready = current.ready
        else:
            self.state.run_id, self.state.next_seq, self.state.run_posted = None, 0, False
            self.state.run_ready = False
        self.state.run_index = self.index_base + len(runs) - self.carried
        self.state.parser = dump_parser(self.parser)

    @staticmethod
    def _has_steps(run: RunBuilder) -> bool:
        return any(e["kind"] in ("step", "step_counts") for e in run.events)

    def close_sinks(self) -> None:
        for sending in self.sending.values():
            if sending.sink:
                sending.sink.close()


def _mtime(path: str) -> float | None:
    try:
        return os.path.getmtime(path)
    except OSError:
        return None


def follow(engine: Engine, path: str, open_sink: Callable[[dict[str, Any]], Any], *, state_path: str | None,
           interval: float = 1.0, idle_exit: float | None = None, clock: Callable[[], float] = time.time,
           sleep: Callable[[float], None] = time.sleep, log: Callable[[str], None] = lambda m: None,
           stdin: IO[bytes] | None = None) -> LiveImport:
    """Follow ``path`` (``-``: ``stdin``) until the stream ends, ``idle_exit`` seconds pass
    without new lines, or Ctrl-C (the state is saved; the run stays open for a restart)."""
    stream = (stdin or sys.stdin.buffer) if path == "-" else None
    if stream is None and os.path.lexists(path):
        check_log_path(path, max_bytes=None)         # a device, a FIFO: refused as import refuses them
    state = TailState.load(state_path, os.path.abspath(path) if stream is None else "-")
    tail = LogTail(path, state, stream)
    first = tail.read()
    head = "\n".join(first)
    refuse_other_engine(engine.name, head, path)          # before anything is sent
    # the file's date, as import reads it (a live log's is about now); a stream's: today
    modified = _mtime(path) if stream is None else None
    year = infer_year(head, modified if modified is not None else clock(),
                      "the file's date" if modified is not None else "today's date")
    live = LiveImport(engine, path if stream is None else "stdin", open_sink, state=state, year=year,
                      clock=clock, log=log)
    live.feed(first)
    live.flush()
    state.save(state_path, pending=tail.pending_bytes())
    quiet_since = clock()
    try:
        while True:
            if tail.eof:
                live.flush(final=True)
                break
            lines = tail.read()
            if lines:
                quiet_since = clock()
                live.feed(lines)
            elif idle_exit is not None and clock() - quiet_since >= idle_exit:
                # the end: a last line without its newline is read as import reads it
                live.feed(tail.pending_line())
                live.flush(final=True, ends_mid_line=tail.pending_bytes() > 0)
                break
            live.flush()
            state.save(state_path, pending=tail.pending_bytes())
            if not lines and not tail.eof:
                sleep(interval)
    except KeyboardInterrupt:
        live.flush()          # the run stays open: a restart resumes at the saved offset
    finally:
        state.save(state_path, pending=tail.pending_bytes())
        tail.close()
        live.close_sinks()
    return live
