"""Where a run's events go: the ``Sink`` protocol and its two sinks, the events file
(``JsonlSink``) and a collector over HTTP (``HttpSink``, with a spool that is an events file).

The ``Emitter`` (``replayscope.runner.emitter``) hands a sink batches of wire events from its flush
thread: ``open(run)`` once at the start, ``write(events)`` per batch, ``close()`` at the end.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Protocol

from replayscope.contract import wire
from replayscope.contract.errors import ReplayscopeError
from replayscope.contract.events_file import EventsFileWriter
from replayscope.contract.http import HttpError, post_json
from replayscope.contract.spool import Spool


class Sink(Protocol):
    def open(self, run: dict[str, Any]) -> None: ...
    def write(self, events: list[dict[str, Any]]) -> None: ...
    def close(self) -> None: ...


# A sink that can be made again in another process gives its ``spec()`` (plain values, marshalable):
# the emitter's writer process (``replayscope.runner.event_writer``) makes it with ``sink_from_spec``.
# Any other sink (None, or no ``spec``) is written to by the emitter's own thread.


def sink_from_spec(spec: dict[str, Any]) -> "Sink":
    """The sink a ``spec()`` describes, not opened."""
    settings = dict(spec)
    kind = settings.pop("kind")
    if kind == "events_file":
        return JsonlSink(**settings)
    if kind == "http":
        return HttpSink(**settings)
    raise ReplayscopeError(f"no sink of kind {kind!r}")


HTTP_BATCH_EVENTS = 5000   # events per POST: large batches amortise the request and transaction
MAX_BACKOFF_S = 5.0        # the longest wait between two attempts while the collector does not answer


def _warn(message: str) -> None:
    print(f"replayscope: {message}", file=sys.stderr, flush=True)


class JsonlSink:
    """The run as an events file (``replayscope.contract.events_file``): the run record, then one event per line.
    ``write`` takes steps' lines beside event dicts (``replayscope.contract.events_file.step_line``): the
    emitter makes a step's line from its queued values, no event dict made."""

    takes_step_lines = True

    def __init__(self, path: str):
        self.path = path
        self._writer: EventsFileWriter | None = None

    def spec(self) -> dict[str, Any] | None:
        """What makes this sink again in another process (``sink_from_spec``); None for a subclass."""
        if type(self) is not JsonlSink or self._writer is not None:
            return None
        return {"kind": "events_file", "path": str(self.path)}

    def open(self, run: dict[str, Any]) -> None:
        try:
            self._writer = EventsFileWriter(self.path, run)
        except OSError as error:         # before the run starts: nothing is lost yet
            raise ReplayscopeError(f"cannot write the events file {self.path}: {error.strerror or error}") from None

    def write(self, events: list[Any]) -> None:
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
      (``replayscope.contract.spool``: an events file) and are re-sent before newer events once it answers.
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
        self._spooled_elsewhere = 0   # what the writer process left in the spool (``written_elsewhere``)

    def spec(self) -> dict[str, Any] | None:
        """What makes this sink again in another process (``sink_from_spec``), its token with it:
        never to be put on a command line or in an environment. None for a subclass or once opened."""
        if type(self) is not HttpSink or self.run is not None:
            return None
        return {"kind": "http", "url": self.base, "token": self.token, "spool_path": self.spool_path,
                "batch_size": self.batch_size, "retries": self.retries, "backoff_s": self.backoff_s,
                "timeout_s": self.timeout_s, "drain_timeout_s": self.drain_timeout_s}

    def written_elsewhere(self, spooled: int, spool_path: str | None) -> None:
        """What the writer process that wrote this sink's run reported at its end: events left in
        the spool, and the spool's path (``spooled``, ``spool_path`` then read as if written here)."""
        self._spooled_elsewhere, self.spool_path = spooled, spool_path

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
        return self._spool.count if self._spool is not None else self._spooled_elsewhere

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
