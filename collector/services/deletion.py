"""Deleting a run: every row recorded for it, in one transaction.

SQLite's foreign-key enforcement is off (see docs/collector.md), so the cascade is
spelled out (``replayscope.collector.models.run_writes.delete_run_rows``) rather than left to
``ON DELETE CASCADE``. A firing alert of the run is resolved first, so its receivers are
told; the outbox keeps its rows (detached from the alert) until they are delivered.
"""

from __future__ import annotations

import time

from replayscope.collector.alerting.alerts import resolve_run_alerts
from replayscope.collector.alerting.notifications import Delivery
from replayscope.collector.models import run_writes
from replayscope.collector.models.events import run_pk_of
from replayscope.collector.store import Store


def delete_run(store: Store, run_id: str, *, delivery: Delivery | None = None, now: float | None = None) -> bool:
    """Delete ``run_id`` and everything recorded for it; False when there is no such run."""
    now = time.time() if now is None else now
    with store.write() as conn:
        run_pk = run_pk_of(conn, run_id)
        if run_pk is None:
            return False
        resolve_run_alerts(conn, run_pk, delivery, now)
        run_writes.delete_run_rows(conn, run_pk)
    return True
