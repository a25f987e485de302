"""Rollups equal what the raw steps say, after random batches, retries and duplicates."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings, strategies as st

from replayscope.collector.models import queries
from replayscope.collector.ingest import ingest_events, ingest_run
from tests.stores import rebuild_rollups
from replayscope.collector.tables import batch_rollups, runs, step_counts, step_rollups, steps

from .conftest import run_record

_ids = itertools.count()

modes = st.sampled_from(["graph", "padded", "eager"])


@st.composite
def step_event(draw, seq):
    mode = draw(modes)
    raw_bs = draw(st.integers(1, 16))
    stage = draw(st.sampled_from(["decode", "prefill", "verify"]))
    event = {"seq": seq, "ts": 1000.0 + draw(st.floats(0, 200, allow_nan=False)), "kind": "step",
             "stage": stage, "mode": mode, "raw_bs": raw_bs,
             "graph_bs": {"graph": raw_bs, "padded": raw_bs + draw(st.integers(1, 4)), "eager": None}[mode],
             "num_tokens": raw_bs, "padded_tokens": draw(st.integers(0, 8)) if mode == "padded" else 0,
             "reason": draw(st.sampled_from(["prefill", "batch_too_large", "custom:mine"])) if mode == "eager" else None,
             "duration_s": draw(st.one_of(st.none(), st.floats(0, 1, allow_nan=False)))}
    if draw(st.integers(0, 9)) == 0:   # now and then an importer's aggregate instead
        event = {"seq": seq, "ts": event["ts"], "kind": "step_counts", "stage": stage, "mode": mode,
                 "reason": event["reason"], "count": draw(st.integers(1, 50)),
                 "num_tokens": draw(st.integers(0, 500)), "padded_tokens": draw(st.integers(0, 50)),
                 "duration_s": draw(st.one_of(st.none(), st.floats(0, 5, allow_nan=False)))}
    return event


@st.composite
def deliveries(draw):
    """Batches of a run's events as a flaky network delivers them: split, retried, repeated."""
    n = draw(st.integers(1, 60))
    events = [draw(step_event(seq)) for seq in range(n)]
    cuts = sorted(draw(st.lists(st.integers(1, n), max_size=6)))
    batches = [events[a:b] for a, b in zip([0] + cuts, cuts + [n]) if events[a:b]]
    out = []
    for batch in batches:
        out.append(batch)
        if draw(st.booleans()):
            out.append(batch)                                  # a retry of the whole batch
        if draw(st.booleans()):
            out.append(batch[: draw(st.integers(1, len(batch)))] + [batch[0]])  # partial retry, dup inside
    return out


def raw_aggregates(conn, run_pk):
    """What the raw rows say, computed independently of replayscope.collector.models.rollups."""
    per_bucket = defaultdict(lambda: [0, 0, 0, 0.0, 0])
    per_batch = defaultdict(lambda: [0, 0, 0, 0.0, 0])
    rows = [(r.ts, r.stage, r.mode, r.reason, 1, r.num_tokens, r.padded_tokens, r.duration_s, r.raw_bs)
            for r in conn.execute(sa.select(steps).where(steps.c.run_pk == run_pk))]
    rows += [(r.ts, r.stage, r.mode, r.reason, r.count, r.num_tokens, r.padded_tokens, r.duration_s, r.raw_bs)
             for r in conn.execute(sa.select(step_counts).where(step_counts.c.run_pk == run_pk))]
    for ts, stage, mode, reason, n, tokens, padded, dur, raw_bs in rows:
        for bucket in (0, 1, 60):
            t = 0 if bucket == 0 else math.floor(ts) // bucket * bucket
            acc = per_bucket[(bucket, t, stage, mode, reason or "")]
            acc[0] += n; acc[1] += tokens; acc[2] += padded
            acc[3] += dur or 0.0; acc[4] += n if dur is not None else 0
        if raw_bs is not None:
            b = per_batch[(stage, raw_bs, mode, reason or "")]
            b[0] += n; b[1] += tokens; b[2] += padded; b[3] += dur or 0.0; b[4] += n if dur is not None else 0
    return per_bucket, per_batch


def stored_rollups(conn, run_pk):
    # (row.t is Row's tuple accessor, hence the mapping for the column named t)
    buckets = {(r.bucket_s, r._mapping["t"], r.stage, r.mode, r.reason): [r.steps, r.num_tokens, r.padded_tokens,
                                                               r.duration_s, r.timed_steps]
               for r in conn.execute(sa.select(step_rollups).where(step_rollups.c.run_pk == run_pk))}
    batches = {(r.stage, r.raw_bs, r.mode, r.reason): [r.steps, r.num_tokens, r.padded_tokens, r.duration_s,
                                                       r.timed_steps]
               for r in conn.execute(sa.select(batch_rollups).where(batch_rollups.c.run_pk == run_pk))}
    return buckets, batches


def assert_same(stored, expected):
    assert stored.keys() == expected.keys()
    for key, values in expected.items():
        got = stored[key]
        assert got[:3] == values[:3], key
        assert got[3] == pytest.approx(values[3], abs=1e-6), key
        if len(values) > 4:
            assert got[4] == values[4], key


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=deliveries())
def test_rollups_equal_raw_step_aggregates(sqlite_store, batches):
    run_id = f"run-{next(_ids)}"
    ingest_run(sqlite_store, run_record(run_id))
    for batch in batches:
        ingest_events(sqlite_store, run_id, batch)
    with sqlite_store.read() as conn:
        run_pk = conn.execute(sa.select(runs.c.id).where(runs.c.run_id == run_id)).scalar()
        exp_buckets, exp_batches = raw_aggregates(conn, run_pk)
        got_buckets, got_batches = stored_rollups(conn, run_pk)
    assert_same(got_buckets, exp_buckets)
    assert_same(got_batches, exp_batches)
    distinct = {e["seq"]: e for b in batches for e in b}
    total = sum(e.get("count", 1) for e in distinct.values())
    assert queries.run_summary(sqlite_store, run_id)["steps"] == total


def test_rebuild_reproduces_incremental_rollups(store, run_in):
    from .conftest import step

    run_id = run_in(store)
    for k in range(3):
        ingest_events(store, run_id, [step(k * 10 + i, 1000.0 + k * 70 + i, mode=("graph", "eager")[i % 2])
                                      for i in range(10)])
    with store.read() as conn:
        run_pk = conn.execute(sa.select(runs.c.id).where(runs.c.run_id == run_id)).scalar()
        before = stored_rollups(conn, run_pk)
    with store.write() as conn:
        rebuild_rollups(conn, run_pk)
    with store.read() as conn:
        after = stored_rollups(conn, run_pk)
    assert_same(after[0], before[0])
    assert_same(after[1], before[1])
