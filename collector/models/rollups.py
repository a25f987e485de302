"""Step rollups: per run and time bucket, counts and sums by stage, mode and reason.

Buckets are 1 s and 60 s of the event's ``ts``; bucket 0 is the whole run (``t`` = 0),
which is what run summaries and reason breakdowns read. ``batch_rollups`` keeps per-run
totals by (stage, raw_bs, mode, reason) for the batch-size histogram and for the cost of
each eager reason against graph replays of the same sizes. Both raw ``step`` events
and ``step_counts`` aggregates (importers; sampled graph steps with their ``batch_sizes``)
feed them; ingest adds each accepted event exactly once, in the same transaction as the
raw rows, so rollups equal the raw data. Rows are upserted in key order, so two collectors
writing one run's rollups at once cannot deadlock.
"""

from __future__ import annotations

import math
from typing import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from replayscope.collector.tables import ROLLUP_SUMS, batch_rollups, step_rollups

BUCKETS_S = (1, 60)
WHOLE_RUN = 0
NO_REASON = ""   # rollup key for "no reason" (non-eager steps)

# A step's fields the rollups sum, by name.
STEP_FIELDS = ("ts", "stage", "mode", "reason", "raw_bs", "num_tokens", "padded_tokens", "duration_s")

# key -> [steps, num_tokens, padded_tokens, duration_s, timed_steps]
RollupMap = dict[tuple[int, str, str, str], list]
BatchMap = dict[tuple[str, int, str, str], list]


class Accumulator:
    """Collects one batch's steps in memory; ``flush`` upserts the sums."""

    __slots__ = ("seconds", "batches")

    def __init__(self) -> None:
        self.seconds: RollupMap = {}   # (second, stage, mode, reason) -> sums
        self.batches: BatchMap = {}    # (stage, raw_bs, mode, reason) -> sums

    def add_step_rows(self, rows: Iterable[tuple], columns: tuple[str, ...]) -> None:
        """Steps as rows whose fields ``columns`` names (ingest passes its ``steps`` rows): the
        one place the rollup rule is written, as one loop because it is ingest's hot path."""
        i_ts, i_stage, i_mode, i_reason, i_bs, i_tokens, i_pad, i_dur = (columns.index(c) for c in STEP_FIELDS)
        seconds, batches, floor = self.seconds, self.batches, math.floor
        for r in rows:
            stage, mode, reason_key, tokens, pad, dur = (r[i_stage], r[i_mode], r[i_reason] or NO_REASON,
                                                         r[i_tokens], r[i_pad], r[i_dur])
            timed = 1
            if dur is None:
                dur, timed = 0.0, 0
            key = (floor(r[i_ts]), stage, mode, reason_key)
            a = seconds.get(key)
            if a is None:
                seconds[key] = [1, tokens, pad, dur, timed]
            else:
                a[0] += 1; a[1] += tokens; a[2] += pad; a[3] += dur; a[4] += timed
            bkey = (stage, r[i_bs], mode, reason_key)
            b = batches.get(bkey)
            if b is None:
                batches[bkey] = [1, tokens, pad, dur, timed]
            else:
                b[0] += 1; b[1] += tokens; b[2] += pad; b[3] += dur; b[4] += timed

    def add_counts(self, ts: float, stage: str, mode: str, reason: str | None, count: int,
                   num_tokens: int, padded_tokens: int, duration_s: float | None,
                   raw_bs: int | None = None, batch_sizes: dict | None = None) -> None:
        key = (math.floor(ts), stage, mode, reason or NO_REASON)
        timed = duration_s is not None
        acc = self.seconds.setdefault(key, [0, 0, 0, 0.0, 0])
        acc[0] += count
        acc[1] += num_tokens
        acc[2] += padded_tokens
        acc[3] += duration_s if timed else 0.0
        acc[4] += count if timed else 0
        if raw_bs is not None:       # per-size counts feed the batch-size histogram too
            bacc = self.batches.setdefault((stage, raw_bs, mode, reason or NO_REASON), [0, 0, 0, 0.0, 0])
            bacc[0] += count
            bacc[1] += num_tokens
            bacc[2] += padded_tokens
            bacc[3] += duration_s if timed else 0.0
            bacc[4] += count if timed else 0
        for size, part in (batch_sizes or {}).items():     # several sizes in one event (sampling)
            bacc = self.batches.setdefault((stage, int(size), mode, reason or NO_REASON), [0, 0, 0, 0.0, 0])
            bacc[0] += part["count"]
            bacc[1] += part["num_tokens"]
            bacc[2] += part["padded_tokens"]
            bacc[3] += part["duration_s"] if timed else 0.0
            bacc[4] += part["count"] if timed else 0

    def __bool__(self) -> bool:
        return bool(self.seconds)

    def rollup_rows(self, run_pk: int) -> list[dict]:
        """Rows for every bucket size, derived from the per-second sums."""
        levels: dict[tuple[int, int, str, str, str], list] = {}
        for (second, stage, mode, reason), acc in self.seconds.items():
            for bucket in BUCKETS_S + (WHOLE_RUN,):
                t = 0 if bucket == WHOLE_RUN else second - second % bucket
                key = (bucket, t, stage, mode, reason)
                cur = levels.get(key)
                if cur is None:
                    levels[key] = list(acc)
                else:
                    for i in range(5):
                        cur[i] += acc[i]
        return [
            {"run_pk": run_pk, "bucket_s": b, "t": t, "stage": s, "mode": m, "reason": r,
             "steps": a[0], "num_tokens": a[1], "padded_tokens": a[2], "duration_s": a[3],
             "timed_steps": a[4]}
            for (b, t, s, m, r), a in sorted(levels.items())
        ]

    def batch_rows(self, run_pk: int) -> list[dict]:
        return [
            {"run_pk": run_pk, "stage": s, "raw_bs": bs, "mode": m, "reason": r, "steps": a[0],
             "num_tokens": a[1], "padded_tokens": a[2], "duration_s": a[3], "timed_steps": a[4]}
            for (s, bs, m, r), a in sorted(self.batches.items())
        ]

    def flush(self, conn: Connection, run_pk: int) -> None:
        _upsert_add(conn, step_rollups, self.rollup_rows(run_pk),
                    ROLLUP_SUMS)
        if self.batches:
            _upsert_add(conn, batch_rollups, self.batch_rows(run_pk),
                        ROLLUP_SUMS)


def _upsert_add(conn: Connection, table: sa.Table, rows: list[dict], sums: tuple[str, ...]) -> None:
    """INSERT rows, adding to the sums of rows whose key exists: one driver-level executemany
    (the ORM-free path: this runs in every ingest transaction)."""
    if not rows:
        return
    if conn.dialect.name not in ("sqlite", "postgresql"):  # pragma: no cover
        raise NotImplementedError(f"rollups need sqlite or postgresql, not {conn.dialect.name}")
    columns = tuple(rows[0])
    conn.exec_driver_sql(_upsert_sql(conn.dialect, table, columns, sums),
                         [tuple(row[c] for c in columns) for row in rows])


_UPSERT_SQL: dict[tuple, str] = {}


def _upsert_sql(dialect, table: sa.Table, columns: tuple[str, ...], sums: tuple[str, ...]) -> str:
    """``INSERT ... ON CONFLICT (key) DO UPDATE SET s = table.s + excluded.s`` (SQLite and PostgreSQL)."""
    cache_key = (dialect.name, dialect.paramstyle, table.name, columns, sums)
    sql = _UPSERT_SQL.get(cache_key)
    if sql is None:
        quote = dialect.identifier_preparer.quote
        name = dialect.identifier_preparer.format_table(table)
        mark = "?" if dialect.paramstyle in ("qmark", "numeric") else "%s"
        keys = ", ".join(quote(c.name) for c in table.primary_key.columns)
        updates = ", ".join(f"{quote(c)} = {name}.{quote(c)} + excluded.{quote(c)}" for c in sums)
        sql = (f"INSERT INTO {name} ({', '.join(quote(c) for c in columns)}) "
               f"VALUES ({', '.join([mark] * len(columns))}) ON CONFLICT ({keys}) DO UPDATE SET {updates}")
        _UPSERT_SQL[cache_key] = sql
    return sql
