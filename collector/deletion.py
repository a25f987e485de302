"""Deleting a run: every row recorded for it, in one transaction.

SQLite's foreign-key enforcement is off (see docs/collector.md), so the cascade is
spelled out here rather than left to ``ON DELETE CASCADE``. A firing alert of the run is
resolved first, so its receivers are told; the outbox keeps its rows (detached from the
alert) until they are delivered.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from collector import tables as t
from collector.alerting.alerts import resolve_run_alerts
from collector.alerting.notifications import Delivery
from collector.store import Store

RUN_TABLES = (t.steps, t.step_counts, t.phases, t.captures, t.degrades, t.parity_checks, t.run_marks,
              t.run_warnings, t.recordings, t.step_rollups, t.batch_rollups, t.alert_events)


def delete_run(store: Store, run_id: str, *, delivery: Delivery | None = None, now: float | None = None) -> bool:
    """Delete ``run_id`` and everything recorded for it; False when there is no such run."""
    now = time.time() if now is None else now
    with store.write() as conn:
        run_pk = conn.execute(sa.select(t.runs.c.id).where(t.runs.c.run_id == run_id)).scalar()
        if run_pk is None:
            return False
        resolve_run_alerts(conn, run_pk, delivery, now)
        for table in RUN_TABLES:
            conn.execute(table.delete().where(table.c.run_pk == run_pk))
        conn.execute(t.runs.delete().where(t.runs.c.id == run_pk))
    return True
