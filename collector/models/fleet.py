"""The fleet's figures per run, read from what is kept for good: whole-run rollups, captures
and phases, never raw steps (so they read the same after retention, and on a sharded store
need no query across runs over raw steps); and ``config_key``, the fact that makes two runs
comparable, which ingest stores with each run and the fleet and regressions group by.

Per run: ``eager_ratio`` (eager / all steps of the decode stages, as the Run page's tile;
prefill always runs eager), ``decode_padded_ratio`` (padding over the
tokens computed in the decode stages, ``replayscope.contract.wire.DECODE_STAGES``, as the Runs page), ``step_s``
(mean step time per mode in the decode stages, timed steps only), capture time
(as ``queries.run_summary``), ``startup_s`` (the run's start, or its first phase's if
earlier, to its log's ready line, else to its last phase's end, over phases with a known
length: the diagnosis's wall time), ``pool_bytes`` (largest graph pool a capture reported).
Unknown is None. ``version`` is the run record's, else ``torch <torch_version>``, else None
(not recorded).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any

import sqlalchemy as sa

from replayscope.collector.importers.stages import padding_known
from replayscope.collector.models import runs as run_reads
from replayscope.collector.models.rollups import WHOLE_RUN
from replayscope.collector.store import Store
from replayscope.collector.tables import captures as cap, phases as ph, runs, step_rollups as sr
from replayscope.contract.wire import DECODE_STAGES, MODES

# Configuration settings that make two runs comparable (outcomes such as pool sizes or
# timings, seeds and file names are left out).
CONFIG_KEYS = ("engine", "capture_sizes", "max_bs", "padding", "compile", "workload", "lora_graph_adapters",
               "verify_draft_len", "parity_every", "enforce_eager", "fail_capture_sizes")
GROUP_KEYS = ("model", "backend", "device", "version")


def config_key(model: str, backend: str, device: str, config: Any) -> str:
    """Same model, backend, device and configuration settings -> same key."""
    settings = {k: config[k] for k in CONFIG_KEYS if k in config} if isinstance(config, dict) else {}
    text = json.dumps([model, backend, device, settings], sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def version_of(version: str | None, torch_version: str | None) -> str | None:
    if version:
        return version
    return f"torch {torch_version}" if torch_version else None


@dataclass(frozen=True)
class Filters:
    model: str | None = None
    backend: str | None = None
    device: str | None = None
    version: str | None = None
    source: str | None = None
    since: float | None = None       # runs started at or after (unix s)
    until: float | None = None       # runs started before

    @classmethod
    def of(cls, **values: Any) -> "Filters":
        known = {f.name for f in fields(cls)}
        return cls(**{k: (v or None) for k, v in values.items() if k in known})


RUN_COLUMNS = (runs.c.id, runs.c.run_id, runs.c.name, runs.c.source, runs.c.model, runs.c.backend, runs.c.device,
             runs.c.version, runs.c.torch_version, runs.c.config_key, runs.c.status, runs.c.started_at,
             runs.c.ended_at, runs.c.graph_sample, runs.c.raw_expired_before, runs.c.seconds_expired_before)


def _where(query, f: Filters, *, for_baselines: bool):
    """Filters on the runs table. Baselines ignore the version and ``since`` (earlier runs of
    another version are what a run is compared with)."""
    for name in ("model", "backend", "device", "source"):
        value = getattr(f, name)
        if value is not None:
            query = query.where(getattr(runs.c, name) == value)
    if f.until is not None:
        query = query.where(runs.c.started_at < f.until)
    if not for_baselines and f.since is not None:
        query = query.where(runs.c.started_at >= f.since)
    return query


def _cond_sum(column, *conditions, type_=sa.BigInteger):
    # Cast: PostgreSQL sums integers as numeric, which would arrive as slow Decimals.
    return sa.cast(sa.func.sum(sa.case((sa.and_(*conditions), column), else_=None)), type_)


def _sum(column, type_=sa.BigInteger):
    return sa.cast(sa.func.sum(column), type_)


def _no_figures() -> dict[str, Any]:
    return {"steps": 0, "modes": {m: 0 for m in MODES}, "decode_num_tokens": 0, "decode_padded_tokens": 0,
            "decode_steps": 0, "decode_eager_steps": 0,
            "eager_ratio": None, "decode_padded_ratio": None, "step_s": {m: None for m in MODES},
            "step_sums": {m: (0.0, 0) for m in MODES}, "capture_total_s": None, "startup_s": None,
            "pool_bytes": None}


def _tuples(conn, query) -> list[tuple]:
    """The rows as plain tuples from the driver: building Row objects costs more than the
    queries themselves on a fleet of thousands of runs (the columns need no conversion)."""
    return conn.execute(query).cursor.fetchall()


def _of_runs(query, table: sa.Table, run_filter):
    """``query`` over ``table`` limited to the runs ``run_filter`` selects (None: every run)."""
    if run_filter is None:
        return query
    return query.select_from(table.join(runs, runs.c.id == table.c.run_pk)).where(run_filter)


def metrics(conn, pks: list[int], run_filter=None) -> dict[int, dict[str, Any]]:
    """Headline figures of the runs ``pks`` (which ``run_filter``, a WHERE clause on ``runs``,
    selects; None when they are every run), by run key: three grouped queries over
    whole-run rollups, captures and phases."""
    decode = sr.c.stage.in_(DECODE_STAGES)
    step_cols = [sr.c.run_pk, _sum(sr.c.steps), _cond_sum(sr.c.num_tokens, decode),
                 _cond_sum(sr.c.padded_tokens, decode), _cond_sum(sr.c.steps, decode),
                 _cond_sum(sr.c.steps, decode, sr.c.mode == "eager")]
    for mode in MODES:
        step_cols += [_cond_sum(sr.c.steps, sr.c.mode == mode),
                      _cond_sum(sr.c.duration_s, decode, sr.c.mode == mode, type_=sa.Float),
                      _cond_sum(sr.c.timed_steps, decode, sr.c.mode == mode)]
    wanted = set(pks)
    out: dict[int, dict[str, Any]] = {}
    query = _of_runs(sa.select(*step_cols), sr, run_filter).where(sr.c.bucket_s == WHOLE_RUN)
    for (pk, steps, tokens, padded, decode_steps, decode_eager, graph, graph_s, graph_t, padded_n, padded_s, padded_t,
         eager, eager_s, eager_t) in _tuples(conn, query.group_by(sr.c.run_pk)):
        if pk not in wanted:
            continue
        steps, tokens, padded = steps or 0, tokens or 0, padded or 0
        unknown = steps - (graph or 0) - (padded_n or 0) - (eager or 0)     # step_counts of mode unknown
        decode_steps, decode_eager = decode_steps or 0, decode_eager or 0
        out[pk] = {
            "steps": steps, "decode_num_tokens": tokens, "decode_padded_tokens": padded,
            "decode_steps": decode_steps, "decode_eager_steps": decode_eager,
            "modes": {"graph": graph or 0, "padded": padded_n or 0, "eager": eager or 0, "unknown": unknown},
            "step_sums": {"graph": (graph_s or 0.0, graph_t or 0), "padded": (padded_s or 0.0, padded_t or 0),
                          "eager": (eager_s or 0.0, eager_t or 0)},
            "step_s": {"graph": graph_s / graph_t if graph_t else None,
                       "padded": padded_s / padded_t if padded_t else None,
                       "eager": eager_s / eager_t if eager_t else None},
            "eager_ratio": decode_eager / decode_steps if decode_steps and not unknown else None,
            "decode_padded_ratio": padded / (tokens + padded) if tokens + padded else None,
            "capture_total_s": None, "startup_s": None, "pool_bytes": None}
    for pk in wanted - out.keys():
        out[pk] = _no_figures()
    for pk, missing in run_reads.not_measured(conn, sorted(wanted)).items():
        if "padding" in missing:             # a source that cannot see padding (a scrape): unknown, not 0
            out[pk]["decode_padded_ratio"] = None
    # Capture time as queries.run_summary has it: the capture phases when logged (the whole
    # capture's time), else the per-size sum; of a multi-rank log only its headline rank's rows.
    query = _of_runs(sa.select(cap.c.run_pk, cap.c.rank, _sum(cap.c.duration_s, sa.Float),
                               sa.func.max(cap.c.pool_bytes)), cap, run_filter)
    by_capture = _tuples(conn, query.group_by(cap.c.run_pk, cap.c.rank))
    is_capture = sa.or_(ph.c.phase == "capture", ph.c.phase.like("capture!_%", escape="!"))
    query = _of_runs(sa.select(ph.c.run_pk, ph.c.phase, ph.c.rank, _sum(ph.c.duration_s, sa.Float)), ph, run_filter)
    by_phase = _tuples(conn, query.where(ph.c.duration_s.is_not(None), is_capture)
                       .group_by(ph.c.run_pk, ph.c.phase, ph.c.rank))
    ranked = {pk for pk, rank, *_ in by_capture if rank is not None} | {pk for pk, _n, rank, _d in by_phase
                                                                           if rank is not None}
    headline = run_reads.headlines(conn, sorted(ranked & wanted)) if ranked else {}
    for pk, rank, total, pool in by_capture:
        figures = out.get(pk)
        if figures is None or not run_reads.is_headline(headline.get(pk), "captures", rank):
            continue
        if total is not None:
            figures["capture_total_s"] = (figures["capture_total_s"] or 0.0) + total
        if pool is not None:
            figures["pool_bytes"] = max(pool, figures["pool_bytes"] or 0)
    phase_totals: dict[int, float] = {}
    for pk, name, rank, total in by_phase:
        if pk in out and run_reads.is_headline(headline.get(pk), name, rank):
            phase_totals[pk] = phase_totals.get(pk, 0.0) + total
    for pk, total in phase_totals.items():
        out[pk]["capture_total_s"] = total
    start = sa.func.coalesce(ph.c.start_ts, ph.c.ts - ph.c.duration_s)
    query = _of_runs(sa.select(ph.c.run_pk, sa.func.min(start), sa.func.max(start + ph.c.duration_s)), ph,
                     run_filter)
    spans = {pk: (first, last) for pk, first, last in
             _tuples(conn, query.where(ph.c.duration_s.is_not(None)).group_by(ph.c.run_pk))
             if pk in out and first is not None and last is not None}
    # the startup's wall time, as the diagnosis has it: from the run's start to its log's ready
    # line (config ready_at), else to the end of its last phase
    # what the source can know: padding is unknown to an engine's /metrics without a capture list
    query = sa.select(runs.c.id, runs.c.started_at, runs.c.config["ready_at"].as_float(), runs.c.source,
                      runs.c.config["capture_sizes"].as_json())
    for pk, started_at, ready_at, source, sizes in _tuples(conn, query if run_filter is None
                                                           else query.where(run_filter)):
        if pk in out and not padding_known(source, {"capture_sizes": sizes}):
            out[pk]["decode_padded_ratio"] = None
        if pk in spans:
            first, last = spans[pk]
            end = ready_at if ready_at is not None and ready_at >= last else last
            out[pk]["startup_s"] = max(0.0, end - min(first, started_at if started_at <= end else first))
    return out


def run_row(r, m: dict[str, Any]) -> dict[str, Any]:
    """A fleet row from a ``RUN_COLUMNS`` row and its ``metrics`` figures."""
    (_pk, run_id, name, source, model, backend, device, version, torch_version, key, status, started_at,
     ended_at, graph_sample, raw_expired_before, seconds_expired_before) = r
    step_s = m["step_s"]
    return {
        "run_id": run_id, "name": name, "source": source, "model": model, "backend": backend, "device": device,
        "version": version_of(version, torch_version), "config_key": key, "status": status,
        "started_at": started_at, "ended_at": ended_at, "graph_sample": graph_sample,
        "raw_expired_before": raw_expired_before, "seconds_expired_before": seconds_expired_before,
        **m, "graph_step_s": step_s["graph"], "padded_step_s": step_s["padded"], "eager_step_s": step_s["eager"],
    }


def rows_of_runs(conn, pks) -> dict[int, dict[str, Any]]:
    """Fleet rows of the runs ``pks`` (run key -> row), oldest first, with their figures."""
    chosen = runs.c.id.in_(pks)
    rows = conn.execute(sa.select(*RUN_COLUMNS).where(chosen).order_by(runs.c.started_at, runs.c.id)).all()
    figures = metrics(conn, [r.id for r in rows], chosen)
    return {r.id: run_row(r, figures[r.id]) for r in rows}


def run_config(conn, run_id: str):
    """The run's id, config_key and started_at (a row); None for an unknown run."""
    return conn.execute(sa.select(runs.c.id, runs.c.config_key, runs.c.started_at)
                        .where(runs.c.run_id == run_id)).first()


def finished_before(conn, key: str, started_at: float, limit: int, *, other_than: int | None = None) -> list[int]:
    """The newest ``limit`` finished runs of configuration ``key`` started before ``started_at``
    (a baseline), newest first; ``other_than``: never that run."""
    where = [runs.c.config_key == key, runs.c.status == "finished", runs.c.started_at < started_at]
    if other_than is not None:
        where.append(runs.c.id != other_than)
    return list(conn.execute(sa.select(runs.c.id).where(*where)
                             .order_by(runs.c.started_at.desc()).limit(limit)).scalars())


def started_since(conn, key: str, started_at: float) -> list[int]:
    """Every run of configuration ``key`` started at or after ``started_at``."""
    return list(conn.execute(sa.select(runs.c.id).where(runs.c.config_key == key,
                                                        runs.c.started_at >= started_at)).scalars())


def newer_finished(conn, key: str, started_at: float) -> bool:
    """Whether a run of configuration ``key`` started after ``started_at`` has finished."""
    return conn.execute(sa.select(runs.c.id).where(
        runs.c.config_key == key, runs.c.status == "finished", runs.c.started_at > started_at).limit(1)).first() is not None


def seen_since(conn, last_event_after: float) -> list:
    """Runs with an event after ``last_event_after``: id, name, config_key, started_at."""
    return conn.execute(sa.select(runs.c.id, runs.c.name, runs.c.config_key, runs.c.started_at)
                        .where(runs.c.last_event_ts > last_event_after)).all()


def fleet_options(store: Store) -> dict[str, list[str]]:
    """The values each filter can take, over every run."""
    with store.read() as conn:
        rows = conn.execute(sa.select(runs.c.model, runs.c.backend, runs.c.device, runs.c.version,
                                      runs.c.torch_version, runs.c.source).distinct()).all()
    options: dict[str, set] = {k: set() for k in GROUP_KEYS + ("source",)}
    for model, backend, device, version, torch_version, source in rows:
        for key, value in (("model", model), ("backend", backend), ("device", device),
                           ("version", version_of(version, torch_version)), ("source", source)):
            if value is not None:
                options[key].add(value)
    return {k: sorted(v) for k, v in options.items()}


def run_rows(store: Store, filters: Filters | None = None) -> list[dict[str, Any]]:
    """Every run the filters select (and the earlier runs their baselines need), oldest
    first, with its figures."""
    f = filters or Filters()
    with store.read() as conn:
        selected = _where(sa.select(*RUN_COLUMNS), f, for_baselines=True)
        rows = _tuples(conn, selected.order_by(runs.c.started_at, runs.c.id))
        filtered = selected.whereclause is not None
        run_filter = runs.c.id.in_(sa.select(selected.subquery().c.id).scalar_subquery()) if filtered else None
        figures = metrics(conn, [r[0] for r in rows], run_filter)
    return [run_row(r, figures[r[0]]) for r in rows]
