"""Retention: raw step detail is kept for a while, rollups for good.

Raw step events (``steps``, ``step_counts``) are kept ``REPLAYSCOPE_RAW_RETENTION``
(default 14 days) and the 1-second rollups ``REPLAYSCOPE_SECOND_RETENTION`` (default 7
days, the longest alert window); whole-run and minute rollups, batch sizes, reasons,
phases, captures and everything else are kept for good, so every page and alert still
works on an old run. Expiry goes by event time, a whole UTC day at a time: a day goes
once all of it is older than the retention, whenever its run started (a run's step events
may be older than its start, e.g. a log imported with its own record) — but never the
detail of a run that arrived (``runs.created_at``, the collector's clock) after the cut: an
imported log's retention counts from its import, not from its own timestamps. On
PostgreSQL a day partition holding such a run's steps stays until that run's time is up.
A run with step events before the cut records it (``runs.raw_expired_before``,
``runs.seconds_expired_before``), before anything is deleted and once more after; pages say
so, and ingest treats a step event older than its run's cut as a retry (it cannot be told
from one), so a late resend never counts twice, on SQLite and PostgreSQL alike.

On PostgreSQL the raw tables and the 1-second rollups are partitioned by day (migration
0006): expiry detaches and drops whole partitions (``DETACH ... CONCURRENTLY``, so
ingest keeps writing), and partitions are created ahead of time by the retention service
and on demand by ingest for any other day. On SQLite expiry deletes in small batches,
each its own short transaction, so ingest interleaves with it.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
import time
from dataclasses import dataclass, field

import sqlalchemy as sa

from replayscope.collector.settings import DAY_S, parse_retention
from replayscope.collector.store import Store
from replayscope.collector.tables import runs, step_counts, step_rollups, steps

log = logging.getLogger("replayscope.retention")

PARTITIONS_SCHEMA = "replayscope_partitions"
RAW_TABLES = ("steps", "step_counts")
SECOND_TABLE = "step_rollups"
DAYS_AHEAD = 2
DELETE_BATCH_ROWS = 5000
# pg_advisory locks: every partition DDL (create and drop) holds this one.
PARTITION_LOCK = 0x72730001


@dataclass(frozen=True)
class Policy:
    raw_s: float | None = 14 * DAY_S       # None: keep raw steps for good
    second_s: float | None = 7 * DAY_S     # None: keep 1-second rollups for good

    @classmethod
    def from_settings(cls, settings) -> "Policy":
        return cls(parse_retention(settings.raw_retention, "REPLAYSCOPE_RAW_RETENTION"),
                   parse_retention(settings.second_retention, "REPLAYSCOPE_SECOND_RETENTION"))


def cut_for(now: float, keep_s: float | None) -> float | None:
    """The expiry cut: the start of the first UTC day not wholly older than ``keep_s``."""
    if keep_s is None:
        return None
    return math.floor((now - keep_s) / DAY_S) * DAY_S


@dataclass
class PruneReport:
    raw_cut: float | None
    second_cut: float | None
    runs_marked: int = 0
    rows_deleted: dict[str, int] = field(default_factory=dict)      # SQLite
    partitions_dropped: list[str] = field(default_factory=list)     # PostgreSQL

    def lines(self) -> list[str]:
        def when(cut):
            return "kept for good" if cut is None else f"before {_utc(cut)}"
        out = [f"raw step events: {when(self.raw_cut)}; 1-second rollups: {when(self.second_cut)}",
               f"runs whose detail expired now: {self.runs_marked}"]
        if self.partitions_dropped:
            out.append(f"partitions dropped: {len(self.partitions_dropped)} ({', '.join(self.partitions_dropped)})")
        if any(self.rows_deleted.values()):
            out.append("rows deleted: " + ", ".join(f"{t} {n:,}" for t, n in sorted(self.rows_deleted.items())))
        if not self.partitions_dropped and not any(self.rows_deleted.values()):
            out.append("nothing to expire")
        return out


def _utc(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


# -- partitions (PostgreSQL) -----------------------------------------------------------------

def partition_name(table: str, day: int) -> str:
    """``<table>_d<YYYYMMDD>``: the partition of ``table`` holding UTC day number ``day``."""
    return f"{table}_d{(dt.datetime(1970, 1, 1) + dt.timedelta(days=day)):%Y%m%d}"


def day_of_partition(name: str) -> int | None:
    match = re.search(r"_d(\d{8})$", name)
    if match is None:
        return None
    return (dt.datetime.strptime(match.group(1), "%Y%m%d") - dt.datetime(1970, 1, 1)).days


def is_partitioned(store: Store) -> bool:
    return store.dialect == "postgresql"


def days_of(events: list[dict]) -> set[int]:
    """The UTC days (day numbers) the step events of a batch fall on."""
    return {int(e["ts"] // DAY_S) for e in events if e.get("kind") in ("step", "step_counts")}


def ensure_partitions(store: Store, days: set[int] | list[int]) -> list[str]:
    """Create the day partitions of the raw tables and the 1-second rollups that are missing;
    returns the names created. Serialised across collectors by an advisory lock."""
    if not is_partitioned(store) or not days:
        return []
    created: list[str] = []
    with store.write() as conn:
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s)", (PARTITION_LOCK,))
        existing = set(partitions_of(conn))
        for day in sorted(set(days)):
            lo, hi = day * DAY_S, (day + 1) * DAY_S
            for table in RAW_TABLES + (SECOND_TABLE,):
                name = partition_name(table, day)
                if (table, name) in existing:
                    continue
                bounds = f"({lo}) TO ({hi})" if table != SECOND_TABLE else f"(1, {lo}) TO (1, {hi})"
                conn.exec_driver_sql(f"CREATE TABLE {PARTITIONS_SCHEMA}.{name} PARTITION OF {table} "
                                     f"FOR VALUES FROM {bounds}")
                created.append(name)
    if created:
        log.info("created partitions %s", ", ".join(created))
    return created


def create_ahead(store: Store, now: float, days_ahead: int = DAYS_AHEAD) -> list[str]:
    """Partitions for yesterday through ``days_ahead`` days from now (wall clock)."""
    today = int(now // DAY_S)
    return ensure_partitions(store, range(today - 1, today + days_ahead + 1))


def partitions_of(conn) -> list[tuple[str, str]]:
    """(parent, partition) of every partition in the partition schema."""
    rows = conn.exec_driver_sql(
        "SELECT p.relname, c.relname FROM pg_inherits i "
        "JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_class p ON p.oid = i.inhparent "
        "WHERE n.nspname = %s AND p.relnamespace = to_regnamespace(current_schema())",
        (PARTITIONS_SCHEMA,)).all()
    return [(parent, child) for parent, child in rows]


def _drop_partitions(store: Store, cuts: dict[str, float | None]) -> list[str]:
    """Detach (concurrently: ingest keeps writing) and drop the day partitions wholly before
    each table's cut."""
    dropped: list[str] = []
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("SELECT pg_advisory_lock(%s)", (PARTITION_LOCK,))
        try:
            pending = {child for (child,) in conn.exec_driver_sql(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhdetachpending")}
            kept = {parent: _days_kept_for_recent_runs(conn, cut) for parent, cut in cuts.items() if cut is not None}
            for parent, child in partitions_of(conn):
                cut, day = cuts.get(parent), day_of_partition(child)
                if cut is None or day is None or (day + 1) * DAY_S > cut or day in kept[parent]:
                    continue
                finish = "FINALIZE" if child in pending else "CONCURRENTLY"
                conn.exec_driver_sql(f"ALTER TABLE {parent} DETACH PARTITION {PARTITIONS_SCHEMA}.{child} {finish}")
                conn.exec_driver_sql(f"DROP TABLE {PARTITIONS_SCHEMA}.{child}")
                dropped.append(child)
        finally:
            conn.exec_driver_sql("SELECT pg_advisory_unlock(%s)", (PARTITION_LOCK,))
    if dropped:
        log.info("dropped partitions %s", ", ".join(dropped))
    return dropped


def _days_kept_for_recent_runs(conn, cut: float) -> set[int]:
    """The UTC days with steps of runs that arrived after ``cut`` but have steps before it (an
    old log imported lately): their partitions stay until those runs' retention is up."""
    recent = sa.select(runs.c.id).where(runs.c.created_at >= cut, _first_minute() < cut)
    minutes = conn.execute(sa.select(sa.func.floor(step_rollups.c.t / DAY_S)).distinct()
                           .where(step_rollups.c.bucket_s == 60, step_rollups.c.run_pk.in_(recent),
                                  step_rollups.c.t < cut)).scalars()
    return {int(day) for day in minutes}


# -- pruning -------------------------------------------------------------------------------

def _first_minute() -> sa.ScalarSelect:
    """A run's first minute with steps: its minute rollups are kept for good, one row per
    minute any step fell in."""
    return (sa.select(sa.func.min(step_rollups.c.t))
            .where(step_rollups.c.run_pk == runs.c.id, step_rollups.c.bucket_s == 60)
            .scalar_subquery())


def _runs_with_detail_before(conn, cut: float, unmarked: sa.Column | None = None) -> list[int]:
    """Runs with step events before ``cut``, by event time, that arrived before it too (a
    run imported since keeps its detail: its retention counts from its import). With
    ``unmarked``: only those whose recorded cut is still earlier."""
    query = sa.select(runs.c.id).where(_first_minute() < cut, runs.c.created_at < cut)
    if unmarked is not None:
        query = query.where(sa.or_(unmarked.is_(None), unmarked < cut))
    return list(conn.execute(query.order_by(runs.c.id)).scalars())


def _mark_runs(store: Store, column: sa.Column, cut: float | None) -> list[int]:
    """Record the cut on every run with step events before it (by event time, whenever the
    run started); returns their keys. Done before anything is deleted, and again after, so
    ingest treats a resend of anything that went as a retry."""
    if cut is None:
        return []
    with store.write() as conn:
        pks = _runs_with_detail_before(conn, cut, unmarked=column)
        if pks:
            conn.execute(runs.update().where(runs.c.id.in_(pks)).values({column.name: cut}))
    return pks


def prune(store: Store, policy: Policy, now: float | None = None, *,
          batch_rows: int = DELETE_BATCH_ROWS) -> PruneReport:
    """Expire raw step events and 1-second rollups older than the policy keeps them, by
    event time."""
    now = time.time() if now is None else now
    report = PruneReport(cut_for(now, policy.raw_s), cut_for(now, policy.second_s))
    marked = _mark_both(store, report)
    if is_partitioned(store):
        cuts = {t: report.raw_cut for t in RAW_TABLES}
        cuts[SECOND_TABLE] = report.second_cut
        report.partitions_dropped = _drop_partitions(store, cuts)
    else:
        # SQLite: every run with detail before a cut (marked now or by an earlier prune), in
        # small transactions.
        deleted = {"steps": 0, "step_counts": 0, "step_rollups": 0}
        for run_pk in _runs_before(store, report.raw_cut):
            deleted["steps"] += _delete_by_seq(store, steps, run_pk, report.raw_cut, batch_rows)
            deleted["step_counts"] += _delete_by_seq(store, step_counts, run_pk, report.raw_cut, batch_rows)
        for run_pk in _runs_before(store, report.second_cut):
            deleted["step_rollups"] += _delete_seconds(store, run_pk, report.second_cut, batch_rows)
        report.rows_deleted = deleted
    # A step of a run with nothing before the cut a moment ago may have arrived meanwhile.
    report.runs_marked = len(marked | _mark_both(store, report))
    return report


def _mark_both(store: Store, report: PruneReport) -> set[int]:
    return (set(_mark_runs(store, runs.c.raw_expired_before, report.raw_cut))
            | set(_mark_runs(store, runs.c.seconds_expired_before, report.second_cut)))


def _runs_before(store: Store, cut: float | None) -> list[int]:
    if cut is None:
        return []
    with store.read() as conn:
        return _runs_with_detail_before(conn, cut)


def _delete_by_seq(store: Store, table: sa.Table, run_pk: int, cut: float, batch_rows: int) -> int:
    """Delete a run's rows with ts before ``cut``, a page of ``batch_rows`` seqs per
    transaction, walking up its key; stops at the first page wholly after the cut (seq
    follows time within a run)."""
    deleted = 0
    lo = None
    while True:
        with store.read() as conn:
            query = sa.select(table.c.seq, table.c.ts).where(table.c.run_pk == run_pk)
            if lo is not None:
                query = query.where(table.c.seq > lo)
            page = conn.execute(query.order_by(table.c.seq).limit(batch_rows)).all()
        if not page:
            return deleted
        first, last = page[0].seq, page[-1].seq
        if min(r.ts for r in page) >= cut:
            return deleted
        with store.write() as conn:
            deleted += conn.execute(table.delete().where(
                table.c.run_pk == run_pk, table.c.seq >= first, table.c.seq <= last, table.c.ts < cut)).rowcount
        lo = last


def _delete_seconds(store: Store, run_pk: int, cut: float, batch_rows: int) -> int:
    """Delete a run's 1-second rollups before ``cut`` in windows of about ``batch_rows`` rows."""
    sr = step_rollups
    deleted = 0
    window = max(1, batch_rows // 8)    # seconds per transaction: a few keys per second
    lo = -2**62
    while True:
        with store.read() as conn:
            first = conn.execute(sa.select(sa.func.min(sr.c.t)).where(
                sr.c.run_pk == run_pk, sr.c.bucket_s == 1, sr.c.t >= lo, sr.c.t < cut)).scalar()
        if first is None:
            return deleted
        hi = min(first + window, int(cut))
        with store.write() as conn:
            deleted += conn.execute(sr.delete().where(
                sr.c.run_pk == run_pk, sr.c.bucket_s == 1, sr.c.t >= first, sr.c.t < hi)).rowcount
        lo = hi


def run_retention(store: Store, policy: Policy, now: float | None = None) -> PruneReport:
    """One retention pass: partitions ahead (PostgreSQL), then expiry. The service's tick."""
    now = time.time() if now is None else now
    create_ahead(store, now)
    report = prune(store, policy, now)
    for line in report.lines():
        log.info("retention: %s", line)
    return report
