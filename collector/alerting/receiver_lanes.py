"""The notifier's lanes: each receiver sends on its own, so a slow or dead one holds up no one.

A lane is one receiver URL: its due rows in order, one POST at a time, in a thread of its
own (at most ``MAX_LANES`` at once). ``dispatch`` starts a lane for every receiver with
rows due that has none running and is not backing off, and returns at once: the
notifier's tick never waits for a receiver. A lane whose receiver is unreachable, refused
or answers non-2xx backs that receiver off, 1 s doubling to 5 min, on top of each row's own
backoff (``replayscope.collector.alerting.notifications.send_one``), so a dead receiver with many rows
owed gets one attempt per backoff, not one per row.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from replayscope.collector.alerting import notifications
from replayscope.collector.alerting.notifications import Delivery, SendResult
from replayscope.collector.models import outbox as outbox_rows
from replayscope.collector.store import Store

log = logging.getLogger("replayscope.notifications")

MAX_LANES = 8
LANE_BACKOFF_FIRST_S = 1.0
LANE_BACKOFF_MAX_S = 300.0


class ReceiverLanes:
    def __init__(self, store: Store, delivery: Delivery, metrics: Any = None, *,
                 clock: Callable[[], float] = time.time, max_lanes: int = MAX_LANES):
        self.store = store
        self.delivery = delivery
        self.metrics = metrics
        self.clock = clock
        self.max_lanes = max_lanes
        self._lock = threading.Lock()
        self._running: dict[str, threading.Thread] = {}
        self._failures: dict[str, int] = {}          # url -> failed lanes in a row
        self._retry_at: dict[str, float] = {}        # url -> no lane before this
        self.total = SendResult()

    def dispatch(self, now: float | None = None) -> list[str]:
        """Start a lane for each receiver that has rows due and is free; returns their URLs."""
        now = self.clock() if now is None else now
        with self.store.read() as conn:
            groups = notifications.by_receiver(outbox_rows.due(conn, now))
        started = []
        with self._lock:
            for url, rows in groups.items():
                if url in self._running or self._retry_at.get(url, 0.0) > now:
                    continue
                if len(self._running) >= self.max_lanes:
                    break
                lane = threading.Thread(target=self._lane, args=(url, rows, now), daemon=True,
                                        name="replayscope-notify")
                self._running[url] = lane
                started.append(url)
                lane.start()
        return started

    def busy(self) -> list[str]:
        with self._lock:
            return list(self._running)

    def wait(self, timeout_s: float) -> bool:
        """Wait for the running lanes (tests, shutdown); True when none is left."""
        deadline = time.monotonic() + timeout_s
        for lane in list(self._running.values()):
            lane.join(max(0.0, deadline - time.monotonic()))
        return not self.busy()

    def _lane(self, url: str, rows: list[dict], now: float) -> None:
        result = SendResult()
        try:
            result = notifications.send_receiver(self.store, self.delivery, rows, now, clock=self.clock)
        except Exception:        # e.g. the store stopped answering: the rows stay owed
            log.exception("alert notifications: a receiver lane failed")
            result.failed += 1
        finally:
            # A receiver that answered nothing in time is slow, not down: its row waits longer
            # next time (replayscope.collector.alerting.notifications), its lane goes on.
            failed = result.failed - result.unanswered + result.expired
            with self._lock:
                del self._running[url]
                self.total.merge(result)
                if failed:
                    n = self._failures.get(url, 0) + 1
                    self._failures[url] = n
                    self._retry_at[url] = self.clock() + min(LANE_BACKOFF_FIRST_S * 2 ** (n - 1),
                                                             LANE_BACKOFF_MAX_S)
                else:
                    self._failures.pop(url, None)
                    self._retry_at.pop(url, None)
            if self.metrics is not None:
                self.metrics.observe_notifications(result)
