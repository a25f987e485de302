"""batch_rollups by reason with timed steps: what an eager reason's cost is measured from."""

from __future__ import annotations

import sqlalchemy as sa

from replayscope.collector.models import queries
from replayscope.collector.ingest import ingest_events
from replayscope.collector.store import Store

from .conftest import step


def test_batch_times_split_by_reason_and_count_only_timed_steps(store, run_in):
    run_in(store)
    ingest_events(store, "run-1", [
        step(0, 1.0, mode="eager", reason="prefill", duration_s=0.2),
        step(1, 1.0, mode="eager", reason="batch_too_large", duration_s=0.3),
        step(2, 1.0, mode="eager", reason="batch_too_large", duration_s=None),
        step(3, 1.0, mode="graph", duration_s=0.01),
    ])
    rows = {(r["mode"], r["reason"]): r for r in queries.batch_times(store, "run-1")}
    assert rows[("eager", "batch_too_large")]["steps"] == 2
    assert rows[("eager", "batch_too_large")]["timed_steps"] == 1
    assert rows[("eager", "batch_too_large")]["duration_s"] == 0.3
    assert rows[("graph", None)]["timed_steps"] == 1
    # the histogram still sums over reasons
    hist = {(r["raw_bs"], r["mode"]): r["steps"] for r in queries.batch_histogram(store, "run-1")}
    assert hist[(4, "eager")] == 3


def test_the_migration_rebuilds_the_rollup_from_the_raw_steps(db_url):
    store = Store(db_url)
    try:
        store.upgrade("0003")
        with store.write() as conn:
            conn.execute(sa.text(
                "INSERT INTO runs (run_id, name, source, backend, model, device, wire_version, started_at, "
                "status, created_at, last_seen_at) VALUES ('old', 'old', 'runner', 'cuda', 'm', 'd', 1, 1.0, "
                "'finished', 1.0, 1.0)"))
            pk = conn.execute(sa.text("SELECT id FROM runs WHERE run_id = 'old'")).scalar_one()
            for seq, mode, reason, dur in ((0, "eager", "prefill", 0.5), (1, "eager", "prefill", None),
                                           (2, "graph", None, 0.01)):
                conn.execute(sa.text(
                    "INSERT INTO steps (run_pk, seq, ts, stage, mode, raw_bs, graph_bs, num_tokens, "
                    "padded_tokens, reason, duration_s) VALUES (:pk, :seq, 1.0, 'decode', :mode, 8, NULL, 8, 0, "
                    ":reason, :dur)"), {"pk": pk, "seq": seq, "mode": mode, "reason": reason, "dur": dur})
        store.upgrade("head")
        rows = {(r["mode"], r["reason"]): r for r in queries.batch_times(store, "old")}
        assert rows[("eager", "prefill")]["steps"] == 2 and rows[("eager", "prefill")]["timed_steps"] == 1
        assert rows[("graph", None)]["duration_s"] == 0.01
    finally:
        store.dispose()
