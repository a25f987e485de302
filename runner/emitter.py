"""Telemetry emitter: events leave the step loop through a queue and a background thread.

``Emitter.step`` adds one event's values to a deque and returns (well under 2 µs); it never
blocks and never touches the GPU. A step's duration is seconds, None (not timed), or a
*timing* object (``ready()``, ``wait()``, ``seconds()``, ``release()``), e.g. a pair of CUDA
events (``replayscope.runner.timing``): the flush thread reads it only once ``ready()`` says the GPU got
there, so no synchronisation is added. Sinks (``replayscope.contract.sinks``) turn batches of wire events into
JSON lines or HTTP posts.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import threading
import time
from collections import deque
from typing import Any, Iterator

from replayscope.contract import wire
from replayscope.contract.errors import ReplayscopeError
from replayscope.contract.events_file import step_line
from replayscope.contract.sinks import HttpSink, JsonlSink, Sink, _warn

_now = time.time          # an event's ts: read once per event, a module global (no attribute lookup)
_SPREAD = object()        # the queued kind of a step whose eight fields follow one by one (Emitter.step)


class GraphSampler:
    """Sends 1 in ``every`` graph steps as step events and counts the rest exactly.

    The counted steps leave as ``step_counts`` events, one per (second, stage, timed or
    not), split by raw batch size in ``batch_sizes``: the collector's per-second rollups,
    ratios, alerts, step times and batch-size histogram stay exact while the raw events
    drop ~``every``x. Eager and padded steps are always sent. Runs on the flush thread,
    never on the step loop.
    """

    def __init__(self, every: int, next_seq):
        self.every = every
        self._next_seq = next_seq
        self._seen: dict[str, int] = {}       # stage -> graph steps seen
        self._open: dict[tuple, dict] = {}    # (stage, timed) -> the second being counted
        self.counted = 0

    def offer(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """What to send for one converted event, in order (possibly nothing yet)."""
        second = int(event["ts"] // 1)
        if event["kind"] == "run_end":
            out = self.drain()            # every count before the end of the run
        else:
            out = self._close(lambda agg: agg["second"] < second)
        if event["kind"] != "step" or event["mode"] != "graph":
            out.append(event)
            return out
        stage = event["stage"]
        seen = self._seen.get(stage, 0)
        self._seen[stage] = seen + 1
        if seen % self.every == 0:
            out.append(event)
            return out
        self._count(event, second)
        return out

    def due(self, now: float) -> list[dict[str, Any]]:
        """The counts of seconds that are over by ``now``."""
        return self._close(lambda agg: agg["second"] < int(now // 1))

    def drain(self) -> list[dict[str, Any]]:
        return self._close(lambda agg: True)

    def _count(self, event: dict[str, Any], second: int) -> None:
        duration = event["duration_s"]
        timed = duration is not None
        key = (event["stage"], timed)
        agg = self._open.get(key)
        if agg is None:
            agg = self._open[key] = {"second": second, "ts": event["ts"], "count": 0, "num_tokens": 0,
                                     "duration_s": 0.0, "sizes": {}}
        agg["ts"] = event["ts"]
        agg["count"] += 1
        agg["num_tokens"] += event["num_tokens"]
        part = agg["sizes"].setdefault(event["raw_bs"], [0, 0, 0.0])
        part[0] += 1
        part[1] += event["num_tokens"]
        if timed:
            agg["duration_s"] += duration
            part[2] += duration
        self.counted += 1

    def _close(self, ready) -> list[dict[str, Any]]:
        out = []
        for key in [k for k, agg in self._open.items() if ready(agg)]:
            agg = self._open.pop(key)
            stage, timed = key
            out.append({
                "seq": next(self._next_seq), "ts": agg["ts"], "kind": "step_counts", "stage": stage,
                "mode": "graph", "reason": None, "count": agg["count"], "num_tokens": agg["num_tokens"],
                "padded_tokens": 0, "duration_s": agg["duration_s"] if timed else None,
                "batch_sizes": {str(bs): {"count": n, "num_tokens": tokens, "padded_tokens": 0,
                                          "duration_s": seconds if timed else None}
                                for bs, (n, tokens, seconds) in sorted(agg["sizes"].items())},
            })
        return out


class Emitter:
    """Sequence-numbers events and hands them to a sink from a background thread."""

    def __init__(self, sink: Sink, run: dict[str, Any], *, flush_interval_s: float = 0.2,
                 heartbeat_s: float = 5.0, max_batch: int = 20000, graph_sample: int = 1):
        if isinstance(graph_sample, bool) or not isinstance(graph_sample, int) or graph_sample < 1:
            raise ReplayscopeError(f"graph_sample must be an integer >= 1 (1: every graph step), not {graph_sample!r}")
        run = {"wire_version": wire.WIRE_VERSION, **run}
        if graph_sample > 1:
            run["graph_sample"] = graph_sample
        wire.validate_run(run)
        self.run = run
        self.sink = sink
        self.flush_interval_s = flush_interval_s
        self.heartbeat_s = heartbeat_s
        self.max_batch = max_batch
        # Each event is values in a row, added by one extend: seq, ts, kind, fields, timing (``step``
        # puts _SPREAD for the kind and its eight fields in place of the tuple). No container per
        # event outlives the step, so queued steps bring no garbage collections of the heap.
        self._queue: deque = deque()
        self._seq = itertools.count()
        self._waiting: deque = deque()  # converted; its head may wait on a GPU timing
        self.sampler = GraphSampler(graph_sample, self._seq) if graph_sample > 1 else None
        # A sink that takes steps' lines (the events file) gets a step as its line, made from its queued
        # values: no event dict per step, and a string is nothing for the garbage collector to track.
        # Any other sink, or a sampled run, gets dicts.
        self._step_lines = self.sampler is None and getattr(sink, "takes_step_lines", False)
        self._stop = threading.Event()
        self._flush_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._last_write = time.monotonic()
        self.written = 0           # events the sink took
        self.lost = 0              # events the sink raised on: not written anywhere
        self.closed = False

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

    def start(self) -> "Emitter":
        self.sink.open(self.run)
        self._thread = threading.Thread(target=self._loop, name="replayscope-emitter", daemon=True)
        self._thread.start()
        return self

    # -- hot path -----------------------------------------------------------
    def step(self, stage: str, mode: str, raw_bs: int, graph_bs: int | None, num_tokens: int,
             padded_tokens: int, reason: str | None, timing: Any, evidence: str | None = None) -> None:
        """Record one step. ``timing`` is seconds, None (not timed) or a timing object; ``evidence`` says
        what was seen that gave the reason, when the batch alone does not show it."""
        self._queue.extend((next(self._seq), _now(), _SPREAD,
                            stage, mode, raw_bs, graph_bs, num_tokens, padded_tokens, reason, evidence, timing))

    def step_fields(self, fields: tuple, timing: Any) -> None:
        """``step`` with its fields made once by the caller: ``(stage, mode, raw_bs, graph_bs,
        num_tokens, padded_tokens, reason, evidence)``, the same tuple for every step of a kind
        (the runner keeps one per route). The same event as ``step(*fields[:7], timing, fields[7])``,
        without building its fields per step."""
        self._queue.extend((next(self._seq), _now(), "step", fields, timing))

    def emit(self, kind: str, **fields: Any) -> None:
        """Record any other event (phase, capture, degrade, parity, run_end, ...)."""
        self._queue.extend((next(self._seq), _now(), kind, fields, None))

    # -- background ---------------------------------------------------------
    @staticmethod
    def _convert(seq: int, ts: float, kind: Any, fields: Any, duration: Any) -> dict[str, Any]:
        if kind != "step":
            return {"seq": seq, "ts": ts, "kind": kind, **fields}
        stage, mode, raw_bs, graph_bs, num_tokens, padded_tokens, reason, evidence = fields
        event = {"seq": seq, "ts": ts, "kind": "step", "stage": stage, "mode": mode, "raw_bs": raw_bs,
                 "graph_bs": graph_bs, "num_tokens": num_tokens, "padded_tokens": padded_tokens,
                 "reason": reason, "duration_s": duration}
        if evidence is not None:
            event["evidence"] = evidence
        return event

    @staticmethod
    def _line(seq: int, ts: float, kind: Any, fields: Any, duration: Any) -> Any:
        """A step as its line (``replayscope.contract.events_file.step_line``), for a sink that takes lines; any
        other event, or a step with a value JSON cannot write, as its dict (the sink then fails on
        it as on any such event: its batch counted lost)."""
        if kind == "step":
            try:
                return step_line(seq, ts, fields, duration)
            except Exception:  # noqa: BLE001
                pass
        return Emitter._convert(seq, ts, kind, fields, duration)

    def _collect(self, wait_for_gpu: bool, final: bool = False) -> list[Any]:
        """Take events in order, stopping at the first step whose GPU timing is not ready.

        An event whose duration is known (seconds, or None: not timed) is ready as it is
        converted; one with a timing object waits in ``_waiting``, and every later event behind it."""
        ready: list[Any] = []
        sampler = self.sampler
        take = ready.append if sampler is None else (lambda event: ready.extend(sampler.offer(event)))
        convert = self._line if self._step_lines else self._convert
        waiting, queue, max_batch = self._waiting, self._queue, self.max_batch
        pop = queue.popleft
        while len(ready) < max_batch:
            if waiting:                  # its head holds a timing object
                seq, ts, kind, fields, timing = waiting[0]
                if not timing.ready():
                    if not wait_for_gpu:
                        break            # later events wait behind this one, keeping their order
                    timing.wait()
                seconds = timing.seconds()
                timing.release()
                waiting.popleft()
                take(convert(seq, ts, kind, fields, seconds))
            elif queue:
                seq, ts, kind = pop(), pop(), pop()
                if kind is _SPREAD:
                    kind, fields = "step", (pop(), pop(), pop(), pop(), pop(), pop(), pop(), pop())
                else:
                    fields = pop()
                timing = pop()           # None for every kind but a step
                if timing is None or isinstance(timing, (int, float)):
                    take(convert(seq, ts, kind, fields, timing))
                else:
                    waiting.append((seq, ts, kind, fields, timing))
            else:
                break
        if sampler is not None and len(ready) < max_batch:
            ready.extend(sampler.drain() if final and not waiting else sampler.due(time.time()))
        return ready

    def _flush(self, wait_for_gpu: bool = False, final: bool = False) -> int:
        """Hand what is ready to the sink; returns how many events it took. A batch the sink
        raised on is lost (counted in ``lost``, said on stderr), never counted as written."""
        written = 0
        with self._flush_lock:
            while True:
                events = self._collect(wait_for_gpu, final)
                if not events:
                    return written
                try:
                    self.sink.write(events)
                except Exception as error:  # the emitter must never take the run down
                    self.lost += len(events)
                    _warn(f"telemetry sink failed, {len(events)} event{'s' * (len(events) != 1)} not written "
                          f"({self.lost} in all): {error!r}")
                else:
                    written += len(events)
                    self.written += len(events)
                self._last_write = time.monotonic()

    def _loop(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            self._flush()
            if time.monotonic() - self._last_write > self.heartbeat_s:
                self.emit("heartbeat")

    def flush(self) -> None:
        """Write everything queued now (waits for outstanding GPU timings)."""
        self._flush(wait_for_gpu=True)

    def flush_unless_busy(self, timeout_s: float = 0.5, wait_for_gpu: bool = True) -> bool:
        """``flush`` from a signal handler: False, writing nothing, when the flush lock is not
        free within ``timeout_s`` (the code the signal interrupted may hold it). Without
        ``wait_for_gpu`` it writes what is ready and leaves a step whose GPU timing is not (and
        every event after it) to the next flush."""
        if not self._flush_lock.acquire(timeout=timeout_s):
            return False
        self._flush_lock.release()
        self._flush(wait_for_gpu=wait_for_gpu)
        return True

    def close(self, status: str = "finished", error: str | None = None) -> None:
        if self.closed:
            return
        self.emit("run_end", status=status, **({"error": error[:4000]} if error else {}))
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._flush(wait_for_gpu=True, final=True)
        try:
            self.sink.close()
        except Exception as error:      # e.g. the last lines of a file on a full disk
            self.lost += 1
            _warn(f"telemetry sink failed when closing: {error!r}")
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
