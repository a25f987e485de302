"""Background services of the collector: each a named loop, started by the app's lifespan.

``Evaluator`` marks runs ``interrupted`` when nothing arrived from them for the heartbeat
timeout and evaluates the alert rules, writing each transition's notifications to the
outbox. ``Notifier`` sends the outbox: a slow or dead receiver holds up only the
notifier, never evaluation, heartbeats or ingest. Each tick runs in a worker thread
(the store is synchronous); ``tick(now)`` is callable directly.
"""

from __future__ import annotations

import asyncio
import logging
import time

import sqlalchemy as sa

from collector import alerts, notifications
from collector.settings import Settings
from collector.store import Store
from collector.tables import runs

log = logging.getLogger("replayscope.services")


def mark_interrupted_runs(store: Store, now: float, timeout_s: float) -> list[str]:
    """Runs still ``running`` with no event for ``timeout_s`` become ``interrupted``."""
    with store.write() as conn:
        stale = conn.execute(sa.select(runs.c.id, runs.c.run_id, runs.c.last_event_ts)
                             .where(runs.c.status == "running", runs.c.last_seen_at < now - timeout_s)).all()
        for row in stale:
            conn.execute(runs.update().where(runs.c.id == row.id)
                         .values(status="interrupted", ended_at=row.last_event_ts))
    return [row.run_id for row in stale]


class Service:
    """A named background loop; subclasses implement ``tick(now)``."""

    name = "service"

    def __init__(self, interval_s: float):
        self.interval_s = interval_s
        self._task: asyncio.Task | None = None
        self._stop = asyncio.Event()
        self.ticks = 0

    def tick(self, now: float) -> None:
        raise NotImplementedError

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                await asyncio.to_thread(self.tick, time.time())
                self.ticks += 1
            except Exception:   # a bad tick must not end the loop
                log.exception("service %s: tick failed", self.name)
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=self.interval_s)
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
        super().__init__(settings.evaluate_every_s)
        self.store = store
        self.settings = settings
        self.delivery = notifications.Delivery.from_settings(settings)

    def tick(self, now: float) -> None:
        mark_interrupted_runs(self.store, now, self.settings.heartbeat_timeout_s)
        alerts.evaluate_alerts(self.store, now, delivery=self.delivery)


class Notifier(Service):
    """Sends what the outbox owes: retried with backoff until delivered or expired."""

    name = "notifier"

    def __init__(self, store: Store, settings: Settings, metrics=None):
        super().__init__(settings.notify_every_s)
        self.store = store
        self.delivery = notifications.Delivery.from_settings(settings)
        self.metrics = metrics

    def tick(self, now: float) -> None:
        notifications.send_due(self.store, self.delivery, now, metrics=self.metrics)
