"""Ingest: the one door into the store for runs and their events.

Every event is validated with ``replayscope.contract.wire.validate_event`` before anything is
written; one invalid event rejects the batch (``InvalidBatch``) and nothing is written.
A batch is one transaction: raw rows, rollups and the run's bookkeeping commit together
or not at all. A repeated ``(run_id, seq)`` is a retry and is skipped, so rollups never
count an event twice. The statements are ``replayscope.collector.models.run_writes``' (the hot path:
Core ``exec_driver_sql`` executemany with positional tuples, not the ORM).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import exc as sa_exc

from replayscope.collector.models import retention, run_writes
from replayscope.collector.models.fleet import config_key
from replayscope.collector.models.rollups import Accumulator
from replayscope.collector.store import Store, StoreUnavailable
from replayscope.contract.errors import Invalid, NotFound
from replayscope.contract.wire import WireError, validate_event, validate_run

MAX_CONFIG_DEPTH = 16
# An event stamped ahead of the collector's clock moves its run's clock (last_event_ts, which
# alert evaluation follows) only to its arrival: one future-stamped event cannot push the
# evaluation of a run past data still to come. Ahead by more than this, the run says so.
CLOCK_AHEAD_NOTED_S = 60.0


class InvalidRun(Invalid):
    def __init__(self, field: str, message: str):
        super().__init__(field, message, f"run record: {field}: {message}")


class InvalidBatch(Invalid):
    """A batch rejected as a whole; ``index`` is the offending event (None: the batch)."""

    body_fields = ("index", "field")

    def __init__(self, index: int | None, field: str, message: str):
        where = "batch" if index is None else f"event {index}"
        super().__init__(field, message, f"{where}: {field}: {message}")
        self.index = index


class UnknownRun(NotFound):
    def __init__(self, run_id: str):
        super().__init__(f"unknown run {run_id!r}: POST the run record to /v1/runs first")
        self.run_id = run_id


@dataclass
class IngestResult:
    accepted: int
    duplicates: int
    # What was accepted, for Prometheus (not part of equality).
    source: str = field(default="", compare=False)
    model: str = field(default="", compare=False)
    step_counts: dict = field(default_factory=dict, compare=False)   # (stage, mode, reason) -> n
    tokens_by_stage: dict = field(default_factory=dict, compare=False)      # stage -> num_tokens
    padded_by_stage: dict = field(default_factory=dict, compare=False)      # stage -> tokens
    capture_durations: list = field(default_factory=list, compare=False)    # (stage, seconds)
    pool_bytes: int | None = field(default=None, compare=False)


def _json_depth(value: Any, limit: int, depth: int = 0) -> int:
    if depth > limit:
        return depth
    if isinstance(value, dict):
        return max((_json_depth(v, limit, depth + 1) for v in value.values()), default=depth + 1)
    if isinstance(value, list):
        return max((_json_depth(v, limit, depth + 1) for v in value), default=depth + 1)
    return depth


def _db_unavailable(error: Exception) -> StoreUnavailable:
    text = str(getattr(error, "orig", error)).strip().splitlines()[0]
    return StoreUnavailable(f"the store cannot take writes right now ({text}); nothing was written, retry later")


# What a run record describes, as opposed to what the store keeps about the run itself (its
# status, when it was created and last seen): a later record of the same run replaces these.
_DESCRIPTION = ("name", "backend", "model", "device", "torch_version", "config", "wire_version",
                "started_at", "partial", "time_provenance", "version", "graph_sample", "config_key")


def ingest_run(store: Store, record: Any, *, now: float | None = None) -> dict:
    """Register a run. Posting the same record again changes nothing; a record of a known
    run that says more (a followed log learns the device, the capture sizes, which rank's
    figures are the headline as it goes on) replaces the run's description, never its status
    or events. Returns the run row."""
    try:
        validate_run(record)
    except WireError as error:
        raise InvalidRun(error.field, error.message) from None
    config = record.get("config")
    if config is not None and _json_depth(config, MAX_CONFIG_DEPTH) > MAX_CONFIG_DEPTH:
        raise InvalidRun("config", f"nested deeper than {MAX_CONFIG_DEPTH} levels")
    now = time.time() if now is None else now
    row = {
        "run_id": record["run_id"], "name": record["name"], "source": record["source"],
        "backend": record["backend"], "model": record["model"], "device": record["device"],
        "torch_version": record.get("torch_version"), "config": config,
        "wire_version": record.get("wire_version", 1), "started_at": float(record["started_at"]),
        "partial": record.get("partial"), "time_provenance": record.get("time_provenance"),
        "version": record.get("version"), "graph_sample": record.get("graph_sample"),
        "config_key": config_key(record["model"], record["backend"], record["device"], config),
        "status": "running", "created_at": now, "last_seen_at": now,
    }
    try:
        with store.write() as conn:
            existing = run_writes.run_columns(conn, row["run_id"], _DESCRIPTION)
            if existing is None:
                run_writes.insert_run(conn, row)
                created = True
            else:
                created = False
                changed = {name: row[name] for name in _DESCRIPTION if getattr(existing, name) != row[name]}
                if changed:
                    run_writes.update_run(conn, existing.id, changed)
    except sa_exc.IntegrityError:
        created = False   # a concurrent post of the same run won the race
    except sa_exc.OperationalError as error:
        raise _db_unavailable(error) from None
    return {"run_id": row["run_id"], "created": created}


def validate_batch(events: Any) -> list:
    """Raise InvalidBatch unless every event is valid; returns the list."""
    if not isinstance(events, list):
        raise InvalidBatch(None, "events", "must be a list of events")
    for index, event in enumerate(events):
        try:
            validate_event(event)
        except WireError as error:
            raise InvalidBatch(index, error.field, error.message) from None
    return events


class _TotalsOverflow(Exception):
    pass


_OVERFLOW = ("events", "the run's totals would exceed what the store can sum (2^63); nothing was written")


def _sqlstate(error: Exception) -> str | None:
    return getattr(getattr(error, "orig", None), "sqlstate", None)


def ingest_events(store: Store, run_id: str, events: Any, *, now: float | None = None) -> IngestResult:
    """Validate then store one batch of a run's events, all or nothing."""
    validate_batch(events)
    now = time.time() if now is None else now
    attempts = 4
    for attempt in range(attempts):
        try:
            with store.write() as conn:
                return _write_batch(store, conn, run_id, events, now)
        except (_TotalsOverflow, sa_exc.DataError):      # PostgreSQL: "bigint out of range"
            raise InvalidBatch(None, *_OVERFLOW) from None
        except sa_exc.IntegrityError as error:
            if attempt == attempts - 1:
                raise
            if _sqlstate(error) == "23514" and "no partition" in str(error.orig):
                # A day without its partition yet (PostgreSQL): create it, then write.
                retention.ensure_partitions(store, retention.days_of(events))
            # Otherwise a concurrent writer stored some of these seqs first: retry, now as duplicates.
        except sa_exc.OperationalError as error:
            # Two collectors writing the same run's rollups: PostgreSQL chose this one to wait.
            if _sqlstate(error) in ("40P01", "40001") and attempt < attempts - 1:
                continue
            raise _db_unavailable(error) from None
    raise AssertionError("unreachable")


def _write_batch(store: Store, conn, run_id: str, events: list, now: float) -> IngestResult:
    run = run_writes.run_for_batch(conn, run_id)
    if run is None:
        raise UnknownRun(run_id)
    run_pk = run.id
    result = IngestResult(accepted=0, duplicates=0, source=run.source, model=run.model)
    if not events:
        run_writes.update_run(conn, run_pk, {"last_seen_at": now})
        return result

    existing = run_writes.existing_seqs(conn, run_pk, [e["seq"] for e in events])
    seen = existing
    step_rows: list[tuple] = []        # as run_writes.STEP_COLUMNS
    event_keys = run_writes.EVENT_KEYS
    other_rows: dict[str, list[tuple]] = {}
    acc = Accumulator()
    seconds = acc.seconds
    max_ts = run.last_event_ts or 0.0
    latest_ts = -math.inf       # the latest stamp in the batch (its events arrive now)
    run_end = None
    duplicates = 0
    # Step detail before this was pruned: an event from then is a resend (retention).
    expired_before = run.raw_expired_before or -math.inf
    for e in events:
        seq = e["seq"]
        if seq in seen:
            duplicates += 1
            continue
        seen.add(seq)
        ts = e["ts"]
        kind = e["kind"]
        if ts < expired_before and kind in ("step", "step_counts"):
            duplicates += 1
            continue
        if ts > latest_ts:
            latest_ts = ts
        if kind == "step":
            step_rows.append((run_pk, seq, ts, e["stage"], e["mode"], e["raw_bs"], e["graph_bs"], e["num_tokens"],
                              e["padded_tokens"], e["reason"], e["duration_s"], e.get("evidence")))
            continue
        row = (run_pk,) + tuple(e.get(k) for k in event_keys[kind])
        if kind == "step_counts" and e.get("batch_sizes") is not None:
            row = row[:-1] + (json.dumps(e["batch_sizes"]),)   # a JSON column, bound as text
        other_rows.setdefault(kind, []).append(row)
        if kind == "step_counts":
            acc.add_counts(ts, e["stage"], e["mode"], e.get("reason"), e["count"], e["num_tokens"],
                           e["padded_tokens"], e.get("duration_s"), e.get("raw_bs"), e.get("batch_sizes"))
        elif kind == "capture":
            if e["duration_s"] is not None:
                result.capture_durations.append((e["stage"], e["duration_s"]))
            if e.get("pool_bytes") is not None:
                result.pool_bytes = e["pool_bytes"]
        elif kind == "run_end":
            if run_end is None or seq > run_end["seq"]:
                run_end = e

    acc.add_step_rows(step_rows, run_writes.STEP_COLUMNS)
    counts, computed, padded = result.step_counts, result.tokens_by_stage, result.padded_by_stage
    for (_second, stage, mode, reason), a in seconds.items():
        key = (stage, mode, reason or None)
        counts[key] = counts.get(key, 0) + a[0]
        if a[1]:
            computed[stage] = computed.get(stage, 0) + a[1]
        if a[2]:
            padded[stage] = padded.get(stage, 0) + a[2]

    run_writes.insert_events(store, conn, step_rows, other_rows)
    if acc:
        acc.flush(conn, run_pk)
        if run_writes.sums_overflowed(conn, run_pk):
            raise _TotalsOverflow

    values: dict[str, Any] = {"last_seen_at": now}
    max_ts = max(max_ts, min(latest_ts, now))            # each event at most at its arrival
    ahead = latest_ts - now
    if ahead > CLOCK_AHEAD_NOTED_S and ahead > (run.clock_ahead_s or 0.0):
        values["clock_ahead_s"] = ahead
    if max_ts and max_ts != run.last_event_ts:
        values["last_event_ts"] = max_ts
    if run_end is not None and (run.end_seq is None or run_end["seq"] > run.end_seq):
        values.update(status=run_end["status"], ended_at=run_end["ts"], end_seq=run_end["seq"],
                      error=run_end.get("error"))
    elif run.status == "interrupted" and run.end_seq is None and duplicates < len(events):
        values.update(status="running", ended_at=None)   # the heartbeat timeout was wrong
    run_writes.update_run(conn, run_pk, values)
    result.accepted = len(events) - duplicates
    result.duplicates = duplicates
    return result
