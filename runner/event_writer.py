"""The event writer: a process of its own that converts a run's queued events and writes them.

    python -m replayscope.runner.event_writer        (started by ``replayscope.runner.writer_link``)

The program's emitter (``replayscope.runner.emitter``) only hands its queued values over, as
``marshal`` frames on this process's stdin (one end of a socket pair); this process makes the wire events and lines
(``replayscope.runner.event_records``) and writes them to the sink (``replayscope.contract.sinks``:
the events file, or a collector with its spool), on a core of its own, off the program's GIL.

Frames, both ways: one byte saying what, four bytes of length (little-endian), the marshal of
the value. In: ``O`` (the sink's spec, the run, graph_sample: the first frame, never argv or the
environment, which other users can read), ``E`` (records), ``F`` (a flush: answered once all
before it is written), ``C`` (the end: answered once the sink is closed). Out (stdout):
``O`` (None, or why the sink could not be opened), ``F`` and ``C`` (the question's number, and
what was written, lost, spooled and where). At the end of its stdin (the program ended, or was SIGKILLed) it writes
everything it was given, closes the sink and exits. SIGINT, SIGTERM and SIGHUP are ignored:
Ctrl-C to the program's group must not cost the events already handed over. Never traced
(started without the trace's environment) and never imports torch.
"""

from __future__ import annotations

import json
import marshal
import os
import select
import signal
import struct
import sys
from typing import Any

from replayscope.contract.sinks import _warn, sink_from_spec
from replayscope.runner.event_records import EventConverter

HEADER = struct.Struct("<cI")
OPEN, EVENTS, FLUSH, CLOSE = b"O", b"E", b"F", b"C"
MAX_BATCH = 20000           # events per sink write


def frame(what: bytes, value: Any) -> bytes:
    payload = marshal.dumps(value)
    return HEADER.pack(what, len(payload)) + payload


class FrameReader:
    """Frames from a file descriptor, read as they come (``select`` tells when)."""

    def __init__(self, fd: int):
        self.fd = fd
        self._buffer = bytearray()
        self.ended = False

    def next(self, timeout_s: float | None) -> tuple[bytes, Any] | None:
        """The next frame; None when none came within ``timeout_s`` or the stream ended (``ended``)."""
        while True:
            if len(self._buffer) >= HEADER.size:
                what, size = HEADER.unpack_from(self._buffer)
                if len(self._buffer) >= HEADER.size + size:
                    payload = bytes(self._buffer[HEADER.size:HEADER.size + size])
                    del self._buffer[:HEADER.size + size]
                    return what, marshal.loads(payload)
            if self.ended:
                return None
            if timeout_s is not None and not select.select([self.fd], [], [], timeout_s)[0]:
                return None
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                self.ended = True
            self._buffer += chunk


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Writing:
    """The run's sink and what was written to it, lost or spooled."""

    def __init__(self, sink: Any, converter: Any):
        self.sink = sink
        self.converter = converter
        self.written = 0
        self.lost = 0

    def write(self, events: list[Any]) -> None:
        for start in range(0, len(events), MAX_BATCH):
            batch = events[start:start + MAX_BATCH]
            try:
                self.sink.write(batch)
            except Exception as error:  # noqa: BLE001 (as the emitter's own thread: say it, count it, go on)
                self.lost += len(batch)
                _warn(f"telemetry sink failed, {len(batch)} event{'s' * (len(batch) != 1)} not written "
                      f"({self.lost} in all): {error!r}")
            else:
                self.written += len(batch)

    def close(self) -> None:
        self.write(self.converter.events([], final=True))
        try:
            self.sink.close()
        except Exception as error:  # noqa: BLE001
            self.lost += 1
            _warn(f"telemetry sink failed when closing: {error!r}")

    def report(self) -> tuple:
        return (self.written, self.lost, getattr(self.sink, "spooled", 0), getattr(self.sink, "spool_path", None))


def serve(reader: FrameReader, out_fd: int) -> int:
    first = reader.next(None)
    if first is None or first[0] != OPEN:
        return 2
    spec, run_json, graph_sample, flush_interval_s = first[1]
    run = json.loads(run_json)
    sink = sink_from_spec(spec)
    try:
        sink.open(run)
    except Exception as error:  # noqa: BLE001 (the program says it, as it would have opening it itself)
        write_all(out_fd, frame(OPEN, str(error)))
        return 1
    write_all(out_fd, frame(OPEN, None))
    writing = Writing(sink, EventConverter(getattr(sink, "takes_step_lines", False), graph_sample))
    while True:
        got = reader.next(flush_interval_s)
        if got is None:
            if reader.ended:             # the program is gone: what it handed over is written
                writing.close()
                return 0
            if writing.converter.sampler is not None:
                writing.write(writing.converter.events([]))     # the counts of seconds that are over
            continue
        what, value = got
        if what == EVENTS:
            writing.write(writing.converter.events(value))
        elif what == FLUSH:              # value: the question's number, given back with the answer
            write_all(out_fd, frame(FLUSH, (value, writing.report())))
        elif what == CLOSE:
            writing.close()
            write_all(out_fd, frame(CLOSE, (value, writing.report())))
            return 0


def main() -> int:
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    out_fd = os.dup(1)
    os.dup2(2, 1)                # anything printed goes to stderr, never into the answers
    sys.stdout = sys.stderr
    try:
        return serve(FrameReader(0), out_fd)
    except BrokenPipeError:      # the program went before reading an answer: the events are written
        return 0


if __name__ == "__main__":
    sys.exit(main())
