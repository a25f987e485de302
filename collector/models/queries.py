"""The read model: what the API, the dashboard and the CLI show, from one place.

Plain functions of ``(store, ...)`` returning JSON-ready dicts and lists. Counts come
from the rollups (``collector.models.rollups``), never from scanning raw steps, so they stay
fast on runs of millions of steps. A function about one run returns ``[]`` (or ``None``
for ``run_summary``) when the run is unknown.

Definitions: ``eager_ratio`` = eager steps / all steps (every stage);
``padded_ratio`` = padded_tokens / (num_tokens + padded_tokens), the share of the
computed tokens that were padding, every stage (prefill tokens included);
``decode_padded_ratio`` = decode_padded_tokens / (decode_num_tokens +
decode_padded_tokens), the same share over the decode stages only (``runner.wire.DECODE_STAGES``:
decode and mixed steps; what padding to a captured size costs; None when the run has no
tokens in them); ``share`` in ``reason_breakdown`` is the reason's share of the run's eager
steps. A ``stage`` argument is a stage or a rule's selection (``runner.wire.RULE_STAGES``:
``decode+mixed`` is the decode stages).
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from collector.importers.stages import log_sample
from collector.models.rollups import BUCKETS_S, NO_REASON, WHOLE_RUN
from collector.store import Store
from collector.tables import (alert_events as ae, alert_rules as ar, batch_rollups as br,
                              captures as cap, degrades as deg, parity_checks as par,
                              phases as ph, recordings as rec, run_marks as rm, run_warnings as rw,
                              runs, step_counts as sc, step_rollups as sr, steps as st)
from runner.wire import DECODE_STAGES, MODES, readable_config, stages_of

_RUN_COLS = (runs.c.id, runs.c.run_id, runs.c.name, runs.c.source, runs.c.backend, runs.c.model,
             runs.c.device, runs.c.status, runs.c.started_at, runs.c.ended_at)
_NICE_BUCKETS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
TIMELINE_MAX_POINTS = 720


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def _run_pk(conn, run_id: str) -> int | None:
    return conn.execute(sa.select(runs.c.id).where(runs.c.run_id == run_id)).scalar()


def headlines(conn, run_pks: list[int]) -> dict[int, dict[str, Any]]:
    """Per run that names them (log importers' ``config.rank_headline``): for each phase
    name (and ``captures``), the rank whose row is the run's figure."""
    out = {}
    for pk, config in conn.execute(sa.select(runs.c.id, runs.c.config).where(runs.c.id.in_(run_pks))):
        headline = (config or {}).get("rank_headline") if isinstance(config, dict) else None
        if isinstance(headline, dict):
            out[pk] = headline
    return out


def is_headline(headline: dict[str, Any] | None, what: str, rank: str | None) -> bool:
    return headline is None or what not in headline or headline[what] == rank


def headline_rows(rows: list[dict], config: dict | None, what_key: str = "phase") -> list[dict]:
    """The rows that are the run's figures: one rank's where several ranks logged the same
    fact (rank 0's, or the lowest rank's that logged it; ``config.rank_headline``)."""
    headline = (config or {}).get("rank_headline")
    if not isinstance(headline, dict):
        return rows
    return [r for r in rows
            if is_headline(headline, r[what_key] if what_key in r else what_key, r.get("rank"))]


def rank_table(store: Store, run_id: str) -> list[dict]:
    """Startup facts side by side per rank: one dict per rank (``rank`` None: lines that
    name no rank) with ``phases`` {name: {duration_s, mem_bytes}}, ``failed`` (error text or
    None) and ``headline`` (phase names this rank's figure stands for the run)."""
    summary = run_summary(store, run_id)
    if summary is None:
        return []
    headline = (summary.get("config") or {}).get("rank_headline") or {}
    by_rank: dict[Any, dict] = {}
    for row in phases(store, run_id):
        entry = by_rank.setdefault(row.get("rank"), {"rank": row.get("rank"), "phases": {}, "failed": None,
                                                     "headline": []})
        entry["phases"][row["phase"]] = {"duration_s": row["duration_s"], "mem_bytes": row["mem_bytes"]}
        if headline.get(row["phase"], row.get("rank")) == row.get("rank") and row["phase"] in headline:
            entry["headline"].append(row["phase"])
    for row in warnings(store, run_id):
        if row.get("code") == "rank_failed" and row.get("rank") is not None:
            entry = by_rank.setdefault(row["rank"], {"rank": row["rank"], "phases": {}, "failed": None,
                                                     "headline": []})
            entry["failed"] = row["message"]
    failure = summary.get("failure")
    if summary.get("status") == "failed" and failure:
        entry = by_rank.setdefault(failure.get("rank"), {"rank": failure.get("rank"), "phases": {}, "failed": None,
                                                         "headline": []})
        entry["failed"] = failure.get("error") or "failed"
    order = (summary.get("config") or {}).get("ranks") or []
    return sorted(by_rank.values(), key=lambda e: (e["rank"] is not None,
                                                   order.index(e["rank"]) if e["rank"] in order else len(order),
                                                   str(e["rank"])))


def _totals(conn, run_pks: list[int]) -> dict[int, dict[str, Any]]:
    """Per run: modes, steps (and per stage), tokens (all stages and the decode stages), capture
    time and firing alerts."""
    out = {pk: {"steps": 0, "modes": {m: 0 for m in MODES}, "stage_steps": {}, "num_tokens": 0, "padded_tokens": 0,
                "decode_num_tokens": 0, "decode_padded_tokens": 0,
                "capture_total_s": None, "alerts_firing": 0} for pk in run_pks}
    if not run_pks:
        return out
    rows = conn.execute(
        sa.select(sr.c.run_pk, sr.c.stage, sr.c.mode, sa.func.sum(sr.c.steps), sa.func.sum(sr.c.num_tokens),
                  sa.func.sum(sr.c.padded_tokens))
        .where(sr.c.bucket_s == WHOLE_RUN, sr.c.run_pk.in_(run_pks))
        .group_by(sr.c.run_pk, sr.c.stage, sr.c.mode))
    for pk, stage, mode, n, tokens, padded in rows:
        o = out[pk]
        o["modes"][mode] += int(n)
        o["steps"] += int(n)
        o["stage_steps"][stage] = o["stage_steps"].get(stage, 0) + int(n)
        o["num_tokens"] += int(tokens)
        o["padded_tokens"] += int(padded)
        if stage in DECODE_STAGES:
            o["decode_num_tokens"] += int(tokens)
            o["decode_padded_tokens"] += int(padded)
    # Unknown stays None: a run whose source gave no capture time has no capture total.
    # Several ranks log the same capture: only the run's headline rank counts (see
    # headline_rank); a run without ranks counts every row.
    headline = headlines(conn, run_pks)
    totals: dict[int, float] = {}
    for pk, rank, duration in conn.execute(
            sa.select(cap.c.run_pk, cap.c.rank, cap.c.duration_s)
            .where(cap.c.run_pk.in_(run_pks), cap.c.duration_s.is_not(None))):
        if is_headline(headline.get(pk), "captures", rank):
            totals[pk] = totals.get(pk, 0.0) + float(duration)
    # A capture phase is the wall time of the whole capture, as the engines log it (vLLM
    # logs nothing per size): it wins over the per-size sum. "capture" and "capture_<stage>"
    # are totals; dotted names ("capture.target.verify") are parts of them.
    phase_totals: dict[int, float] = {}
    for pk, name, rank, duration in conn.execute(
            sa.select(ph.c.run_pk, ph.c.phase, ph.c.rank, ph.c.duration_s)
            .where(ph.c.run_pk.in_(run_pks), ph.c.duration_s.is_not(None),
                   sa.or_(ph.c.phase == "capture", ph.c.phase.like("capture!_%", escape="!")))):
        if is_headline(headline.get(pk), name, rank):
            phase_totals[pk] = phase_totals.get(pk, 0.0) + float(duration)
    totals.update(phase_totals)
    for pk, total in totals.items():
        out[pk]["capture_total_s"] = total
    for pk, n in conn.execute(
            sa.select(ae.c.run_pk, sa.func.count())
            .where(ae.c.status == "firing", ae.c.run_pk.in_(run_pks)).group_by(ae.c.run_pk)):
        out[pk]["alerts_firing"] = int(n)
    for o in out.values():
        o["eager_ratio"] = _ratio(o["modes"]["eager"], o["steps"])
        o["padded_ratio"] = _ratio(o["padded_tokens"], o["num_tokens"] + o["padded_tokens"])
        decode = o["decode_num_tokens"] + o["decode_padded_tokens"]
        o["decode_padded_ratio"] = o["decode_padded_tokens"] / decode if decode else None
    return out


def _run_dict(row, totals: dict[str, Any]) -> dict[str, Any]:
    d = {c.name: row._mapping[c.name] for c in _RUN_COLS if c.name != "id"}
    d.update(totals)
    return d


def list_runs(store: Store, limit: int = 500) -> list[dict]:
    """The newest runs first, each with its step totals."""
    with store.read() as conn:
        rows = conn.execute(sa.select(*_RUN_COLS).order_by(runs.c.started_at.desc(), runs.c.id.desc())
                            .limit(limit)).all()
        totals = _totals(conn, [r.id for r in rows])
    return [_run_dict(r, totals[r.id]) for r in rows]


def run_summary(store: Store, run_id: str) -> dict | None:
    """One run: the ``list_runs`` keys plus config, torch_version, reasons, last_event_ts.

    Extra keys: ``error`` (from run_end), ``last_seen_at`` (collector clock), ``failure``
    (where a failed run failed: error, rank, phase, graph_bs, ts; None unless it said),
    ``partial`` (the source did not see the start), ``time_provenance``, ``version``, and
    ``detail``: how much step detail is stored (``graph_sample``: 1 in N graph steps sent
    one by one, None when all; ``raw_expired_before`` / ``seconds_expired_before``: raw
    step events / 1-second rollups before this ts were pruned by retention, else None;
    ``log_sample``: the source logs 1 in ``every`` steps of ``stage`` (SGLang's decode
    lines), with the interval's ``provenance`` and the ``logged`` steps, else None),
    ``clock_ahead_s``: the furthest an event was stamped ahead of the collector's clock when
    it arrived, when more than a minute (such events count as stamped at their arrival in
    ``last_event_ts``, the clock alerts follow), else None.
    """
    with store.read() as conn:
        row = conn.execute(sa.select(*_RUN_COLS, runs.c.config, runs.c.torch_version,
                                     runs.c.last_event_ts, runs.c.last_seen_at, runs.c.error,
                                     runs.c.end_seq, runs.c.partial, runs.c.time_provenance,
                                     runs.c.version, runs.c.graph_sample, runs.c.raw_expired_before,
                                     runs.c.seconds_expired_before, runs.c.clock_ahead_s)
                           .where(runs.c.run_id == run_id)).first()
        if row is None:
            return None
        totals = _totals(conn, [row.id])[row.id]
        reasons = conn.execute(
            sa.select(sr.c.reason, sa.func.sum(sr.c.steps))
            .where(sr.c.run_pk == row.id, sr.c.bucket_s == WHOLE_RUN, sr.c.reason != NO_REASON)
            .group_by(sr.c.reason).order_by(sa.func.sum(sr.c.steps).desc(), sr.c.reason)).all()
        end = None if row.end_seq is None else conn.execute(
            sa.select(rm.c.ts, rm.c.error, rm.c.rank, rm.c.phase, rm.c.graph_bs)
            .where(rm.c.run_pk == row.id, rm.c.seq == row.end_seq)).first()
    d = _run_dict(row, totals)
    config = None if row.config is None else readable_config(row.config)   # as checked at ingest
    sample = log_sample(row.source, config)
    if sample is not None:
        sample["logged"] = totals["stage_steps"].get(sample["stage"], 0)
    d.update(config=config, torch_version=row.torch_version, last_event_ts=row.last_event_ts,
             last_seen_at=row.last_seen_at, error=row.error, partial=bool(row.partial),
             time_provenance=row.time_provenance, version=row.version, clock_ahead_s=row.clock_ahead_s,
             detail={"graph_sample": row.graph_sample, "raw_expired_before": row.raw_expired_before,
                     "seconds_expired_before": row.seconds_expired_before, "log_sample": sample},
             reasons={reason: int(n) for reason, n in reasons},
             failure=dict(end._mapping) if end is not None and row.status == "failed" else None)
    return d


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
        by_mode = [sa.func.sum(sa.case((sr.c.mode == mode, sr.c.steps), else_=0)) for mode in MODES]
        query = (sa.select(tb, *by_mode).where(sr.c.run_pk == run.id, sr.c.bucket_s == source))
        if stage is not None:
            query = query.where(sr.c.stage.in_(stages_of(stage)))
        rows = conn.execute(query.group_by(tb).order_by(tb)).all()
    out: list[dict] = []
    for t, graph, padded, eager in rows:
        graph, padded, eager = int(graph), int(padded), int(eager)
        steps = graph + padded + eager
        out.append({"t": float(t), "graph": graph, "padded": padded, "eager": eager,
                    "steps": steps, "eager_ratio": eager / steps if steps else 0.0})
    return out


def reason_breakdown(store: Store, run_id: str) -> list[dict]:
    """Eager steps per reason, most steps first: reason, steps, duration_s, share."""
    with store.read() as conn:
        pk = _run_pk(conn, run_id)
        if pk is None:
            return []
        total = sa.func.sum(sr.c.steps)
        rows = conn.execute(
            sa.select(sr.c.reason, total, sa.func.sum(sr.c.duration_s))
            .where(sr.c.run_pk == pk, sr.c.bucket_s == WHOLE_RUN, sr.c.mode == "eager")
            .group_by(sr.c.reason).order_by(total.desc(), sr.c.reason)).all()
    eager = sum(int(n) for _r, n, _d in rows)
    return [{"reason": reason or None, "steps": int(n), "duration_s": float(d or 0.0),
             "share": _ratio(int(n), eager)} for reason, n, d in rows]


def batch_histogram(store: Store, run_id: str, stage: str | None = None) -> list[dict]:
    """Steps per (raw_bs, mode): raw_bs, mode, steps, num_tokens, padded_tokens."""
    with store.read() as conn:
        pk = _run_pk(conn, run_id)
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
        pk = _run_pk(conn, run_id)
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
        pk = _run_pk(conn, run_id)
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


def earlier_runs(store: Store, run_id: str, limit: int = 5) -> list[str]:
    """The newest ``limit`` runs of the same model, device and backend started before this one."""
    with store.read() as conn:
        row = conn.execute(sa.select(runs.c.model, runs.c.device, runs.c.backend, runs.c.started_at)
                           .where(runs.c.run_id == run_id)).first()
        if row is None:
            return []
        return list(conn.execute(
            sa.select(runs.c.run_id).where(runs.c.model == row.model, runs.c.device == row.device,
                                           runs.c.backend == row.backend, runs.c.started_at < row.started_at,
                                           runs.c.run_id != run_id)
            .order_by(runs.c.started_at.desc()).limit(limit)).scalars())


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
    (``run_summary``'s ``detail`` says from when)."""
    empty = {"rows": [], "sampled": False, "steps_read": 0}
    with store.read() as conn:
        pk = _run_pk(conn, run_id)
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


def _event_rows(store: Store, run_id: str, table: sa.Table, rename: dict[str, str] | None = None) -> list[dict]:
    rename = rename or {}
    cols = [c for c in table.columns if c.name != "run_pk"]
    with store.read() as conn:
        pk = _run_pk(conn, run_id)
        if pk is None:
            return []
        rows = conn.execute(sa.select(*cols).where(table.c.run_pk == pk).order_by(table.c.seq)).all()
    return [{rename.get(k, k): v for k, v in r._mapping.items()} for r in rows]


def captures(store: Store, run_id: str) -> list[dict]:
    """Capture events in seq order, as stored (wire field names)."""
    return _event_rows(store, run_id, cap)


def phases(store: Store, run_id: str) -> list[dict]:
    """Startup phases in seq order, as stored."""
    return _event_rows(store, run_id, ph)


def degrades(store: Store, run_id: str) -> list[dict]:
    """Degradation-ladder steps in seq order (``from``/``to`` as on the wire)."""
    return _event_rows(store, run_id, deg, {"from_state": "from", "to_state": "to"})


def parity(store: Store, run_id: str) -> list[dict]:
    """Parity checks in seq order, as stored."""
    return _event_rows(store, run_id, par)


def recordings(store: Store, run_id: str) -> list[dict]:
    """Inductor's recordings of compiled functions in seq order, as stored."""
    return _event_rows(store, run_id, rec)


def warnings(store: Store, run_id: str) -> list[dict]:
    """Warning events in seq order: seq, ts, code, message, rank."""
    return _event_rows(store, run_id, rw)


def alert_rules(store: Store) -> list[dict]:
    """Every alert rule, by name."""
    with store.read() as conn:
        rows = conn.execute(sa.select(ar).order_by(ar.c.name)).mappings().all()
    return [dict(r) for r in rows]


def alert_events(store: Store, run_id: str | None = None, limit: int = 200) -> list[dict]:
    """Alert history, newest first: id, rule_id, rule_name, run_id, run_name, status,
    threshold, started_at, ended_at, peak, value, steps, reason."""
    query = (sa.select(ae.c.id, ae.c.rule_id, ae.c.rule_name, runs.c.run_id, runs.c.name.label("run_name"),
                       ae.c.status, ae.c.threshold, ae.c.started_at, ae.c.ended_at, ae.c.peak, ae.c.value,
                       ae.c.steps, ae.c.reason)
             .join(runs, runs.c.id == ae.c.run_pk)
             .order_by(ae.c.started_at.desc(), ae.c.id.desc()).limit(limit))
    if run_id is not None:
        query = query.where(runs.c.run_id == run_id)
    with store.read() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


def run_exists(store: Store, run_id: str) -> bool:
    with store.read() as conn:
        return _run_pk(conn, run_id) is not None
