"""Reads about a run's steps, from the rollups: the mode timeline, eager reasons, batch
sizes and their step times, the batch-size sequence. Part of the read model
(``replayscope.collector.models.queries`` says its definitions).
"""

from __future__ import annotations

import json
from typing import Any
import sqlalchemy as sa

from replayscope.collector.models.events import run_pk_of
from replayscope.collector.models.rollups import BUCKETS_S, WHOLE_RUN
from replayscope.collector.models.runs import ratio
from replayscope.collector.store import Store
from replayscope.collector.tables import (batch_rollups as br, runs, step_counts as sc, step_rollups as sr,
                                          steps as st)
from replayscope.contract.wire import STEP_COUNT_MODES, stages_of


_NICE_BUCKETS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
TIMELINE_MAX_POINTS = 720


def choose_bucket_s(span_s: float, max_points: int = TIMELINE_MAX_POINTS) -> int:
    """The smallest readable bucket that keeps a timeline under ``max_points`` points."""
    for bucket in _NICE_BUCKETS_S:
        if span_s / bucket <= max_points:
            return bucket
    return _NICE_BUCKETS_S[-1]


def mode_timeline(store: Store, run_id: str, bucket_s: int | None = None,
                  stage: str | None = None) -> list[dict]:
    """Steps per mode per time bucket: ``t`` (bucket start, unix s), graph, padded, eager,
    eager_ratio; extra key ``steps``. Buckets without steps are left out. Once retention
    pruned a run's 1-second rollups the buckets are whole minutes (at least 60 s)."""
    with store.read() as conn:
        run = conn.execute(sa.select(runs.c.id, runs.c.started_at, runs.c.last_event_ts,
                                     runs.c.seconds_expired_before, runs.c.clock_ahead_s)
                           .where(runs.c.run_id == run_id)).first()
        if run is None:
            return []
        if bucket_s is None:
            bucket_s = choose_bucket_s(max(0.0, (run.last_event_ts or run.started_at) - run.started_at))
        bucket_s = max(1, int(bucket_s))
        if run.seconds_expired_before is not None and bucket_s % 60:
            bucket_s = 60 * -(-bucket_s // 60)
        source = max(b for b in BUCKETS_S if bucket_s % b == 0)
        tb = sr.c.t if bucket_s == source else (sr.c.t // bucket_s) * bucket_s
        tb = tb.label("tb")
        # One row per bucket, the modes side by side (a long run at 1 s has tens of thousands).
        by_mode = [sa.func.sum(sa.case((sr.c.mode == mode, sr.c.steps), else_=0)) for mode in STEP_COUNT_MODES]
        query = (sa.select(tb, *by_mode).where(sr.c.run_pk == run.id, sr.c.bucket_s == source))
        if stage is not None:
            query = query.where(sr.c.stage.in_(stages_of(stage)))
        rows = conn.execute(query.group_by(tb).order_by(tb)).all()
    out: list[dict] = []
    for t, graph, padded, eager, unknown in rows:
        graph, padded, eager, unknown = int(graph), int(padded), int(eager), int(unknown)
        steps = graph + padded + eager + unknown
        out.append({"t": float(t), "graph": graph, "padded": padded, "eager": eager, "unknown": unknown,
                    "steps": steps,
                    "eager_ratio": None if unknown else (eager / steps if steps else 0.0)})
    return out


def reason_breakdown(store: Store, run_id: str) -> list[dict]:
    """Eager steps per reason, most steps first: reason, steps, duration_s, share."""
    with store.read() as conn:
        pk = run_pk_of(conn, run_id)
        if pk is None:
            return []
        total = sa.func.sum(sr.c.steps)
        rows = conn.execute(
            sa.select(sr.c.reason, total, sa.func.sum(sr.c.duration_s))
            .where(sr.c.run_pk == pk, sr.c.bucket_s == WHOLE_RUN, sr.c.mode == "eager")
            .group_by(sr.c.reason).order_by(total.desc(), sr.c.reason)).all()
    eager = sum(int(n) for _r, n, _d in rows)
    return [{"reason": reason or None, "steps": int(n), "duration_s": float(d or 0.0),
             "share": ratio(int(n), eager)} for reason, n, d in rows]


EVIDENCE_READ = 20_000


def step_evidence(store: Store, run_id: str, read: int = EVIDENCE_READ) -> dict:
    """What the steps' ``evidence`` says, grouped: ``rows`` of ``mode, reason, head`` (the evidence up
    to its first colon: e.g. ``PIECEWISE, not FULL (prefill)``), ``steps``, ``example`` (the most
    frequent full text), most steps first; read from the first ``read`` stored steps that carry
    evidence (``read_steps``; ``complete``: whether that was all of them)."""
    with store.read() as conn:
        pk = run_pk_of(conn, run_id)
        if pk is None:
            return {"rows": [], "read_steps": 0, "complete": True}
        rows = conn.execute(
            sa.select(st.c.mode, st.c.reason, st.c.evidence)
            .where(st.c.run_pk == pk, st.c.evidence.is_not(None))
            .order_by(st.c.seq).limit(read + 1)).all()
    complete = len(rows) <= read
    groups: dict[tuple, dict] = {}
    for mode, reason, evidence in rows[:read]:
        head = evidence.split(":", 1)[0].strip() if ":" in evidence else evidence
        group = groups.setdefault((mode, reason, head), {"mode": mode, "reason": reason, "head": head,
                                                          "steps": 0, "texts": {}})
        group["steps"] += 1
        group["texts"][evidence] = group["texts"].get(evidence, 0) + 1
    out = []
    for group in sorted(groups.values(), key=lambda g: (-g["steps"], g["head"])):
        texts = group.pop("texts")
        group["example"] = max(texts, key=lambda text: (texts[text], text))
        out.append(group)
    return {"rows": out, "read_steps": min(len(rows), read), "complete": complete}


def batch_histogram(store: Store, run_id: str, stage: str | None = None) -> list[dict]:
    """Steps per (raw_bs, mode): raw_bs, mode, steps, num_tokens, padded_tokens."""
    with store.read() as conn:
        pk = run_pk_of(conn, run_id)
        if pk is None:
            return []
        query = (sa.select(br.c.raw_bs, br.c.mode, sa.func.sum(br.c.steps), sa.func.sum(br.c.num_tokens),
                           sa.func.sum(br.c.padded_tokens))
                 .where(br.c.run_pk == pk))
        if stage is not None:
            query = query.where(br.c.stage.in_(stages_of(stage)))
        rows = conn.execute(query.group_by(br.c.raw_bs, br.c.mode).order_by(br.c.raw_bs, br.c.mode)).all()
    return [{"raw_bs": int(bs), "mode": mode, "steps": int(n), "num_tokens": int(tok),
             "padded_tokens": int(pad)} for bs, mode, n, tok, pad in rows]


def step_time_by_mode(store: Store, run_id: str) -> list[dict]:
    """Step time per (stage, mode): stage, mode, steps, timed_steps (steps with a duration), total_s
    (their sum) and mean_s (over the timed steps; None when none was timed)."""
    with store.read() as conn:
        pk = run_pk_of(conn, run_id)
        if pk is None:
            return []
        rows = conn.execute(
            sa.select(sr.c.stage, sr.c.mode, sa.func.sum(sr.c.steps), sa.func.sum(sr.c.duration_s),
                      sa.func.sum(sr.c.timed_steps))
            .where(sr.c.run_pk == pk, sr.c.bucket_s == WHOLE_RUN)
            .group_by(sr.c.stage, sr.c.mode).order_by(sr.c.stage, sr.c.mode)).all()
    return [{"stage": stage, "mode": mode, "steps": int(n), "timed_steps": int(timed or 0),
             "total_s": float(total or 0.0), "mean_s": (float(total) / int(timed)) if timed else None}
            for stage, mode, n, total, timed in rows]


def batch_times(store: Store, run_id: str, stage: str | None = None) -> list[dict]:
    """Steps per (stage, raw_bs, mode, reason), with their measured time: stage, raw_bs, mode,
    reason (None unless eager), steps, timed_steps, duration_s (the sum over timed steps).
    Raw steps only: aggregates (``step_counts``) carry no batch size."""
    with store.read() as conn:
        pk = run_pk_of(conn, run_id)
        if pk is None:
            return []
        query = (sa.select(br.c.stage, br.c.raw_bs, br.c.mode, br.c.reason, br.c.steps, br.c.timed_steps,
                           br.c.duration_s)
                 .where(br.c.run_pk == pk)
                 .order_by(br.c.stage, br.c.raw_bs, br.c.mode, br.c.reason))
        if stage is not None:
            query = query.where(br.c.stage.in_(stages_of(stage)))
        rows = conn.execute(query).all()
    return [{"stage": st, "raw_bs": int(bs), "mode": mode, "reason": reason or None, "steps": int(n),
             "timed_steps": int(timed), "duration_s": float(total)}
            for st, bs, mode, reason, n, timed, total in rows]


SEQUENCE_READ = 10_000       # event seq numbers read at most for a run's batch-size sequence
SEQUENCE_WINDOWS = 50        # evenly spaced windows of a longer run
SEQUENCE_BUCKETS = 200       # time buckets of a run read whole


def batch_sequence(store: Store, run_id: str, read: int = SEQUENCE_READ,
                   windows: int = SEQUENCE_WINDOWS) -> dict[str, Any]:
    """The run's steps with a batch size in time order: ``rows`` of ``t`` (a bucket's start,
    unix s), ``stage``, ``raw_bs``, ``mode``, ``reason`` (None unless eager), ``steps``; what
    the advisor splits into the steps it chooses sizes from and the steps it holds back.

    Unlike the counts above it reads stored step detail (raw steps, and ``step_counts``
    aggregates with their batch sizes), by event ``seq`` (the order they happened in) on
    the primary key: a run of at most ``read`` seq numbers whole, in ``SEQUENCE_BUCKETS``
    time buckets; a longer one in ``windows`` evenly spaced windows of consecutive seq
    numbers, a bucket each (``sampled``: True, ``steps_read`` of ``steps_total``), so a
    page stays fast on a run of millions of steps. Detail that retention expired is gone
    (``run_summary``'s ``step_detail`` says from when)."""
    empty = {"rows": [], "sampled": False, "steps_read": 0}
    with store.read() as conn:
        pk = run_pk_of(conn, run_id)
        if pk is None:
            return empty
        # min and max apart: SQLite reads one end of the primary key for each, not every row for both
        bounds = [(conn.execute(sa.select(sa.func.min(t.c.seq)).where(t.c.run_pk == pk)).scalar(),
                   conn.execute(sa.select(sa.func.max(t.c.seq)).where(t.c.run_pk == pk)).scalar()) for t in (st, sc)]
        lows = [lo for lo, _ in bounds if lo is not None]
        if not lows:
            return empty
        lo, hi = min(lows), max(h for _, h in bounds if h is not None)
        whole = hi - lo + 1 <= read
        if whole:
            ranges = [(lo, hi + 1)]
        else:
            width = max(1, read // windows)
            ranges = [(lo + (hi + 1 - width - lo) * i // (windows - 1), 0) for i in range(windows)]
            ranges = [(a, a + width) for a, _ in ranges]
        lo_b, hi_b = sa.bindparam("lo"), sa.bindparam("hi")
        raw = (sa.select(st.c.ts, st.c.stage, st.c.raw_bs, st.c.mode, st.c.reason)
               .where(st.c.run_pk == pk, st.c.seq >= lo_b, st.c.seq < hi_b))
        counted = (sa.select(sc.c.ts, sc.c.stage, sc.c.raw_bs, sc.c.mode, sc.c.reason, sc.c.count, sc.c.batch_sizes)
                   .where(sc.c.run_pk == pk, sc.c.seq >= lo_b, sc.c.seq < hi_b))
        has_counts = bounds[1][0] is not None
        picked: list[tuple[float, str, int, str, Any, int]] = []     # ts, stage, bs, mode, reason, steps
        for a, b in ranges:
            window = [(ts, stage, bs, mode, reason or None, 1)
                      for ts, stage, bs, mode, reason in conn.execute(raw, {"lo": a, "hi": b}).all()]
            for ts, stage, bs, mode, reason, n, parts in (
                    conn.execute(counted, {"lo": a, "hi": b}).all() if has_counts else ()):
                if bs is not None:
                    window.append((ts, stage, bs, mode, reason or None, int(n)))
                    continue
                if isinstance(parts, str):
                    parts = json.loads(parts)
                for size, part in (parts or {}).items():
                    window.append((ts, stage, int(size), mode, reason or None, int(part["count"])))
            if window and not whole:
                first = min(w[0] for w in window)
                window = [(first, *w[1:]) for w in window]            # a window is one bucket
            picked += window
        total = None if whole else int(conn.execute(
            sa.select(sa.func.coalesce(sa.func.sum(br.c.steps), 0)).where(br.c.run_pk == pk)).scalar())
    if whole and picked:
        t0, t1 = min(p[0] for p in picked), max(p[0] for p in picked)
        width_s = (t1 - t0) / SEQUENCE_BUCKETS or 1.0
        picked = [(t0 + min(SEQUENCE_BUCKETS - 1, int((p[0] - t0) / width_s)) * width_s, *p[1:]) for p in picked]
    out: dict[tuple, int] = {}
    for t, stage, bs, mode, reason, n in picked:
        key = (t, stage, bs, mode, reason)
        out[key] = out.get(key, 0) + n
    rows = [{"t": t, "stage": stage, "raw_bs": bs, "mode": mode, "reason": reason, "steps": n}
            for (t, stage, bs, mode, reason), n in sorted(out.items(), key=lambda kv: kv[0][:3])]
    read_steps = sum(r["steps"] for r in rows)
    return {"rows": rows, "sampled": not whole, "steps_read": read_steps,
            "steps_total": read_steps if whole else total}
