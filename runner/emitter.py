"""Telemetry emitter: events leave the step loop through a queue, a background thread and a writer process.

``Emitter.step`` adds one event's values to a list and returns (well under 2 µs; compiled where
built, ``replayscope.runner._recordcore``, with these methods as its reference); it never
blocks and never touches the GPU. A step's duration is seconds, None (not timed), or a
*timing* object (``ready()``, ``wait()``, ``seconds()``, ``release()``), e.g. a pair of CUDA
events (``replayscope.runner.timing``): the flush thread reads it only once ``ready()`` says the GPU got
there, so no synchronisation is added. Sinks (``replayscope.contract.sinks``) turn batches of wire events into
JSON lines or HTTP posts.

Where the events go: a sink that can be made again elsewhere (``spec()``: the events file, a
collector) is written by a writer process (``replayscope.runner.event_writer``): the flush thread
only takes the queued values in one go, resolves the GPU timings that are ready and hands the
values over as one ``marshal`` frame; converting and writing them costs the program's GIL
nothing. Any other sink, a writer that cannot start (said once on stderr) or
``REPLAYSCOPE_EVENTS_IN_PROCESS=1``: the flush thread converts and writes them itself.
"""

from __future__ import annotations

import contextlib
import itertools
import marshal
import os
import signal
import threading
import time
from typing import Any, Iterator

from replayscope.contract import wire
from replayscope.contract.errors import ReplayscopeError
from replayscope.contract.sinks import HttpSink, JsonlSink, Sink, _warn
from replayscope.runner.affinity import keep_off_program_cpus
from replayscope.runner.compiled import load_compiled
from replayscope.runner.event_records import RECORD, EventConverter, GraphSampler, resolve_timings
from replayscope.runner.writer_link import CLOSE, ENV_IN_PROCESS, FLUSH, SinkRefused, WriterLink, WriterUnavailable

_now = time.time          # an event's ts: read once per event, a module global (no attribute lookup)
# Emitter.step / step_fields compiled (runner/_recordcore.c; these methods are the reference): None when
# not built or REPLAYSCOPE_PURE_PYTHON=1
RECORD_CORE = load_compiled("replayscope.runner._recordcore")
FLUSH_WAIT_S = 120.0      # the longest flush() waits for the writer process to answer
CLOSE_WAIT_S = 120.0      # ... and close() (a collector's sink keeps trying for 60 s at the end)

__all__ = ["Emitter", "GraphSampler", "open_emitter", "sigterm_as_interrupt"]


class Emitter:
    """Sequence-numbers events and hands them to a sink: through a writer process, or from a background thread."""

    def __init__(self, sink: Sink, run: dict[str, Any], *, flush_interval_s: float = 0.2,
                 heartbeat_s: float = 5.0, max_batch: int = 20000, graph_sample: int = 1, opening: bool = False):
        """``opening``: the caller runs ``start()`` on another thread; until it has opened the sink (or the
        writer process), a flush writes nothing and keeps what is queued."""
        if isinstance(graph_sample, bool) or not isinstance(graph_sample, int) or graph_sample < 1:
            raise ReplayscopeError(f"graph_sample must be an integer >= 1 (1: every graph step), not {graph_sample!r}")
        run = {"wire_version": wire.WIRE_VERSION, **run}
        if graph_sample > 1:
            run["graph_sample"] = graph_sample
        wire.validate_run(run)
        self.run = run
        self.sink = sink
        self.graph_sample = graph_sample
        self.flush_interval_s = flush_interval_s
        self.heartbeat_s = heartbeat_s
        self.max_batch = max_batch
        # Each event is RECORD values in a row, added by one extend (``replayscope.runner.event_records``);
        # the flush thread takes them all with one slice and one del (each atomic under the GIL). No
        # container per event outlives the step, so queued steps bring no garbage collections of the heap.
        self._queue: list = []
        self._seq = itertools.count()
        self.step_recorder = "python"
        if RECORD_CORE is not None and type(self).step is Emitter.step and type(self).step_fields is Emitter.step_fields:
            # the same values added to the same queue, without a Python frame per step (a subclass's own
            # step is left as it is)
            recorder = RECORD_CORE.Recorder(self._queue, self._seq)
            self.step, self.step_fields = recorder.step, recorder.step_fields
            self.step_recorder = "compiled"
        self._held: list = []           # taken, behind a step whose GPU timing is not ready
        self.link: WriterLink | None = None     # the writer process, once started
        # converting here (no writer process)
        self._converter = EventConverter(getattr(sink, "takes_step_lines", False), graph_sample)
        self._stop = threading.Event()
        self._flush_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._last_write = time.monotonic()
        self.written = 0           # events the sink took
        self.lost = 0              # events the sink raised on, or never handed over: not written anywhere
        self._lost_here = 0        # of those, lost on this side (the rest the writer reports)
        self.closed = False
        # True from construction when the caller runs start() on a thread of its own (a traced process
        # opens its sink off the program's thread), until start() returns: a flush meanwhile keeps the queue
        self._opening = opening

    def __enter__(self) -> "Emitter":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        """End the run by how the block ended: finished, interrupted (Ctrl-C) or failed."""
        if self.closed:
            return
        if exc_type is None:
            self.close("finished")
        elif issubclass(exc_type, KeyboardInterrupt):
            self.close("interrupted")
        else:
            self.close("failed", error=str(exc) if isinstance(exc, ReplayscopeError) else repr(exc))

    @property
    def run_id(self) -> str:
        return self.run["run_id"]

    @property
    def writer_pid(self) -> int | None:
        """The writer process's pid (None: the events are written by this process)."""
        return self.link.pid if self.link is not None else None

    def start(self) -> "Emitter":
        spec = getattr(self.sink, "spec", None)
        spec = spec() if spec is not None and os.environ.get(ENV_IN_PROCESS) != "1" else None
        if spec is not None:
            try:
                self.link = WriterLink.start(spec, self.run, self.graph_sample, self.flush_interval_s)
            except SinkRefused as error:
                raise ReplayscopeError(str(error)) from None
            except WriterUnavailable as error:
                _warn(f"the event writer process could not be used ({error}); this process writes its "
                      f"events itself (set {ENV_IN_PROCESS}=1 to say so and not try)")
        if self.link is None:
            self.sink.open(self.run)
        self._opening = False
        self._thread = threading.Thread(target=self._loop, name="replayscope-emitter", daemon=True)
        self._thread.start()
        return self

    # -- hot path -----------------------------------------------------------
    def step(self, stage: str, mode: str, raw_bs: int, graph_bs: int | None, num_tokens: int,
             padded_tokens: int, reason: str | None, timing: Any, evidence: str | None = None) -> None:
        """Record one step. ``timing`` is seconds, None (not timed) or a timing object; ``evidence`` says
        what was seen that gave the reason, when the batch alone does not show it."""
        self._queue.extend((next(self._seq), _now(), ...,
                            stage, mode, raw_bs, graph_bs, num_tokens, padded_tokens, reason, evidence, timing))

    def step_fields(self, fields: tuple, timing: Any) -> None:
        """``step`` with its fields made once by the caller: ``(stage, mode, raw_bs, graph_bs,
        num_tokens, padded_tokens, reason, evidence)``, the same tuple for every step of a kind
        (the runner keeps one per route). The same event as ``step(*fields[:7], timing, fields[7])``,
        without building its fields per step."""
        self._queue.extend((next(self._seq), _now(), "step", fields, None, None, None, None, None, None, None,
                            timing))

    def emit(self, kind: str, **fields: Any) -> None:
        """Record any other event (phase, capture, degrade, parity, run_end, ...)."""
        self._queue.extend((next(self._seq), _now(), kind, fields, None, None, None, None, None, None, None, None))

    # -- background ---------------------------------------------------------
    def _take(self, wait_for_gpu: bool) -> list:
        """Every queued value, in order, up to the first step whose GPU timing is not ready
        (that one and every later event wait for the next flush), each timing as its seconds."""
        queue = self._queue
        n = len(queue)                   # whole records: each extend adds RECORD values at once
        items = queue[:n]
        del queue[:n]
        if self._held:
            items = self._held + items
        ready, self._held = resolve_timings(items, wait_for_gpu)
        return ready

    def _flush(self, wait_for_gpu: bool = False, final: bool = False) -> int:
        """Hand what is ready on; returns how many events. Through the writer process: as frames;
        else converted and written here. A batch the sink raised on is lost (counted in ``lost``,
        said on stderr), never counted as written."""
        with self._flush_lock:
            return self._flush_held(wait_for_gpu, final)

    def _flush_held(self, wait_for_gpu: bool, final: bool = False) -> int:
        """``_flush`` with the flush lock held by the caller."""
        if self._opening:                # start() has not opened the sink or the writer yet
            return 0
        items = self._take(wait_for_gpu)
        if self.link is not None:
            return self._hand_over(items)
        events = self._converter.events(items, final=final and not self._held)
        for start in range(0, len(events), self.max_batch):
            self._write(events[start:start + self.max_batch])
        return len(events)

    def _write(self, events: list[Any]) -> None:
        try:
            self.sink.write(events)
        except Exception as error:  # the emitter must never take the run down
            self._lost(len(events), f"telemetry sink failed, {len(events)} event{'s' * (len(events) != 1)} "
                                    f"not written ({self.lost + len(events)} in all): {error!r}")
        else:
            self.written += len(events)
        self._last_write = time.monotonic()

    def _lost(self, count: int, message: str) -> None:
        self.lost += count
        self._lost_here += count
        _warn(message)

    def _hand_over(self, items: list) -> int:
        """``items`` to the writer process, in frames of at most ``max_batch`` events; a value marshal
        cannot write costs only its event."""
        if not items:
            return 0
        if self.link.broken:             # said when it went: counted, not said again every flush
            self.lost += len(items) // RECORD
            self._lost_here += len(items) // RECORD
            return 0
        step, start = self.max_batch * RECORD, 0
        try:
            for start in range(0, len(items), step):
                part = items[start:start + step] if len(items) > step else items
                try:
                    self.link.send(part)
                except ValueError:
                    self.link.send(self._marshalable(part))
        except OSError as error:
            self.link.broken = True
            missed = (len(items) - start) // RECORD
            self._lost(missed, f"the event writer process (pid {self.link.pid}) is gone ({error!r}): {missed} "
                               f"events not written, nor any later event of this run")
            return 0
        self._last_write = time.monotonic()
        return len(items) // RECORD

    def _marshalable(self, items: list) -> list:
        """``items`` without the events holding a value that cannot be handed over (each said, counted lost)."""
        kept: list = []
        for start in range(0, len(items), RECORD):
            record = items[start:start + RECORD]
            try:
                marshal.dumps(record)
            except ValueError as error:
                self._lost(1, f"telemetry event {record[0]} ({record[2] if record[2] is not ... else 'step'}) "
                              f"not written: a value cannot be handed to the writer: {error}")
                continue
            kept += record
        return kept

    def _ask_writer(self, what: bytes, wait_s: float) -> None:
        report = self.link.ask(what, wait_s)
        if report is None:
            if self.link.broken:
                _warn(f"the event writer process (pid {self.link.pid}) is gone; events of this run after "
                      f"the last ones it wrote are lost")
            elif what == CLOSE:
                _warn(f"the event writer process (pid {self.link.pid}) did not finish writing within "
                      f"{wait_s:g}s; it goes on in the background (written and lost counts are incomplete)")
            else:
                _warn(f"the event writer process (pid {self.link.pid}) did not write what was flushed within "
                      f"{wait_s:g}s; it goes on in the background")
            return
        written, lost, spooled, spool_path = report
        self.written, self.lost = written, self._lost_here + lost
        if hasattr(self.sink, "written_elsewhere"):
            self.sink.written_elsewhere(spooled, spool_path)

    def _loop(self) -> None:
        keep_off_program_cpus()          # started from the program's thread: not on a CPU it pinned itself to
        while not self._stop.wait(self.flush_interval_s):
            self._flush()
            if time.monotonic() - self._last_write > self.heartbeat_s:
                self.emit("heartbeat")

    def flush(self) -> None:
        """Write everything queued now (waits for outstanding GPU timings, and for the writer process)."""
        with self._flush_lock:
            self._flush_written(wait_for_gpu=True)

    def _flush_written(self, wait_for_gpu: bool) -> None:
        """With the flush lock held: hand everything ready on, and wait for the writer to write it."""
        self._flush_held(wait_for_gpu=wait_for_gpu)
        if self.link is not None and not self.link.broken:
            self._ask_writer(FLUSH, FLUSH_WAIT_S)

    def flush_unless_busy(self, timeout_s: float = 0.5, wait_for_gpu: bool = True) -> bool:
        """``flush`` from a signal handler: False, writing nothing, when the flush lock is not
        free within ``timeout_s`` (the code the signal interrupted may hold it). Without
        ``wait_for_gpu`` it writes what is ready and leaves a step whose GPU timing is not (and
        every event after it) to the next flush."""
        if not self._flush_lock.acquire(timeout=timeout_s):
            return False
        try:
            self._flush_written(wait_for_gpu=wait_for_gpu)
        finally:
            self._flush_lock.release()
        return True

    def close(self, status: str = "finished", error: str | None = None) -> None:
        if self.closed:
            return
        self.emit("run_end", status=status, **({"error": error[:4000]} if error else {}))
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._opening:
            left = len(self._queue) // RECORD
            self._queue.clear()
            self.closed = True
            self._lost(left, f"telemetry: the run's sink was never opened, {left} events not written")
            return
        self._flush(wait_for_gpu=True, final=True)
        if self.link is not None:
            if not self.link.broken:
                self._ask_writer(CLOSE, CLOSE_WAIT_S)
            self.link.end()
        else:
            try:
                self.sink.close()
            except Exception as error:      # e.g. the last lines of a file on a full disk
                self._lost(1, f"telemetry sink failed when closing: {error!r}")
        self.closed = True


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM (docker stop, Kubernetes, systemd) interrupts like Ctrl-C,
    so an ``Emitter`` block ends its run ``interrupted`` instead of dying without run_end.
    SIGINT does too even where the process started with it ignored (a shell script's
    background job inherits that): the demo and other supervisors stop a run with SIGINT."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt("SIGTERM")

    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, interrupt)}
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def open_emitter(target: str, *, name: str, model: str, backend: str, device: str = "unknown",
                 config: dict[str, Any] | None = None, token: str | None = None, run_id: str | None = None,
                 source: str = "library", torch_version: str | None = None, version: str | None = None,
                 graph_sample: int = 1) -> Emitter:
    """A started emitter for one run, to a collector URL (http://...) or a JSON-lines file.

    Usable from any process; the same guarantees as the runner's: ``step`` never blocks
    and never synchronises the GPU. Call ``close(status)`` at the end of the run.
    ``version`` names what is deployed (for the fleet page); ``graph_sample`` N > 1 sends
    1 in N graph steps one by one and the others as exact counts.
    """
    import uuid

    if target.startswith(("http://", "https://")):
        sink: Sink = HttpSink(target, token=token)
    else:
        sink = JsonlSink(target)
    run = {"run_id": run_id or uuid.uuid4().hex[:16], "name": name, "source": source,
           "started_at": time.time(), "backend": backend, "model": model, "device": device,
           "torch_version": torch_version, "config": config or {}}
    if version is not None:
        run["version"] = version
    return Emitter(sink, run, graph_sample=graph_sample).start()
