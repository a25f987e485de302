"""Retention on SQLite and PostgreSQL: old raw steps and 1-second rollups go, everything a
page or an alert reads stays, resends of pruned events never count twice, and ingest keeps
going while a prune runs."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from tests.stores import partitions
from replayscope.collector.models import queries, retention
from replayscope.collector.ingest import ingest_events, ingest_run
from replayscope.collector.store import Store
from replayscope.collector.tables import runs, step_counts, step_rollups, steps
from tests.waiting import wait_until

from .conftest import postgresql_only, run_record, step

DAY = 86400.0
NOW = 1_800_000_000.0                 # 2027-01-15: a fixed "now" for every prune
POLICY = retention.Policy(raw_s=14 * DAY, second_s=7 * DAY)


def startup(seq0: int, t0: float) -> list[dict]:
    return [{"seq": seq0, "ts": t0, "kind": "phase", "phase": "load_weights", "duration_s": 2.0},
            {"seq": seq0 + 1, "ts": t0 + 1, "kind": "capture", "graph_bs": 4, "stage": "decode",
             "duration_s": 0.3, "pool_bytes": 1 << 20, "pool_delta_bytes": 1 << 20, "status": "ok"}]


def run_events(t0: float, n: int) -> list[dict]:
    """A run's startup, n steps over a few minutes (every mode), some sampled graph counts."""
    events = startup(0, t0)
    for i in range(n):
        mode = ("graph", "graph", "padded", "eager")[i % 4]
        events.append(step(10 + i, t0 + 5 + i * 0.37, mode=mode, raw_bs=1 + i % 6))
    events.append({"seq": 10 + n, "ts": t0 + 6, "kind": "step_counts", "stage": "decode", "mode": "graph",
                   "reason": None, "count": 30, "num_tokens": 90, "padded_tokens": 0, "duration_s": 0.3,
                   "batch_sizes": {"3": {"count": 30, "num_tokens": 90, "padded_tokens": 0, "duration_s": 0.3}}})
    return events


def page_reads(store, run_id: str) -> dict:
    """Everything the run page and alerts read, minus the detail note itself."""
    summary = queries.run_summary(store, run_id)
    summary.pop("step_detail")
    return {"summary": summary, "reasons": queries.reason_breakdown(store, run_id),
            "histogram": queries.batch_histogram(store, run_id), "step_times": queries.step_time_by_mode(store, run_id),
            "minutes": queries.mode_timeline(store, run_id, bucket_s=60), "captures": queries.captures(store, run_id),
            "phases": queries.phases(store, run_id)}


def rows(store, table: sa.Table, run_id: str, **where) -> int:
    with store.read() as conn:
        pk = conn.execute(sa.select(runs.c.id).where(runs.c.run_id == run_id)).scalar_one()
        query = sa.select(sa.func.count()).select_from(table).where(table.c.run_pk == pk)
        for name, value in where.items():
            query = query.where(table.c[name] == value)
        return conn.execute(query).scalar_one()


@pytest.fixture
def two_runs(store):
    """An old run (20 days before NOW) and a recent one (1 hour before)."""
    for run_id, t0 in (("old", NOW - 20 * DAY), ("new", NOW - 3600)):
        ingest_run(store, run_record(run_id, started_at=t0))
        ingest_events(store, run_id, run_events(t0, 400))
    return store


def test_an_old_log_imported_now_keeps_its_detail_for_the_retention_from_its_import(store):
    """Retention counts from the import (the collector's clock), not the log's own timestamps."""
    t0 = NOW - 300 * DAY                                     # a log from ten months ago ...
    ingest_run(store, run_record("imported", started_at=t0), now=NOW - 3600)      # ... imported an hour ago
    ingest_events(store, "imported", run_events(t0, 400), now=NOW - 3600)
    report = retention.prune(store, POLICY, NOW)
    assert rows(store, steps, "imported") == 400 and rows(store, step_rollups, "imported", bucket_s=1) > 0
    assert queries.run_summary(store, "imported")["step_detail"]["raw_expired_before"] is None
    assert report.runs_marked == 0
    # once the retention has passed since the import, it goes like any other detail
    later = retention.prune(store, POLICY, NOW + 15 * DAY)
    assert rows(store, steps, "imported") == 0 and later.runs_marked == 1
    assert queries.run_summary(store, "imported")["step_detail"]["raw_expired_before"] == \
        retention.cut_for(NOW + 15 * DAY, POLICY.raw_s)


def test_prune_removes_old_raw_steps_and_second_rollups_only(two_runs):
    store = two_runs
    retention.prune(store, POLICY, NOW)
    assert rows(store, steps, "old") == 0 and rows(store, step_counts, "old") == 0
    assert rows(store, step_rollups, "old", bucket_s=1) == 0
    assert rows(store, steps, "new") == 400 and rows(store, step_counts, "new") == 1
    assert rows(store, step_rollups, "new", bucket_s=1) > 0
    assert rows(store, step_rollups, "old", bucket_s=60) > 0 and rows(store, step_rollups, "old", bucket_s=0) > 0


def test_every_page_read_is_the_same_after_prune(two_runs):
    store = two_runs
    before = {run_id: page_reads(store, run_id) for run_id in ("old", "new")}
    retention.prune(store, POLICY, NOW)
    assert {run_id: page_reads(store, run_id) for run_id in ("old", "new")} == before


def test_the_run_says_which_detail_expired(two_runs):
    store = two_runs
    retention.prune(store, POLICY, NOW)
    old, new = (queries.run_summary(store, r)["step_detail"] for r in ("old", "new"))
    assert old["raw_expired_before"] == retention.cut_for(NOW, POLICY.raw_s)
    assert old["seconds_expired_before"] == retention.cut_for(NOW, POLICY.second_s)
    assert new == {"graph_sample": None, "raw_expired_before": None, "seconds_expired_before": None,
                   "log_sample": None}


def test_a_timeline_of_an_expired_run_is_in_whole_minutes_with_the_same_steps(two_runs):
    store = two_runs
    fine = queries.mode_timeline(store, "old", bucket_s=1)
    assert len({p["t"] % 60 for p in fine}) > 1
    retention.prune(store, POLICY, NOW)
    coarse = queries.mode_timeline(store, "old", bucket_s=1)
    assert all(p["t"] % 60 == 0 for p in coarse)
    assert sum(p["steps"] for p in coarse) == sum(p["steps"] for p in fine)


def test_a_resend_of_pruned_events_is_not_counted_again(two_runs):
    store = two_runs
    retention.prune(store, POLICY, NOW)
    before = page_reads(store, "old")
    again = ingest_events(store, "old", run_events(NOW - 20 * DAY, 400))
    assert again.accepted == 0 and again.duplicates == len(run_events(NOW - 20 * DAY, 400))
    after = page_reads(store, "old")
    assert after["summary"].pop("last_seen_at") > before["summary"].pop("last_seen_at")
    assert after == before


def test_a_second_prune_finds_nothing_more(two_runs):
    store = two_runs
    retention.prune(store, POLICY, NOW)
    report = retention.prune(store, POLICY, NOW)
    assert report.runs_marked == 0 and not report.partitions_dropped and not any(report.rows_deleted.values())


def test_keeping_raw_steps_forever_deletes_none(two_runs):
    store = two_runs
    retention.prune(store, retention.Policy(raw_s=None, second_s=None), NOW)
    assert rows(store, steps, "old") == 400
    assert queries.run_summary(store, "old")["step_detail"]["raw_expired_before"] is None


@pytest.mark.parametrize("text, seconds", [("14d", 14 * DAY), ("36h", 36 * 3600.0), ("90m", 5400.0),
                                           ("3600s", 3600.0), ("2w", 14 * DAY), ("3", 3 * DAY),
                                           ("forever", None), ("0", None)])
def test_retention_durations(text, seconds):
    assert retention.parse_retention(text) == seconds


@pytest.mark.parametrize("text", ["", "-3d", "14 days", "3x", "d"])
def test_a_bad_retention_is_refused_with_the_forms_it_takes(text):
    from replayscope.contract.errors import ReplayscopeError

    with pytest.raises(ReplayscopeError, match="14d, 36h"):
        retention.parse_retention(text)


def test_the_cut_is_a_whole_utc_day():
    cut = retention.cut_for(NOW, 14 * DAY)
    assert cut % DAY == 0 and NOW - 15 * DAY < cut <= NOW - 14 * DAY


# -- SQLite: small transactions ---------------------------------------------------------------

def test_sqlite_ingest_completes_while_a_prune_is_under_way(sqlite_store, run_in):
    store = sqlite_store
    run_in(store, "old", started_at=NOW - 30 * DAY)
    for k in range(20):
        ingest_events(store, "old", [step(k * 2000 + i, NOW - 30 * DAY + k * 2000 + i) for i in range(2000)])
    run_in(store, "live", started_at=NOW - 60)
    pruning = threading.Thread(target=retention.prune, args=(store, POLICY, NOW), kwargs={"batch_rows": 500})
    pruning.start()
    try:
        assert wait_until(lambda: rows(store, steps, "old") < 40_000, 30.0), "the prune did not start"
        for k in range(5):
            result = ingest_events(store, "live", [step(k * 100 + i, NOW - 60 + k) for i in range(100)])
            assert result.accepted == 100
        left_when_ingest_done = rows(store, steps, "old")
    finally:
        pruning.join(120)
    assert left_when_ingest_done > 0, "ingest only finished after the whole prune"
    assert rows(store, steps, "old") == 0
    assert queries.run_summary(store, "live")["steps"] == 500


# -- PostgreSQL: partitions ----------------------------------------------------------------------

@pytest.mark.postgres
@postgresql_only
def test_postgresql_step_tables_are_partitioned_by_day(store):
    with store.read() as conn:
        kinds = dict(conn.exec_driver_sql(
            "SELECT c.relname, p.partstrat FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid").all())
    assert kinds == {"steps": "r", "step_counts": "r", "step_rollups": "r"}


@pytest.mark.postgres
@postgresql_only
def test_partitions_are_made_ahead_and_on_demand(store, run_in):
    today = int(NOW // DAY)
    retention.create_ahead(store, NOW)
    made = partitions(store)
    for table in ("steps", "step_counts", "step_rollups"):
        assert set(range(today - 1, today + retention.DAYS_AHEAD + 1)) <= set(made[table])
    run_in(store, "odd-day", started_at=1000.0)
    ingest_events(store, "odd-day", [step(0, 1000.0)])       # 1970-01-01: no partition until now
    assert 0 in partitions(store)["steps"]
    assert queries.run_summary(store, "odd-day")["steps"] == 1


@pytest.mark.postgres
@postgresql_only
def test_postgresql_prune_drops_whole_day_partitions(two_runs):
    store = two_runs
    old_day, new_day = int((NOW - 20 * DAY) // DAY), int((NOW - 3600) // DAY)
    report = retention.prune(store, POLICY, NOW)
    assert retention.partition_name("steps", old_day) in report.partitions_dropped
    left = partitions(store)
    assert old_day not in left["steps"] and old_day not in left["step_rollups"]
    assert new_day in left["steps"] and new_day in left["step_rollups"]


@pytest.mark.postgres
@postgresql_only
def test_postgresql_ingest_is_not_blocked_by_a_prune_waiting_on_a_long_transaction(two_runs, run_in):
    """DETACH ... CONCURRENTLY: while the prune waits for an open transaction, new batches
    still go in (a plain DROP would queue an exclusive lock that blocks them all)."""
    store = two_runs
    run_in(store, "live", started_at=NOW - 60)
    ingest_events(store, "live", [step(0, NOW - 60)])
    long = store.engine.connect()
    txn = long.begin()
    long.execute(sa.select(sa.func.count()).select_from(steps))          # holds the partitions open
    pruning = threading.Thread(target=retention.prune, args=(store, POLICY, NOW))
    pruning.start()
    try:
        assert wait_until(lambda: _waiting_detach(store), 30.0), "the prune never reached the detach"
        done = threading.Event()
        batch = [step(1 + i, NOW - 59) for i in range(100)]
        writer = threading.Thread(target=lambda: (ingest_events(store, "live", batch), done.set()))
        writer.start()
        assert done.wait(20), "ingest blocked behind the prune"
        writer.join()
    finally:
        txn.rollback()
        long.close()
        pruning.join(60)
    assert queries.run_summary(store, "live")["steps"] == 101
    assert rows(store, steps, "old") == 0


def _waiting_detach(store) -> bool:
    with store.read() as conn:
        return conn.exec_driver_sql(
            "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'ALTER TABLE%%DETACH PARTITION%%' "
            "AND wait_event_type = 'Lock'").scalar() > 0


@pytest.mark.postgres
@postgresql_only
def test_the_migration_partitions_an_existing_postgresql_steps_table(db_url):
    """A store at 0002 with steps in it: upgraded, the same steps are there, day-partitioned."""
    store = Store(db_url)
    try:
        store.upgrade("0002")
        with store.write() as conn:
            conn.exec_driver_sql("INSERT INTO runs (id, run_id, name, source, backend, model, device, started_at, "
                                 "status, created_at, last_seen_at, wire_version) VALUES (1, 'r', 'r', 'runner', "
                                 "'cuda', 'm', 'd', 1000, 'finished', 1, 1, 1)")
            for i in range(10):
                conn.exec_driver_sql("INSERT INTO steps (run_pk, seq, ts, stage, mode, raw_bs, graph_bs, num_tokens, "
                                     "padded_tokens) VALUES (1, %s, %s, 'decode', 'graph', 2, 2, 2, 0)",
                                     (i, 1000.0 + i * DAY))
            conn.exec_driver_sql("INSERT INTO step_rollups VALUES (1, 1, 1000, 'decode', 'graph', '', 1, 2, 0, 0.0, 0),"
                                 " (1, 0, 0, 'decode', 'graph', '', 10, 20, 0, 0.0, 0)")
        store.upgrade()
        with store.read() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM steps").scalar() == 10
            assert conn.exec_driver_sql("SELECT count(*) FROM step_rollups").scalar() == 2
        assert partitions(store)["steps"] == list(range(10))
        assert partitions(store)["step_rollups"] == [0]
        assert queries.run_summary(store, "r")["steps"] == 10
    finally:
        store.dispose()
