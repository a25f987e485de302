"""Telemetry emitter: events leave the step loop through a queue and a background thread.

``Emitter.step`` appends one tuple to a deque and returns (well under 2 µs); it never
blocks and never touches the GPU. A step's duration is seconds, None (not timed), or a
*timing* object (``ready()``, ``wait()``, ``seconds()``, ``release()``), e.g. a pair of CUDA
events (``runner.timing``): the flush thread reads it only once ``ready()`` says the GPU got
there, so no synchronisation is added. Sinks turn batches of wire events into JSON lines or HTTP posts.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import sys
import threading
import time
from collections import deque
from typing import Any, Iterator, Protocol

from runner import wire
from runner.errors import ReplayscopeError
from runner.events_file import EventsFileWriter
from runner.http import HttpError, post_json
from runner.spool import Spool


class Sink(Protocol):
    def open(self, run: dict[str, Any]) -> None: ...
    def write(self, events: list[dict[str, Any]]) -> None: ...
    def close(self) -> None: ...


HTTP_BATCH_EVENTS = 5000   # events per POST: large batches amortise the request and transaction
MAX_BACKOFF_S = 5.0        # the longest wait between two attempts while the collector does not answer


def _warn(message: str) -> None:
    print(f"replayscope: {message}", file=sys.stderr, flush=True)


class JsonlSink:
    """The run as an events file (``runner.events_file``): the run record, then one event per line."""

    def __init__(self, path: str):
        self.path = path
        self._writer: EventsFileWriter | None = None

    def open(self, run: dict[str, Any]) -> None:
        try:
            self._writer = EventsFileWriter(self.path, run)
        except OSError as error:         # before the run starts: nothing is lost yet
            raise ReplayscopeError(f"cannot write the events file {self.path}: {error.strerror or error}") from None

    def write(self, events: list[dict[str, Any]]) -> None:
        self._writer.write(events)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class HttpSink:
    """Posts batches to a collector and never silently loses an event.

    - ``open`` sends nothing (it runs in the program's thread, at its start); the first
      ``write``, on the emitter's thread, posts the run record and then the events. A run
      with no events yet appears with the emitter's first heartbeat.
    - An event the wire contract refuses is not sent: a ``warning`` event (same seq, code
      ``rejected_event``) says which and why, so the run records the loss.
    - A batch the collector refuses (4xx) is split until the offending event is isolated
      (the collector names it: ``index``); that event becomes such a warning, the rest is stored.
    - When the collector is down, answers 5xx or refuses the token, events go to the spool
      (``runner.spool``: an events file) and are re-sent before newer events once it answers.
      After a failed attempt the sink waits before the next one (``backoff_s``, doubling up
      to ``MAX_BACKOFF_S``); meanwhile a write only appends to the spool, so an outage costs
      the flush thread no retries and no re-reading of the spool.
    - At the end of the run the sink keeps trying for ``drain_timeout_s`` (no request
      outlives it) before leaving the undelivered events in the spool for ``replayscope
      import events``, and says so on stderr.
    The collector ignores repeated ``seq`` numbers, so anything sent twice is stored once.
    """

    def __init__(self, url: str, *, token: str | None = None, spool_path: str | None = None,
                 batch_size: int = HTTP_BATCH_EVENTS, retries: int = 3, backoff_s: float = 0.2,
                 timeout_s: float = 10.0, drain_timeout_s: float = 60.0):
        self.base = url.rstrip("/")
        self.token = token
        self.spool_path = spool_path
        self.batch_size = batch_size
        self.retries = retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.drain_timeout_s = drain_timeout_s
        self.run: dict[str, Any] | None = None
        self._run_posted = False
        self._spool: Spool | None = None
        self._retry_at = 0.0       # monotonic time before which nothing is posted (the last attempt failed)
        self._delay = backoff_s    # the wait after the next failed attempt
        self._deadline: float | None = None   # while close() waits: no request or retry goes past it
        self._told_refused = False
        self._refusing = False     # the latest attempt was refused for its token, not unanswered
        self.sent = 0
        self.rejected = 0          # events replaced by a warning (the wire contract or the collector refused them)

    # -- Sink ---------------------------------------------------------------
    def open(self, run: dict[str, Any]) -> None:
        self.run = run
        if self.spool_path is None:
            self.spool_path = f"replayscope-spool-{run['run_id']}.jsonl"
        self._spool = Spool(self.spool_path, run)
        self._spool.clear()        # a spool from an earlier run with this id is not ours
        # Nothing is sent here: open() runs in the caller's thread (the program's start), and a
        # collector that is down or hung must not hold it up. The first write, on the emitter's
        # thread, posts the run record before its events.

    def update_run(self, run: dict[str, Any]) -> None:
        """A newer record of the same run (an importer that learned more): posted again with
        the next write, and the spool's copy is replaced, so what is left for ``replayscope
        import events`` is the newer one too."""
        self.run = run
        self._run_posted = False
        if self._spool is not None:
            self._spool.set_run(run)

    def write(self, events: list[dict[str, Any]]) -> None:
        events = [self._checked(e) for e in events]
        if time.monotonic() < self._retry_at:
            self._spool.append(events)          # backing off: the spool keeps them, in order
            return
        undelivered = events
        if self._drain_spool() and (self._run_posted or self._try_post_run()):
            undelivered = self._send(events)
        if undelivered:
            self._spool.append(undelivered)
        self._attempted(not undelivered)

    def close(self) -> None:
        """Send what is spooled; while the collector does not answer, keep trying for
        ``drain_timeout_s`` (Ctrl-C or SIGTERM stops waiting), then say where the events are."""
        if not self.spooled:
            return
        self._deadline = time.monotonic() + self.drain_timeout_s
        told = False
        try:
            while not self._refusing:           # a refused token does not fix itself while we wait
                wait = max(0.0, self._retry_at - time.monotonic())
                if time.monotonic() + wait >= self._deadline:
                    break
                if wait:
                    if not told:
                        _warn(f"collector unreachable: {self._spool.count} events not yet sent; retrying for up "
                              f"to {self.drain_timeout_s:.0f}s (Ctrl-C leaves them in {self.spool_path})")
                        told = True
                    time.sleep(wait)
                delivered = self._drain_spool()
                self._attempted(delivered)
                if delivered:
                    break
        except KeyboardInterrupt:
            pass
        finally:
            self._deadline = None
        if not self._spool.count:
            return
        self._spool.compact()
        if self._refusing:
            _warn(f"the collector refused the token: {self._spool.count} events kept in {self.spool_path}; re-send "
                  f"them with `replayscope import events {self.spool_path} --collector {self.base} --token TOKEN`")
        else:
            _warn(f"collector unreachable: {self._spool.count} events kept in {self.spool_path}; "
                  f"re-send them with `replayscope import events {self.spool_path}`")

    @property
    def spooled(self) -> int:
        return self._spool.count if self._spool is not None else 0

    # -- inside -------------------------------------------------------------
    def _attempted(self, delivered: bool) -> None:
        """After an attempt: back to posting at once, or wait longer before the next one."""
        if delivered:
            self._retry_at, self._delay = 0.0, self.backoff_s
        else:
            self._retry_at = time.monotonic() + self._delay
            self._delay = min(self._delay * 2, MAX_BACKOFF_S)

    def _timeout(self) -> float:
        if self._deadline is None:
            return self.timeout_s
        return max(0.05, min(self.timeout_s, self._deadline - time.monotonic()))

    def _checked(self, event: dict[str, Any]) -> dict[str, Any]:
        """The event, or the warning that stands for it when the wire contract refuses it."""
        try:
            wire.validate_event(event)
            return event
        except wire.WireError as error:
            return self._warning_for(event, str(error), "the wire contract")

    def _warning_for(self, event: Any, reason: str, who: str) -> dict[str, Any]:
        self.rejected += 1
        seq = event.get("seq") if isinstance(event, dict) else None
        ts = event.get("ts") if isinstance(event, dict) else None
        kind = event.get("kind") if isinstance(event, dict) else None
        if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not 0 <= ts <= wire.MAX_TIMESTAMP:
            ts = time.time()
        message = f"event {seq} ({kind}) was not stored: {who} refused it: {reason}"
        _warn(message)
        return {"seq": seq, "ts": ts, "kind": "warning", "code": "rejected_event", "message": message[:4000]}

    def _with_retries(self, method, *args) -> bool:
        delay = self.backoff_s
        for attempt in range(self.retries):
            try:
                method(*args)
                return True
            except HttpError as error:
                if not error.retryable:
                    raise
                if attempt + 1 == self.retries or (
                        self._deadline is not None and time.monotonic() + delay >= self._deadline):
                    break
                time.sleep(delay)
                delay *= 2
        return False

    def _post_run_once(self) -> None:
        post_json(f"{self.base}/v1/runs", self.run, token=self.token, timeout=self._timeout())

    def _try_post_run(self) -> bool:
        try:
            self._run_posted = self._with_retries(self._post_run_once)
            self._refusing = False
        except HttpError as error:
            self._refused(f"the collector refused the run record: {error}")
            self._run_posted = False
        return self._run_posted

    def _refused(self, message: str) -> None:
        self._refusing = True
        if not self._told_refused:      # once: every later write would say the same
            _warn(f"{message}; events are kept in {self.spool_path}")
            self._told_refused = True

    def _post_events_once(self, chunk: list[dict[str, Any]]) -> None:
        url = f"{self.base}/v1/runs/{self.run['run_id']}/events"
        post_json(url, {"events": chunk}, token=self.token, timeout=self._timeout())

    def _send(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Post ``events`` in batches; returns what could not be delivered yet (to spool)."""
        for start in range(0, len(events), self.batch_size):
            left = self._post_batch(events[start:start + self.batch_size])
            if left:
                return left + events[start + self.batch_size:]
        return []

    def _post_batch(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Post one batch, isolating events the collector refuses; returns the undelivered rest."""
        queue = [batch]
        reposted_run = False
        while queue:
            part = queue.pop(0)
            try:
                if not self._with_retries(self._post_events_once, part):
                    self._refusing = False
                    return [e for p in [part] + queue for e in p]          # down or 5xx: spool
                self.sent += len(part)
                self._refusing = False
                continue
            except HttpError as error:
                refused = error
            if refused.status in (401, 403):
                self._refused(f"the collector refused the token: {refused}")
                return [e for p in [part] + queue for e in p]
            if refused.status == 404 and not reposted_run:                  # the run is not there (a wiped store)
                reposted_run = True
                if self._try_post_run():
                    queue.insert(0, part)
                    continue
                return [e for p in [part] + queue for e in p]
            queue[:0] = self._isolate(part, refused)
        return []

    def _isolate(self, part: list[dict[str, Any]], error: HttpError) -> list[list[dict[str, Any]]]:
        """What to post instead of a refused ``part``: the events before the one the
        collector names, a warning in its place, the events after; or two halves."""
        payload = error.payload if isinstance(error.payload, dict) else {}
        index = payload.get("index")
        if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(part):
            bad = part[index]
            replacement = [] if bad.get("kind") == "warning" and bad.get("code") == "rejected_event" else \
                [self._warning_for(bad, error.detail, "the collector")]
            return [p for p in (part[:index], replacement, part[index + 1:]) if p]
        if len(part) > 1:
            half = len(part) // 2
            return [part[:half], part[half:]]
        bad = part[0]
        if bad.get("kind") == "warning" and bad.get("code") == "rejected_event":
            _warn(f"the collector refused a warning too; dropped: {bad.get('message')}")
            return []
        return [[self._warning_for(bad, error.detail, "the collector")]]

    def _drain_spool(self) -> bool:
        """Send the spool, oldest first, a batch at a time; True once it is empty."""
        if not self.spooled:
            return True
        if not self._run_posted and not self._try_post_run():
            return False
        while self._spool.count:
            batch = self._spool.front(self.batch_size)
            if not batch:
                _warn(f"{self._spool.count} spooled events are no longer in {self.spool_path} (removed?)")
                self._spool.clear()
                break
            undelivered = self._post_batch(batch)
            if undelivered:
                if undelivered != batch:                 # partly delivered: keep only the rest
                    self._spool.replace_front(undelivered)
                return False
            self._spool.delivered(len(batch))
        return True


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
        self._queue: deque = deque()
        self._seq = itertools.count()
        self._waiting: deque = deque()  # converted; its head may wait on a GPU timing
        self.sampler = GraphSampler(graph_sample, self._seq) if graph_sample > 1 else None
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
        if timing is None or isinstance(timing, (int, float)) or event["kind"] != "step":
            return None
        return timing

    def _collect(self, wait_for_gpu: bool, final: bool = False) -> list[dict[str, Any]]:
        """Take events in order, stopping at the first step whose GPU timing is not ready."""
        ready: list[dict[str, Any]] = []
        sampler = self.sampler
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
            if sampler is None:
                ready.append(self._waiting.popleft())
            else:
                ready.extend(sampler.offer(self._waiting.popleft()))
        if sampler is not None and len(ready) < self.max_batch:
            ready.extend(sampler.drain() if final and not self._waiting else sampler.due(time.time()))
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
    so an ``Emitter`` block ends its run ``interrupted`` instead of dying without run_end."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt("SIGTERM")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
