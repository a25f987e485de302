"""Reads about whole runs: the runs list, one run's summary (totals from the whole-run
rollups, captures, where its detail expired, how its log sampled steps), each rank's
headline figures, the earlier runs of its configuration. Part of the read model
(``replayscope.collector.models.queries`` says its definitions).
"""

from __future__ import annotations

from typing import Any
import sqlalchemy as sa

from replayscope.collector.importers.stages import log_sample, padding_known
from replayscope.collector.models.events import phases, run_pk_of, warnings
from replayscope.collector.models.rollups import NO_REASON, WHOLE_RUN
from replayscope.collector.store import Store
from replayscope.collector.tables import (alert_events as ae, captures as cap, phases as ph, run_marks as rm,
                                          runs, step_rollups as sr)
from replayscope.contract.wire import DECODE_STAGES, MODE_UNKNOWN, STEP_COUNT_MODES, readable_config


_RUN_COLS = (runs.c.id, runs.c.run_id, runs.c.name, runs.c.source, runs.c.backend, runs.c.model,
             runs.c.device, runs.c.status, runs.c.started_at, runs.c.ended_at)


def ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


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


def not_measured(conn, run_pks: list[int]) -> dict[int, list[str]]:
    """Per run whose source names them (a scrape's ``config.not_measured``): what it cannot give."""
    out = {}
    for pk, config in conn.execute(sa.select(runs.c.id, runs.c.config).where(runs.c.id.in_(run_pks))):
        missing = readable_config(config).get("not_measured")
        if missing:
            out[pk] = [m for m in missing if m]
    return out


def _totals(conn, run_pks: list[int]) -> dict[int, dict[str, Any]]:
    """Per run: modes (``unknown``: steps the source counted without their mode), steps (and
    per stage), tokens (all stages and the decode stages), capture time and firing alerts.
    A share the source cannot give is None: the eager ratios when some steps' mode is
    unknown, the padding when the run's source cannot see it (``not_measured``)."""
    out = {pk: {"steps": 0, "modes": {m: 0 for m in STEP_COUNT_MODES}, "stage_steps": {}, "num_tokens": 0,
                "padded_tokens": 0, "decode_num_tokens": 0, "decode_padded_tokens": 0, "decode_steps": 0,
                "decode_eager_steps": 0,
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
            o["decode_steps"] += int(n)
            o["decode_eager_steps"] += int(n) if mode == "eager" else 0
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
    missing = not_measured(conn, run_pks)
    for pk, o in out.items():
        o["not_measured"] = missing.get(pk, [])
        o["eager_ratio"] = None if o["modes"][MODE_UNKNOWN] else ratio(o["modes"]["eager"], o["steps"])
        padding_unknown = "padding" in o["not_measured"]
        o["padded_ratio"] = None if padding_unknown else ratio(o["padded_tokens"], o["num_tokens"] + o["padded_tokens"])
        decode = o["decode_num_tokens"] + o["decode_padded_tokens"]
        o["decode_padded_ratio"] = o["decode_padded_tokens"] / decode if decode and not padding_unknown else None
        o["decode_eager_ratio"] = (o["decode_eager_steps"] / o["decode_steps"]
                                   if o["decode_steps"] and not o["modes"][MODE_UNKNOWN] else None)
    return out


def _run_dict(row, totals: dict[str, Any], config: dict[str, Any] | None) -> dict[str, Any]:
    """A run's columns and totals; padding its source cannot know is null, not 0."""
    d = {c.name: row._mapping[c.name] for c in _RUN_COLS if c.name != "id"}
    d.update(totals)
    d["padding_known"] = padding_known(d["source"], config)
    sample = log_sample(d["source"], config)
    d["decode_sampled_every"] = sample["every"] if sample and sample["stage"] in DECODE_STAGES else None
    if not d["padding_known"]:
        d.update(padded_ratio=None, decode_padded_ratio=None)
    return d


def list_runs(store: Store, limit: int = 500, *, source: str | None = None, status: str | None = None,
              model: str | None = None) -> list[dict]:
    """The newest runs first, each with its step totals; only those of ``source``, ``status``
    and ``model`` where given."""
    query = sa.select(*_RUN_COLS, runs.c.config)
    for column, value in ((runs.c.source, source), (runs.c.status, status), (runs.c.model, model)):
        if value is not None:
            query = query.where(column == value)
    with store.read() as conn:
        rows = conn.execute(query.order_by(runs.c.started_at.desc(), runs.c.id.desc()).limit(limit)).all()
        totals = _totals(conn, [r.id for r in rows])
    return [_run_dict(r, totals[r.id], None if r.config is None else readable_config(r.config)) for r in rows]


def run_summary(store: Store, run_id: str) -> dict | None:
    """One run: the ``list_runs`` keys plus config, torch_version, reasons, last_event_ts.

    Extra keys: ``error`` (from run_end), ``last_seen_at`` (collector clock), ``failure``
    (where a failed run failed: error, rank, phase, graph_bs, ts; None unless it said),
    ``partial`` (the source did not see the start), ``time_provenance``, ``version``, and
    ``step_detail``: how much step detail is stored (``graph_sample``: 1 in N graph steps sent
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
    config = None if row.config is None else readable_config(row.config)   # as checked at ingest
    d = _run_dict(row, totals, config)
    sample = log_sample(row.source, config)
    if sample is not None:
        sample["logged"] = totals["stage_steps"].get(sample["stage"], 0)
    d.update(config=config, torch_version=row.torch_version, last_event_ts=row.last_event_ts,
             last_seen_at=row.last_seen_at, error=row.error, partial=bool(row.partial),
             time_provenance=row.time_provenance, version=row.version, clock_ahead_s=row.clock_ahead_s,
             step_detail={"graph_sample": row.graph_sample, "raw_expired_before": row.raw_expired_before,
                     "seconds_expired_before": row.seconds_expired_before, "log_sample": sample},
             reasons={reason: int(n) for reason, n in reasons},
             failure=dict(end._mapping) if end is not None and row.status == "failed" else None)
    return d


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


def run_exists(store: Store, run_id: str) -> bool:
    with store.read() as conn:
        return run_pk_of(conn, run_id) is not None


def gauge_counts(store: Store) -> tuple[dict[str, int], dict[str, int]]:
    """What the store gauges show at scrape time (``replayscope.collector.api.metrics``): firing alerts by
    rule name and runs by status; both empty while the store does not answer."""
    try:
        with store.read() as conn:
            firing = dict(conn.execute(sa.select(ae.c.rule_name, sa.func.count())
                                       .where(ae.c.status == "firing").group_by(ae.c.rule_name)).all())
            by_status = dict(conn.execute(sa.select(runs.c.status, sa.func.count()).group_by(runs.c.status)).all())
    except sa.exc.OperationalError:
        return {}, {}
    return firing, by_status
