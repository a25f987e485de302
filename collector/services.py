"""Background services of the collector: each a named loop, started by the app's lifespan.

``Evaluator`` evaluates the alert rules, posts the webhooks, and marks runs
``interrupted`` when nothing arrived from them for the heartbeat timeout. Each tick runs
in a worker thread (the store is synchronous); ``tick(now)`` is callable directly.
"""

from __future__ import annotations

import asyncio
import logging
import time

import sqlalchemy as sa

from collector import alerts
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
    """Alert evaluation, webhooks, and the heartbeat timeout."""

    name = "evaluator"

    def __init__(self, store: Store, settings: Settings):
        super().__init__(settings.evaluate_every_s)
        self.store = store
        self.settings = settings

    def tick(self, now: float) -> None:
        mark_interrupted_runs(self.store, now, self.settings.heartbeat_timeout_s)
        transitions = alerts.evaluate_alerts(self.store, now)
        for url, ok in alerts.notify(transitions, self.settings.alert_webhook,
                                     retries=self.settings.webhook_retries,
                                     timeout_s=self.settings.webhook_timeout_s):
            if not ok:
                log.warning("alert webhook %s: not delivered after retries", url)
