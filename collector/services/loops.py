"""Background services of the collector: each a named loop, started by the app's lifespan.

``Evaluator`` marks runs ``interrupted`` when nothing arrived from them for the heartbeat
timeout and evaluates the alert rules, writing each transition's notifications to the
outbox. ``Notifier`` sends the outbox: a slow or dead receiver holds up only the
notifier, never evaluation, heartbeats or ingest. ``Retention`` expires raw step detail
and makes PostgreSQL partitions ahead. Each tick runs in a worker thread (the store is
synchronous); ``tick(now)`` is callable directly. With several collectors on one store,
every service's tick runs once per period across all of them (``replayscope.collector.services.leader``): the
loop wakes just after each period starts and ticks only when it wins that period.
"""

from __future__ import annotations

import asyncio
import logging
import time

from replayscope.collector.alerting import alerts, notifications
from replayscope.collector.services import leader
from replayscope.collector.models import retention, run_writes
from replayscope.collector.alerting.receiver_lanes import ReceiverLanes
from replayscope.collector.settings import Settings
from replayscope.collector.store import Store

log = logging.getLogger("replayscope.services")


def mark_interrupted_runs(store: Store, now: float, timeout_s: float) -> list[str]:
    """Runs still ``running`` with no event for ``timeout_s`` become ``interrupted``."""
    with store.write() as conn:
        return run_writes.interrupt_stale_runs(conn, now - timeout_s)


class Service:
    """A named background loop; subclasses implement ``tick(now)``. With a ``store``, a
    period's tick runs only in the collector whose turn it is (``replayscope.collector.services.leader``)."""

    name = "service"

    def __init__(self, interval_s: float, store: Store | None = None):
        self.interval_s = interval_s
        self.store = store
        self._task: asyncio.Task | None = None
        self._stop = asyncio.Event()
        self.ticks = 0          # periods this collector ran
        self.skipped = 0        # periods another collector ran (or was running)

    def tick(self, now: float) -> None:
        raise NotImplementedError

    def run_once(self) -> bool:
        """This period's tick if it is this collector's turn; True when it ran."""
        if self.store is None:
            self.tick(time.time())
            return True
        with leader.turn(self.store, self.name, self.interval_s) as mine:
            if mine:
                self.tick(time.time())
        return mine

    def _until_next_period(self) -> float:
        # Just after the next period starts, so every collector tries each period.
        return self.interval_s - time.time() % self.interval_s + min(0.05 * self.interval_s, 0.5)

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if await asyncio.to_thread(self.run_once):
                    self.ticks += 1
                else:
                    self.skipped += 1
            except Exception:   # a bad tick must not end the loop
                log.exception("service %s: tick failed", self.name)
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=self._until_next_period())
            except asyncio.TimeoutError:
                pass

    def start(self) -> None:
        self._stop = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=self.name)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None


class Evaluator(Service):
    """The heartbeat timeout, then alert evaluation (transitions go to the outbox)."""

    name = "evaluator"

    def __init__(self, store: Store, settings: Settings):
        super().__init__(settings.evaluate_every_s, store)
        self.settings = settings
        self.delivery = notifications.Delivery.from_settings(settings)

    def tick(self, now: float) -> None:
        mark_interrupted_runs(self.store, now, self.settings.heartbeat_timeout_s)
        alerts.evaluate_alerts(self.store, now, delivery=self.delivery)


class Notifier(Service):
    """Sends what the outbox owes, each receiver in its lane (``replayscope.collector.alerting.receiver_lanes``):
    retried with backoff until delivered or expired; the tick never waits for a receiver."""

    name = "notifier"

    def __init__(self, store: Store, settings: Settings, metrics=None):
        super().__init__(settings.notify_every_s, store)
        self.delivery = notifications.Delivery.from_settings(settings)
        self.metrics = metrics
        self.lanes = ReceiverLanes(store, self.delivery, metrics)

    def tick(self, now: float) -> None:
        self.lanes.dispatch(now)


class Retention(Service):
    """Raw step detail expires after its retention; partitions are made ahead (PostgreSQL)."""

    name = "retention"

    def __init__(self, store: Store, settings: Settings):
        super().__init__(settings.prune_every_s, store)
        self.policy = retention.Policy.from_settings(settings)

    def tick(self, now: float) -> None:
        retention.run_retention(self.store, self.policy, now)
