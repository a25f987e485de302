"""The events file: one run as JSON lines, the run record first, then one wire event per line.

    {"kind": "run", "run_id": "...", "name": "...", ...}
    {"seq": 0, "ts": ..., "kind": "phase", ...}
    {"seq": 1, "ts": ..., "kind": "step", ...}

The runner's ``--events`` (``JsonlSink``) and the HTTP sink's spool write it;
``replayscope import events`` and the tests read it.
This module is the only place that knows the format. Standard library only.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any, Iterable, Iterator, NamedTuple

from replayscope.contract import wire
from replayscope.contract.errors import ReplayscopeError

RUN_KIND = "run"


def run_line(run: dict[str, Any]) -> str:
    return json.dumps({"kind": RUN_KIND, **run}) + "\n"


def event_lines(events: Iterable[dict[str, Any]]) -> str:
    return "".join(map(event_line, events))


STEP_KEYS = ("seq", "ts", "kind", "stage", "mode", "raw_bs", "graph_bs", "num_tokens", "padded_tokens", "reason",
             "duration_s")   # a step event's keys in the order the emitter makes them (replayscope.runner.emitter)
_STEP_LINE = ('{"seq": %s, "ts": %s, "kind": "step", "stage": %s, "mode": %s, "raw_bs": %s, "graph_bs": %s, '
              '"num_tokens": %s, "padded_tokens": %s, "reason": %s, "duration_s": %s}\n')
_quoted = json.encoder.encode_basestring_ascii      # json.dumps's own string encoder (ensure_ascii)
_NOT_FINITE = frozenset(("nan", "inf", "-inf"))


def event_line(event: dict[str, Any]) -> str:
    """One event's line: ``json.dumps(event)``, byte for byte. A step event of plain values (the
    runner's and the trace's steps, one per step of a run) is written by a template, ~3x faster;
    anything else, and any value the template does not write as json does, goes to ``json.dumps``."""
    if tuple(event) == STEP_KEYS:
        seq, ts, kind, stage, mode, raw_bs, graph_bs, num_tokens, padded_tokens, reason, duration = event.values()
        if (kind == "step" and type(seq) is int and type(ts) is float and type(stage) is str and type(mode) is str
                and type(raw_bs) is int and (graph_bs is None or type(graph_bs) is int) and type(num_tokens) is int
                and type(padded_tokens) is int and (reason is None or type(reason) is str)
                and (duration is None or type(duration) is float)):
            ts_text = repr(ts)
            duration_text = "null" if duration is None else repr(duration)
            if ts_text not in _NOT_FINITE and duration_text not in _NOT_FINITE:
                return _STEP_LINE % (seq, ts_text, _quoted(stage), _quoted(mode), raw_bs,
                                     "null" if graph_bs is None else graph_bs, num_tokens, padded_tokens,
                                     "null" if reason is None else _quoted(reason), duration_text)
    return json.dumps(event) + "\n"


# -- a step's line from the emitter's queued values, no event dict ---------------------------

STEP_FIELDS = ("stage", "mode", "raw_bs", "graph_bs", "num_tokens", "padded_tokens", "reason", "evidence")
STEP_TEXTS_KEPT = 4096     # the fields' text kept per distinct fields (a run has a few dozen)
_step_texts: dict[tuple, tuple[str, str]] = {}


def _fields_text(fields: tuple) -> tuple[str, str]:
    """A step line's text between its ts and its duration, and after the duration, for one step's
    ``fields`` (``STEP_FIELDS``): json.dumps's own, as it writes them inside the event's dict."""
    stage, mode, raw_bs, graph_bs, num_tokens, padded_tokens, reason, evidence = fields
    middle = json.dumps({"kind": "step", "stage": stage, "mode": mode, "raw_bs": raw_bs, "graph_bs": graph_bs,
                         "num_tokens": num_tokens, "padded_tokens": padded_tokens, "reason": reason})
    tail = "}\n" if evidence is None else ', "evidence": ' + json.dumps(evidence) + "}\n"
    return ", " + middle[1:-1] + ', "duration_s": ', tail


def step_line(seq: int, ts: float, fields: tuple, duration: Any) -> str:
    """The line of the step event the emitter makes of ``seq``, ``ts``, ``fields`` (``STEP_FIELDS``
    order) and ``duration`` (the event's keys, ``evidence`` only when not None), byte for byte
    json.dumps's, without the event's dict: the fields' text is made once per distinct fields.
    Raises as json.dumps would on a value it cannot write."""
    stage, mode, raw_bs, graph_bs, num_tokens, padded_tokens, reason, evidence = fields
    # Kept only for plain fields (sizes ints, texts str or None): equal fields are then the same
    # text, once the sizes are ints (True == 1 and 8.0 == 8, but json writes them otherwise).
    plain = (type(raw_bs) is int and type(num_tokens) is int and type(padded_tokens) is int
             and (graph_bs is None or type(graph_bs) is int))
    try:
        texts = _step_texts.get(fields) if plain else None
    except TypeError:                  # a value that cannot be a key (a list): made for this line alone
        texts = None
        plain = False
    if texts is None:
        texts = _fields_text(fields)
        if (plain and len(_step_texts) < STEP_TEXTS_KEPT and type(stage) is str and type(mode) is str
                and (reason is None or type(reason) is str) and (evidence is None or type(evidence) is str)):
            _step_texts[fields] = texts
    middle, tail = texts
    # A float's JSON is its repr when finite (x - x is 0.0 only then); anything else json.dumps's.
    ts_text = repr(ts) if type(ts) is float and ts - ts == 0.0 else json.dumps(ts)
    if duration is None:
        duration_text = "null"
    else:
        duration_text = (repr(duration) if type(duration) is float and duration - duration == 0.0
                         else json.dumps(duration))
    return f'{{"seq": {seq if type(seq) is int else json.dumps(seq)}, "ts": {ts_text}{middle}{duration_text}{tail}'


def written_lines(items: Iterable[Any]) -> str:
    """The text of ``items`` (``EventsFileWriter.write``): each an event dict (``event_line``) or
    a line made already (``step_line``)."""
    return "".join([item if type(item) is str else event_line(item) for item in items])


class EventsFileWriter:
    """Writes one run's events file from the start: the run record, then events as they come."""

    def __init__(self, path: str | os.PathLike, run: dict[str, Any]):
        self.path = path
        self._file = open(path, "w", encoding="utf-8")
        self._file.write(run_line(run))
        self._file.flush()

    def write(self, events: list[Any]) -> None:
        """Events (dicts) and steps' lines (``step_line``), in order."""
        self._file.write(written_lines(events))
        self._file.flush()          # a reader (or a crash) sees every batch written so far

    def close(self) -> None:
        self._file.close()


def write_events_file(path: str | os.PathLike, run: dict[str, Any], events: Iterable[dict[str, Any]] = ()) -> None:
    """Create or replace ``path`` with ``run`` and ``events``."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(run_line(run) + event_lines(events))


def append_events(path: str | os.PathLike, run: dict[str, Any], events: Iterable[dict[str, Any]]) -> None:
    """Append ``events``; a file that does not exist yet or is empty gets the run record first."""
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", encoding="utf-8") as handle:
        handle.write((run_line(run) if new else "") + event_lines(events))


def read_events_from(path: str | os.PathLike, offset: int = 0, limit: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """Up to ``limit`` events of ``path`` from byte ``offset`` (0: the first event, after the
    run record), not checked, and the offset just past them: how the HTTP sink's spool is
    sent from its front without reading it whole. A last line without its newline (still
    being written, or cut off) is left for later."""
    events: list[dict[str, Any]] = []
    with open(path, "rb") as handle:
        if offset:
            handle.seek(offset)
        else:
            handle.readline()                       # the run record
        end = handle.tell()
        while limit is None or len(events) < limit:
            line = handle.readline()
            if not line.endswith(b"\n"):
                break
            end += len(line)
            if line.strip():
                events.append(json.loads(line))
    return events, end


class EventsFile(NamedTuple):
    run: dict[str, Any]              # the run record, without "kind"
    events: list[dict[str, Any]]
    warnings: list[str]              # e.g. a last line cut off by a writer that died mid-line


def read_events_file(path: str | os.PathLike, *, validate: bool = True) -> EventsFile:
    """The run record and events of ``path``, every line checked against the wire contract
    (``validate``) before anything is returned. Errors name the file and line. A last line
    that is cut off (no newline, not JSON: the writer stopped mid-line) is skipped with a
    warning; any other bad line is an error."""
    if os.path.isdir(path):
        raise ReplayscopeError(f"{path} is a directory, not an events file")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as error:
        raise ReplayscopeError(f"cannot read {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise ReplayscopeError(f"{path} is not a text file of JSON lines") from None
    lines = text.split("\n")
    records: list[tuple[int, Any]] = []
    warnings: list[str] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append((lineno, json.loads(line)))
        except ValueError as error:
            if lineno == len(lines) and records:       # the last line, without its newline
                warnings.append(f"{path}:{lineno}: cut off (the writer stopped mid-line); skipped")
                break
            raise ReplayscopeError(f"{path}:{lineno}: not JSON ({error})") from None
    if not records or not isinstance(records[0][1], dict) or records[0][1].get("kind") != RUN_KIND:
        raise ReplayscopeError(f'{path}: the first line must be the run record ({{"kind": "run", ...}})')
    run = {k: v for k, v in records[0][1].items() if k != "kind"}
    events = [event for _, event in records[1:]]
    if validate:
        try:
            wire.validate_run(run)
        except wire.WireError as error:
            raise ReplayscopeError(f"{path}:{records[0][0]}: run record: {error}") from None
        for lineno, event in records[1:]:
            try:
                wire.validate_event(event)
            except wire.WireError as error:
                raise ReplayscopeError(f"{path}:{lineno}: {error}") from None
    return EventsFile(run, events, warnings)


# -- a file of any size, a batch at a time ----------------------------------------------------

MAX_LINE_BYTES = 16 << 20        # one event line; anything longer is not an events file


class CheckedEventsFile(NamedTuple):
    run: dict[str, Any]              # the run record, without "kind"
    count: int                       # events
    warnings: list[str]
    end: int                         # bytes of the file that hold them (a cut last line is past it)


def regular_file(path: str | os.PathLike, what: str, why: str) -> os.stat_result:
    """``path``'s stat when it names a regular file; else the one-line error that says what it is
    instead (``what``: "an events file", "a log file"; ``why``: why only a regular file will do).
    The events files' and the log importers' one check."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ReplayscopeError(f"{path}: no such file") from None
    except OSError as error:
        raise ReplayscopeError(f"cannot read {path}: {error.strerror or error}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ReplayscopeError(f"{path} is a directory, not {what}")
    if not stat.S_ISREG(info.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device" if stat.S_ISCHR(info.st_mode)
                or stat.S_ISBLK(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode) else "not a file")
        raise ReplayscopeError(f"{path} is {kind}, not a regular file: {why}")
    return info


def _numbered_lines(path: str | os.PathLike, end: int | None = None) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, bytes without the newline, whether it ended with one), up to byte ``end``."""
    with open(path, "rb") as handle:
        lineno = 0
        read = 0
        while end is None or read < end:
            line = handle.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            lineno += 1
            read += len(line)
            if len(line) > MAX_LINE_BYTES:
                raise ReplayscopeError(f"{path}:{lineno}: a line over {MAX_LINE_BYTES >> 20} MiB: not an events file")
            newline = line.endswith(b"\n")
            yield lineno, line[:-1] if newline else line, newline


def check_events_file(path: str | os.PathLike) -> CheckedEventsFile:
    """Every line of ``path`` checked as ``read_events_file`` checks it, the file read once a
    line at a time and nothing kept but the run record: any size of file in bounded memory."""
    regular_file(path, "an events file", "an events file is read to its end")
    run: dict[str, Any] | None = None
    count = 0
    warnings: list[str] = []
    end = 0
    try:
        for lineno, line, newline in _numbered_lines(path):
            if not line.strip():
                end += len(line) + newline
                continue
            try:
                record = json.loads(line)
            except ValueError as error:
                if not newline and run is not None:           # the last line, without its newline
                    warnings.append(f"{path}:{lineno}: cut off (the writer stopped mid-line); skipped")
                    break
                raise ReplayscopeError(f"{path}:{lineno}: not JSON ({error})") from None
            end += len(line) + newline
            if run is None:
                if not isinstance(record, dict) or record.get("kind") != RUN_KIND:
                    raise ReplayscopeError(f'{path}: the first line must be the run record ({{"kind": "run", ...}})')
                run = {k: v for k, v in record.items() if k != "kind"}
                try:
                    wire.validate_run(run)
                except wire.WireError as error:
                    raise ReplayscopeError(f"{path}:{lineno}: run record: {error}") from None
                continue
            try:
                wire.validate_event(record)
            except wire.WireError as error:
                raise ReplayscopeError(f"{path}:{lineno}: {error}") from None
            count += 1
    except OSError as error:
        raise ReplayscopeError(f"cannot read {path}: {error.strerror}") from None
    if run is None:
        raise ReplayscopeError(f'{path}: the first line must be the run record ({{"kind": "run", ...}})')
    return CheckedEventsFile(run, count, warnings, end)


def event_batches(path: str | os.PathLike, checked: CheckedEventsFile, size: int = 500) -> Iterator[list[dict[str, Any]]]:
    """The events of a file ``check_events_file`` passed, ``size`` at a time."""
    batch: list[dict[str, Any]] = []
    first = True
    for _, line, _ in _numbered_lines(path, checked.end):
        if not line.strip():
            continue
        if first:
            first = False                        # the run record
            continue
        batch.append(json.loads(line))
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
