"""Telemetry emitter: events leave the step loop through a queue and a background thread.

``Emitter.step`` appends one tuple to a deque and returns (well under 2 µs); it never
blocks and never touches the GPU. A step's duration is seconds, None (not timed), or a
*timing* object (``ready()``, ``wait()``, ``seconds()``, ``release()``), e.g. a pair of CUDA
events (``runner.timing``): the flush thread reads it only once ``ready()`` says the GPU got
there, so no synchronisation is added. Sinks turn batches of wire events into JSON lines or HTTP posts.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
from collections import deque
from typing import Any, Protocol

from runner import wire
from runner.errors import ReplayscopeError
from runner.http import HttpError, post_json


class Sink(Protocol):
    def open(self, run: dict[str, Any]) -> None: ...
    def write(self, events: list[dict[str, Any]]) -> None: ...
    def close(self) -> None: ...


HTTP_BATCH_EVENTS = 5000   # events per POST: large batches amortise the request and transaction


def _warn(message: str) -> None:
    print(f"replayscope: {message}", file=sys.stderr, flush=True)


class JsonlSink:
    """The JSON-lines form of a run: the run record first, then one event per line."""

    def __init__(self, path: str):
        self.path = path
        self._file = None

    def open(self, run: dict[str, Any]) -> None:
        self._file = open(self.path, "w", encoding="utf-8")
        self._file.write(json.dumps({"kind": "run", **run}) + "\n")
        self._file.flush()

    def write(self, events: list[dict[str, Any]]) -> None:
        self._file.write("".join(json.dumps(e) + "\n" for e in events))
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class HttpSink:
    """Posts batches to a collector; retries with backoff, spools to a file when it is down.

    The spool is itself a JSON-lines events file (run record first). Whenever the
    collector answers again, the spool is re-sent before new events; the collector
    ignores repeated ``seq`` numbers, so a batch sent twice is stored once.
    """

    def __init__(self, url: str, *, token: str | None = None, spool_path: str | None = None,
                 batch_size: int = HTTP_BATCH_EVENTS, retries: int = 3, backoff_s: float = 0.2,
                 timeout_s: float = 10.0):
        self.base = url.rstrip("/")
        self.token = token
        self.spool_path = spool_path
        self.batch_size = batch_size
        self.retries = retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.run: dict[str, Any] | None = None
        self._run_posted = False
        self._spooled = 0
        self.sent = 0
        self.rejected = 0

    # -- Sink ---------------------------------------------------------------
    def open(self, run: dict[str, Any]) -> None:
        self.run = run
        if self.spool_path is None:
            self.spool_path = f"replayscope-spool-{run['run_id']}.jsonl"
        if os.path.exists(self.spool_path):
            os.remove(self.spool_path)  # a spool from an earlier run with this id is not ours
        self._try_post_run()

    def write(self, events: list[dict[str, Any]]) -> None:
        if self._spooled and not self._drain_spool():
            self._spool(events)
            return
        if not self._run_posted and not self._try_post_run():
            self._spool(events)
            return
        for start in range(0, len(events), self.batch_size):
            chunk = events[start:start + self.batch_size]
            if not self._post_events(chunk):
                self._spool(events[start:])
                return

    def close(self) -> None:
        if self._spooled and not self._drain_spool():
            _warn(f"collector unreachable: {self._spooled} events kept in {self.spool_path}; "
                  f"re-send them with `replayscope import events {self.spool_path}`")

    @property
    def spooled(self) -> int:
        return self._spooled

    # -- inside -------------------------------------------------------------
    def _with_retries(self, method, *args) -> bool:
        delay = self.backoff_s
        for attempt in range(self.retries):
            try:
                method(*args)
                return True
            except HttpError as error:
                if not error.retryable:
                    raise
                if attempt + 1 < self.retries:
                    time.sleep(delay)
                    delay *= 2
        return False

    def _post_run_once(self) -> None:
        post_json(f"{self.base}/v1/runs", self.run, token=self.token, timeout=self.timeout_s)

    def _try_post_run(self) -> bool:
        try:
            self._run_posted = self._with_retries(self._post_run_once)
        except HttpError as error:
            _warn(f"collector rejected the run record: {error}")
            self._run_posted = False
        return self._run_posted

    def _post_events_once(self, chunk: list[dict[str, Any]]) -> None:
        url = f"{self.base}/v1/runs/{self.run['run_id']}/events"
        post_json(url, {"events": chunk}, token=self.token, timeout=self.timeout_s)

    def _post_events(self, chunk: list[dict[str, Any]]) -> bool:
        try:
            ok = self._with_retries(self._post_events_once, chunk)
        except HttpError as error:
            # Not retryable (4xx): resending cannot help. Keep them visible, drop from the stream.
            self.rejected += len(chunk)
            _warn(f"collector rejected {len(chunk)} events: {error}")
            return True
        if ok:
            self.sent += len(chunk)
        return ok

    def _spool(self, events: list[dict[str, Any]]) -> None:
        new_file = not os.path.exists(self.spool_path) or os.path.getsize(self.spool_path) == 0
        with open(self.spool_path, "a", encoding="utf-8") as spool:
            if new_file:
                spool.write(json.dumps({"kind": "run", **self.run}) + "\n")
            spool.write("".join(json.dumps(e) + "\n" for e in events))
        self._spooled += len(events)

    def _drain_spool(self) -> bool:
        """Re-send the spool; True when it is empty afterwards."""
        if not self._run_posted and not self._try_post_run():
            return False
        with open(self.spool_path, encoding="utf-8") as spool:
            lines = spool.read().splitlines()
        events = [json.loads(line) for line in lines[1:] if line]
        for start in range(0, len(events), self.batch_size):
            if not self._post_events(events[start:start + self.batch_size]):
                # Keep what is left, run record first, for the next attempt.
                with open(self.spool_path, "w", encoding="utf-8") as spool:
                    spool.write(lines[0] + "\n")
                    spool.write("".join(json.dumps(e) + "\n" for e in events[start:]))
                self._spooled = len(events) - start
                return False
        os.remove(self.spool_path)
        self._spooled = 0
        return True


class Emitter:
    """Sequence-numbers events and hands them to a sink from a background thread."""

    def __init__(self, sink: Sink, run: dict[str, Any], *, flush_interval_s: float = 0.2,
                 heartbeat_s: float = 5.0, max_batch: int = 20000):
        run = {"wire_version": wire.WIRE_VERSION, **run}
        wire.validate_run(run)
        self.run = run
        self.sink = sink
        self.flush_interval_s = flush_interval_s
        self.heartbeat_s = heartbeat_s
        self.max_batch = max_batch
        self._queue: deque = deque()
        self._seq = itertools.count()
        self._waiting: deque = deque()  # converted; its head may wait on a GPU timing
        self._stop = threading.Event()
        self._flush_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._last_write = time.monotonic()
        self.written = 0
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
        self._queue.append((next(self._seq), time.time(), "step",
                            (stage, mode, raw_bs, graph_bs, num_tokens, padded_tokens, reason, evidence),
                            timing))

    def emit(self, kind: str, **fields: Any) -> None:
        """Record any other event (phase, capture, degrade, parity, run_end, ...)."""
        self._queue.append((next(self._seq), time.time(), kind, fields, None))

    # -- background ---------------------------------------------------------
    @staticmethod
    def _convert(item) -> dict[str, Any]:
        seq, ts, kind, fields, timing = item
        if kind != "step":
            return {"seq": seq, "ts": ts, "kind": kind, **fields}
        stage, mode, raw_bs, graph_bs, num_tokens, padded_tokens, reason, evidence = fields
        event = {"seq": seq, "ts": ts, "kind": "step", "stage": stage, "mode": mode, "raw_bs": raw_bs,
                 "graph_bs": graph_bs, "num_tokens": num_tokens, "padded_tokens": padded_tokens,
                 "reason": reason, "duration_s": timing}
        if evidence is not None:
            event["evidence"] = evidence
        return event

    @staticmethod
    def _timing_of(event: dict[str, Any]) -> Any:
        """The step's timing object, or None when its duration is already a number (or unknown)."""
        timing = event.get("duration_s")
        if timing is None or type(timing) is float or event["kind"] != "step" or isinstance(timing, (int, float)):
            return None
        return timing

    def _collect(self, wait_for_gpu: bool) -> list[dict[str, Any]]:
        """Take events in order, stopping at the first step whose GPU timing is not ready."""
        ready: list[dict[str, Any]] = []
        while len(ready) < self.max_batch:
            if self._waiting:
                event = self._waiting[0]
            elif self._queue:
                event = self._convert(self._queue.popleft())
                self._waiting.append(event)
            else:
                break
            timing = self._timing_of(event)
            if timing is not None:
                if not timing.ready():
                    if not wait_for_gpu:
                        break  # later events wait behind this one, keeping their order
                    timing.wait()
                event["duration_s"] = timing.seconds()
                timing.release()
            ready.append(self._waiting.popleft())
        return ready

    def _flush(self, wait_for_gpu: bool = False) -> int:
        written = 0
        with self._flush_lock:
            while True:
                events = self._collect(wait_for_gpu)
                if not events:
                    return written
                try:
                    self.sink.write(events)
                except Exception as error:  # the emitter must never take the run down
                    _warn(f"telemetry sink failed: {error!r}")
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

    def close(self, status: str = "finished", error: str | None = None) -> None:
        if self.closed:
            return
        self.emit("run_end", status=status, **({"error": error[:4000]} if error else {}))
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._flush(wait_for_gpu=True)
        self.sink.close()
        self.closed = True


def open_emitter(target: str, *, name: str, model: str, backend: str, device: str = "unknown",
                 config: dict[str, Any] | None = None, token: str | None = None, run_id: str | None = None,
                 source: str = "library", torch_version: str | None = None) -> Emitter:
    """A started emitter for one run, to a collector URL (http://...) or a JSON-lines file.

    Usable from any process; the same guarantees as the runner's: ``step`` never blocks
    and never synchronises the GPU. Call ``close(status)`` at the end of the run.
    """
    import uuid

    if target.startswith(("http://", "https://")):
        sink: Sink = HttpSink(target, token=token)
    else:
        sink = JsonlSink(target)
    run = {"run_id": run_id or uuid.uuid4().hex[:16], "name": name, "source": source,
           "started_at": time.time(), "backend": backend, "model": model, "device": device,
           "torch_version": torch_version, "config": config or {}}
    return Emitter(sink, run).start()
