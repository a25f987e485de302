"""Writes of runs and their events: registering a run, storing a batch of its events,
its bookkeeping, the heartbeat timeout, deleting it.

Plain functions of a connection, inside the caller's transaction: ``replayscope.collector.ingest``
holds one batch's (all or nothing), ``replayscope.collector.services.deletion`` one deletion's. Storing events
is the hot path: driver-level ``exec_driver_sql`` executemany with positional tuples,
its statements built once per dialect, never the ORM.
"""

from __future__ import annotations

from typing import Any, Iterable

import sqlalchemy as sa

from replayscope.collector import tables as t
from replayscope.collector.store import Store

# Column order of a ``steps`` row, as ingest builds it from a step event.
STEP_COLUMNS = ("run_pk", "seq", "ts", "stage", "mode", "raw_bs", "graph_bs", "num_tokens",
                "padded_tokens", "reason", "duration_s", "evidence")


def _same(*columns: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return columns, columns


_EVENT_TABLES: dict[str, tuple[sa.Table, tuple[str, ...], tuple[str, ...]]] = {
    # kind: (table, columns after run_pk, event keys for those columns)
    "phase": (t.phases, *_same("seq", "ts", "phase", "start_ts", "duration_s", "mem_bytes", "provenance",
                               "rank")),
    "capture": (t.captures, *_same("seq", "ts", "graph_bs", "stage", "duration_s", "pool_bytes",
                                   "pool_delta_bytes", "status", "error", "variant", "provenance", "rank")),
    "step_counts": (t.step_counts, *_same("seq", "ts", "stage", "mode", "reason", "count", "num_tokens",
                                          "padded_tokens", "duration_s", "interval_s", "provenance",
                                          "evidence", "raw_bs", "graph_bs", "batch_sizes")),
    "degrade": (t.degrades, ("seq", "ts", "from_state", "to_state", "error", "graph_bs", "rank"),
                ("seq", "ts", "from", "to", "error", "graph_bs", "rank")),
    "parity": (t.parity_checks, *_same("seq", "ts", "graph_bs", "max_abs_diff", "rel_err", "tolerance")),
    "run_end": (t.run_marks, *_same("seq", "ts", "kind", "status", "error", "rank", "phase", "graph_bs")),
    "heartbeat": (t.run_marks, *_same("seq", "ts", "kind", "status", "error", "rank", "phase", "graph_bs")),
    "warning": (t.run_warnings, *_same("seq", "ts", "code", "message", "rank")),
    "recording": (t.recordings, *_same("seq", "ts", "function", "cause", "evidence", "graph_bs", "recordings",
                                       "rerecords", "rerecord_limit", "rank")),
}
# kind -> the event's keys, in the order of its row after run_pk (``insert_events`` takes such rows).
EVENT_KEYS: dict[str, tuple[str, ...]] = {kind: keys for kind, (_table, _cols, keys) in _EVENT_TABLES.items()}
_SEQ_TABLES = (t.steps, t.phases, t.captures, t.step_counts, t.degrades, t.parity_checks, t.run_marks,
               t.run_warnings, t.recordings)
# Every table holding rows of a run (SQLite's foreign keys are off: a deletion names them all).
RUN_TABLES = (t.steps, t.step_counts, t.phases, t.captures, t.degrades, t.parity_checks, t.run_marks,
              t.run_warnings, t.recordings, t.step_rollups, t.batch_rollups, t.alert_events)


# -- the run --------------------------------------------------------------------------------

def run_columns(conn, run_id: str, names: Iterable[str]):
    """The run's ``id`` and the columns ``names`` (a row), or None for an unknown run."""
    columns = [t.runs.c.id] + [t.runs.c[name] for name in names]
    return conn.execute(sa.select(*columns).where(t.runs.c.run_id == run_id)).first()


def insert_run(conn, row: dict[str, Any]) -> None:
    conn.execute(t.runs.insert(), row)


def update_run(conn, run_pk: int, values: dict[str, Any]) -> None:
    conn.execute(t.runs.update().where(t.runs.c.id == run_pk).values(**values))


def run_for_batch(conn, run_id: str):
    """What storing a batch needs of its run (id, source, model, status, end_seq,
    last_event_ts, raw_expired_before, clock_ahead_s), or None for an unknown run."""
    r = t.runs.c
    return conn.execute(
        sa.select(r.id, r.source, r.model, r.status, r.end_seq, r.last_event_ts, r.raw_expired_before,
                  r.clock_ahead_s)
        .where(r.run_id == run_id)
    ).first()


def interrupt_stale_runs(conn, seen_before: float) -> list[str]:
    """Runs still ``running`` last seen before ``seen_before`` become ``interrupted``, ended
    at their last event; their run ids."""
    runs = t.runs
    stale = conn.execute(sa.select(runs.c.id, runs.c.run_id, runs.c.last_event_ts)
                         .where(runs.c.status == "running", runs.c.last_seen_at < seen_before)).all()
    for row in stale:
        conn.execute(runs.update().where(runs.c.id == row.id)
                     .values(status="interrupted", ended_at=row.last_event_ts))
    return [row.run_id for row in stale]


def delete_run_rows(conn, run_pk: int) -> None:
    """Every row recorded for the run, then the run."""
    for table in RUN_TABLES:
        conn.execute(table.delete().where(table.c.run_pk == run_pk))
    conn.execute(t.runs.delete().where(t.runs.c.id == run_pk))


# -- its events -----------------------------------------------------------------------------

_RANGE_SQL: dict[tuple, str] = {}


def _seqs_in_range_sql(dialect) -> str:
    """One text statement for the common case, built once: this runs in every ingest."""
    key = (dialect.name, dialect.paramstyle)
    sql = _RANGE_SQL.get(key)
    if sql is None:
        mark = "?" if dialect.paramstyle in ("qmark", "numeric") else "%s"
        fmt = dialect.identifier_preparer.format_table
        sql = " UNION ALL ".join(f"SELECT seq FROM {fmt(tb)} WHERE run_pk = {mark} AND seq BETWEEN {mark} AND {mark}"
                                 for tb in _SEQ_TABLES)
        _RANGE_SQL[key] = sql
    return sql


def existing_seqs(conn, run_pk: int, seqs: list[int]) -> set[int]:
    """Which of ``seqs`` the run already has stored, in any event table."""
    lo, hi = min(seqs), max(seqs)
    if hi - lo <= 4 * len(seqs) + 64:
        params = (run_pk, lo, hi) * len(_SEQ_TABLES)
        return {r[0] for r in conn.exec_driver_sql(_seqs_in_range_sql(conn.dialect), params)}
    found: set[int] = set()
    for i in range(0, len(seqs), 500):
        chunk = seqs[i:i + 500]
        parts = [sa.select(tb.c.seq).where(tb.c.run_pk == run_pk, tb.c.seq.in_(chunk))
                 for tb in _SEQ_TABLES]
        found.update(r[0] for r in conn.execute(sa.union_all(*parts)))
    return found


def insert_events(store: Store, conn, step_rows: list[tuple], rows_by_kind: dict[str, list[tuple]]) -> None:
    """One executemany per table: ``step_rows`` as ``STEP_COLUMNS``, each other kind's rows
    as run_pk then ``EVENT_KEYS[kind]``. ``store`` gives the dialect's INSERT text."""
    if step_rows:
        conn.exec_driver_sql(store.insert_sql(t.steps, STEP_COLUMNS), step_rows)
    for kind, rows in rows_by_kind.items():
        table, cols, _keys = _EVENT_TABLES[kind]
        conn.exec_driver_sql(store.insert_sql(table, ("run_pk",) + cols), rows)


def sums_overflowed(conn, run_pk: int) -> bool:
    """SQLite turns an integer sum that overflows into a float, silently: look for one in
    the run's whole-run totals (the largest sums) and batch-size totals. (PostgreSQL raises
    instead: always False there.)"""
    if conn.dialect.name != "sqlite":
        return False
    ints = ("steps", "num_tokens", "padded_tokens")
    checks = " OR ".join(f"typeof({c}) = 'real'" for c in ints)
    sql = (f"SELECT 1 FROM step_rollups WHERE run_pk = ? AND bucket_s = 0 AND ({checks} OR typeof(timed_steps) = 'real') "
           f"UNION ALL SELECT 1 FROM batch_rollups WHERE run_pk = ? AND ({checks}) LIMIT 1")
    return conn.exec_driver_sql(sql, (run_pk, run_pk)).first() is not None
