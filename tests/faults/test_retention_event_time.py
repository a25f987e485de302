"""Retention goes by event time, and a resend after expiry never counts twice, on SQLite and
PostgreSQL. The audit: a run started 1 day ago whose steps are 15-20 days old kept them on
SQLite; on PostgreSQL their partitions were dropped without marking the run, so a resend of
the same events doubled its totals (720 -> 1440); and a 30-day-old run with only recent
steps was flagged "detail expired" though nothing went."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from replayscope.collector.models import queries, retention
from replayscope.collector.ingest import ingest_events, ingest_run
from replayscope.collector.store import Store
from replayscope.collector.tables import runs, steps
from tests.postgres import temporary_database

DAY = 86400.0
NOW = 1_800_000_000.0
POLICY = retention.Policy(raw_s=14 * DAY, second_s=7 * DAY)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    if request.param == "sqlite":
        s = Store.open(f"sqlite:///{tmp_path}/r.db", upgrade=True)
        yield s
        s.dispose()
        return
    with temporary_database("retention fault tests") as url:
        s = Store.open(url, upgrade=True)
        yield s
        s.dispose()


def record(run_id: str, started_at: float) -> dict:
    return {"run_id": run_id, "name": run_id, "source": "vllm-log", "started_at": started_at, "backend": "cuda",
            "model": "m", "device": "H200"}


def old_steps(n: int = 720) -> list[dict]:
    """``n`` steps spread over days 20 to 15 before NOW (a log's steps imported with a late start)."""
    span = 5 * DAY
    return [{"seq": i, "ts": NOW - 20 * DAY + i * span / n, "kind": "step", "stage": "decode",
             "mode": ("graph", "eager")[i % 2], "raw_bs": 4, "graph_bs": 4 if i % 2 == 0 else None, "num_tokens": 4,
             "padded_tokens": 0, "reason": None if i % 2 == 0 else "batch_too_large", "duration_s": 0.01}
            for i in range(n)]


def raw_rows(store, run_id: str) -> int:
    with store.read() as conn:
        pk = conn.execute(sa.select(runs.c.id).where(runs.c.run_id == run_id)).scalar_one()
        return conn.execute(sa.select(sa.func.count()).select_from(steps).where(steps.c.run_pk == pk)).scalar_one()


def test_old_steps_of_a_recently_started_run_expire_and_a_resend_counts_once(store):
    ingest_run(store, record("late-start", NOW - DAY))
    ingest_events(store, "late-start", old_steps())
    assert queries.run_summary(store, "late-start")["steps"] == 720
    retention.prune(store, POLICY, NOW)
    assert raw_rows(store, "late-start") == 0, "its raw steps were older than the retention"
    summary = queries.run_summary(store, "late-start")
    assert summary["step_detail"]["raw_expired_before"] == retention.cut_for(NOW, POLICY.raw_s)
    assert summary["steps"] == 720, "rollups kept for good"
    again = ingest_events(store, "late-start", old_steps())      # the same events, resent after expiry
    assert (again.accepted, again.duplicates) == (0, 720)
    assert queries.run_summary(store, "late-start")["steps"] == 720, "never counted twice"
    assert raw_rows(store, "late-start") == 0


def test_an_old_run_with_only_recent_steps_keeps_them_and_is_not_flagged(store):
    ingest_run(store, record("old-start", NOW - 30 * DAY))
    recent = [{**e, "ts": NOW - 3600 + i} for i, e in enumerate(old_steps(100))]
    ingest_events(store, "old-start", recent)
    report = retention.prune(store, POLICY, NOW)
    assert raw_rows(store, "old-start") == 100
    assert queries.run_summary(store, "old-start")["step_detail"]["raw_expired_before"] is None
    assert report.runs_marked == 0
