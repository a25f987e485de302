"""Store and ingest behaviour, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import sqlite3

import pytest
import sqlalchemy as sa

from replayscope.collector.models import queries
from tests.stores import ingest_events_file
from replayscope.collector.ingest import InvalidBatch, InvalidRun, UnknownRun, ingest_events, ingest_run
from replayscope.collector.store import SchemaBehind, Store, head_revision
from replayscope.collector.tables import metadata, steps
from replayscope.contract.errors import ReplayscopeError
from replayscope.contract.events_file import write_events_file

from .conftest import run_record, step


def test_upgrade_from_empty_creates_every_table_at_head(db_url):
    store = Store.open(db_url, upgrade=True)
    try:
        assert store.current_revision() == head_revision()
        names = set(sa.inspect(store.engine).get_table_names())
        assert set(metadata.tables) <= names
    finally:
        store.dispose()


def test_the_migrations_build_exactly_the_tables_the_code_uses(db_url):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    store = Store.open(db_url, upgrade=True)
    try:
        with store.read() as conn:
            diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
    finally:
        store.dispose()
    assert diff == []


def behind(url: str) -> None:
    """Leave the store at ``url`` at the first revision, as an older replayscope would."""
    store = Store(url)
    try:
        store.upgrade("0001")
    finally:
        store.dispose()


def test_a_store_behind_is_refused_naming_both_fixes_and_left_as_it_is(db_url):
    behind(db_url)
    with pytest.raises(SchemaBehind) as info:
        Store.open(db_url)
    shown = sa.make_url(db_url).render_as_string(hide_password=True)
    assert f"replayscope db upgrade --db {shown}" in str(info.value) and "--migrate" in str(info.value)
    assert isinstance(info.value, ReplayscopeError)
    store = Store.connect(db_url)
    store.dispose()
    assert store.found_revision == "0001"


def test_a_store_behind_is_migrated_when_asked(db_url):
    behind(db_url)
    store = Store.open(db_url, upgrade=True)
    try:
        assert store.found_revision == "0001" and store.current_revision() == head_revision()
    finally:
        store.dispose()


def test_a_new_sqlite_file_at_any_path_is_created_at_head(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    store = Store.open(f"sqlite:///{tmp_path / 'elsewhere' / 'new.db'}")
    try:
        assert store.found_revision is None and store.current_revision() == head_revision()
    finally:
        store.dispose()


def test_in_memory_sqlite_is_created_at_head():
    store = Store.open("sqlite://")
    try:
        assert store.current_revision() == head_revision()
    finally:
        store.dispose()


@pytest.mark.postgres
def test_an_empty_postgresql_database_is_not_migrated_without_asking():
    from tests.postgres import temporary_database

    with temporary_database("store tests") as url:
        with pytest.raises(SchemaBehind, match="is empty"):
            Store.open(url)
        store = Store.connect(url)
        try:
            assert store.found_revision is None and sa.inspect(store.engine).get_table_names() == []
        finally:
            store.dispose()


def test_an_unreachable_database_is_one_line_with_the_password_masked():
    with pytest.raises(ReplayscopeError) as info:
        Store.open("postgresql+psycopg://user:s3cret@127.0.0.1:9/x")
    text = str(info.value)
    assert text.startswith("cannot open postgresql+psycopg://user:***@127.0.0.1:9/x: ")
    assert "s3cret" not in text and "\n" not in text


def test_a_store_at_head_opens_without_upgrade(db_url):
    Store.open(db_url, upgrade=True).dispose()
    Store.open(db_url).dispose()


def test_sqlite_connections_use_wal_normal_sync_and_busy_timeout(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path}/s.db", upgrade=True, busy_timeout_ms=1234)
    with store.read() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 1234
    store.dispose()


def test_reposting_a_run_is_harmless(store):
    assert ingest_run(store, run_record())["created"] is True
    assert ingest_run(store, run_record())["created"] is False
    assert len(queries.list_runs(store)) == 1


def test_a_newer_record_of_a_run_replaces_its_description_not_its_status(store, run_in):
    """What a followed log learns later (the device, the config) reaches the run; its status,
    events and source stay as they are, and the same record again changes nothing."""
    run_id = run_in(store)
    ingest_events(store, run_id, [step(0, 1000.0)])
    before = queries.run_summary(store, run_id)
    newer = run_record(run_id=run_id, device="cuda:7", config={"capture_count": 4}, source="trace")
    assert ingest_run(store, newer)["created"] is False
    after = queries.run_summary(store, run_id)
    assert after["device"] == "cuda:7" and after["config"]["capture_count"] == 4
    assert (after["status"], after["steps"], after["source"]) == (before["status"], before["steps"], before["source"])
    assert ingest_run(store, newer)["created"] is False and queries.run_summary(store, run_id) == after


def test_an_invalid_run_record_names_the_field(store):
    with pytest.raises(InvalidRun) as info:
        ingest_run(store, run_record(source="nowhere"))
    assert info.value.field == "source"


def test_one_invalid_event_rejects_the_whole_batch(store, run_in):
    run_id = run_in(store)
    events = [step(0, 1000.0), step(1, 1000.1), dict(step(2, 1000.2), mode="warp")]
    with pytest.raises(InvalidBatch) as info:
        ingest_events(store, run_id, events)
    assert (info.value.index, info.value.field) == (2, "mode")
    assert queries.run_summary(store, run_id)["steps"] == 0
    with store.read() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(steps)).scalar() == 0


def test_repeated_seqs_are_ignored_and_not_counted_twice(store, run_in):
    run_id = run_in(store)
    batch = [step(i, 1000.0 + i * 0.1, mode="eager" if i % 4 == 0 else "graph") for i in range(20)]
    first = ingest_events(store, run_id, batch)
    again = ingest_events(store, run_id, batch[5:] + [step(20, 1003.0)])
    assert (first.accepted, first.duplicates) == (20, 0)
    assert (again.accepted, again.duplicates) == (1, 15)
    summary = queries.run_summary(store, run_id)
    assert summary["steps"] == 21
    assert summary["modes"] == {"graph": 16, "padded": 0, "eager": 5, "unknown": 0}


def test_a_seq_repeated_inside_one_batch_counts_once(store, run_in):
    run_id = run_in(store)
    result = ingest_events(store, run_id, [step(7, 1000.0), step(7, 1000.0)])
    assert (result.accepted, result.duplicates) == (1, 1)


def test_events_for_an_unknown_run_are_refused(store):
    with pytest.raises(UnknownRun):
        ingest_events(store, "ghost", [step(0, 1000.0)])


def test_run_end_sets_status_and_end_time(store, run_in):
    run_id = run_in(store)
    ingest_events(store, run_id, [step(0, 1000.0), {"seq": 1, "ts": 1001.5, "kind": "run_end", "status": "failed",
                                                    "error": "OOM"}])
    summary = queries.run_summary(store, run_id)
    assert (summary["status"], summary["ended_at"], summary["error"]) == ("failed", 1001.5, "OOM")
    assert summary["last_event_ts"] == 1001.5


def test_step_counts_go_straight_into_rollups(store, run_in):
    run_id = run_in(store, source="vllm-log")
    ingest_events(store, run_id, [
        {"seq": 0, "ts": 1000.0, "kind": "step_counts", "stage": "decode", "mode": "graph", "reason": None,
         "count": 900, "num_tokens": 9000, "padded_tokens": 100},
        {"seq": 1, "ts": 1000.0, "kind": "step_counts", "stage": "decode", "mode": "eager",
         "reason": "unknown", "count": 100, "num_tokens": 5000, "padded_tokens": 0, "duration_s": 2.0},
    ])
    summary = queries.run_summary(store, run_id)
    assert summary["steps"] == 1000 and summary["modes"]["eager"] == 100
    assert summary["reasons"] == {"unknown": 100}
    assert summary["eager_ratio"] == pytest.approx(0.1)
    assert summary["padded_tokens"] == 100


def test_custom_reasons_are_stored_as_given(store, run_in):
    run_id = run_in(store)
    ingest_events(store, run_id, [step(0, 1000.0, mode="eager", reason="custom:my adapter")])
    assert queries.reason_breakdown(store, run_id)[0]["reason"] == "custom:my adapter"


def test_every_event_kind_is_stored_and_read_back(store, run_in):
    run_id = run_in(store)
    ingest_events(store, run_id, [
        {"seq": 0, "ts": 1000.0, "kind": "phase", "phase": "load_weights", "duration_s": 3.5, "mem_bytes": 10},
        {"seq": 1, "ts": 1001.0, "kind": "capture", "graph_bs": 8, "stage": "decode", "duration_s": 0.2,
         "pool_bytes": 4096, "pool_delta_bytes": 4096, "status": "ok"},
        {"seq": 2, "ts": 1001.1, "kind": "degrade", "from": "compile", "to": "cuda", "error": "boom"},
        {"seq": 3, "ts": 1001.2, "kind": "parity", "graph_bs": 8, "max_abs_diff": 0.001, "rel_err": 0.0001},
        {"seq": 4, "ts": 1001.3, "kind": "heartbeat"},
    ])
    assert queries.phases(store, run_id)[0]["phase"] == "load_weights"
    assert queries.captures(store, run_id)[0]["pool_bytes"] == 4096
    assert queries.degrades(store, run_id)[0]["from"] == "compile"
    assert queries.parity(store, run_id)[0]["graph_bs"] == 8
    assert queries.run_summary(store, run_id)["capture_total_s"] == pytest.approx(0.2)
    again = ingest_events(store, run_id, [{"seq": 4, "ts": 1001.3, "kind": "heartbeat"}])
    assert again.duplicates == 1


def test_jsonl_events_file_loads_run_and_events(store, tmp_path):
    path = tmp_path / "events.jsonl"
    write_events_file(path, run_record("file-run"), [step(i, 1000.0 + i) for i in range(10)])
    result = ingest_events_file(store, path)
    assert result.accepted == 10
    assert ingest_events_file(store, path).duplicates == 10
    assert queries.run_summary(store, "file-run")["steps"] == 10


def test_jsonl_without_run_record_first_is_refused(sqlite_store, tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(step(0, 1.0)) + "\n")
    with pytest.raises(ReplayscopeError, match="first line"):
        ingest_events_file(sqlite_store, path)


def test_a_locked_database_fails_cleanly_and_writes_nothing(tmp_path):
    from replayscope.collector.store import StoreUnavailable

    path = tmp_path / "locked.db"
    store = Store.open(f"sqlite:///{path}", upgrade=True, busy_timeout_ms=50)
    ingest_run(store, run_record())
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    with pytest.raises(StoreUnavailable, match="locked"):
        ingest_events(store, "run-1", [step(0, 1000.0)])
    blocker.execute("ROLLBACK")
    assert queries.run_summary(store, "run-1")["steps"] == 0
    store.dispose()
