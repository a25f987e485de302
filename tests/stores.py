"""What the tests read and write in a store that nothing shipped needs: a whole events
file loaded at once, a run's rollups recomputed from its raw rows (the oracle the
incremental rollups are checked against), the day partitions PostgreSQL holds; and the
``store`` fixture of the folders whose conftest names a ``db_url``."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import sqlalchemy as sa

from replayscope.collector.ingest import IngestResult, ingest_events, ingest_run
from replayscope.collector.models import retention
from replayscope.collector.models.rollups import STEP_FIELDS, Accumulator
from replayscope.collector.store import Store
from replayscope.collector.tables import batch_rollups, step_counts, step_rollups, steps
from replayscope.contract.events_file import read_events_file


def ingest_events_file(store: Store, path: str | Path, *, batch_size: int = 5000) -> IngestResult:
    """Load an events file (``replayscope.contract.events_file``), checked whole before anything is written."""
    events_file = read_events_file(path)
    ingest_run(store, events_file.run)
    total = IngestResult(accepted=0, duplicates=0)
    for start in range(0, len(events_file.events), batch_size):
        part = ingest_events(store, events_file.run["run_id"], events_file.events[start:start + batch_size])
        total.accepted += part.accepted
        total.duplicates += part.duplicates
    return total


def rebuild_rollups(conn, run_pk: int) -> None:
    """Recompute one run's rollups from its raw steps and step counts."""
    conn.execute(step_rollups.delete().where(step_rollups.c.run_pk == run_pk))
    conn.execute(batch_rollups.delete().where(batch_rollups.c.run_pk == run_pk))
    acc = Accumulator()
    acc.add_step_rows(conn.execute(sa.select(*(steps.c[f] for f in STEP_FIELDS)).where(steps.c.run_pk == run_pk)),
                      STEP_FIELDS)
    for r in conn.execute(sa.select(step_counts).where(step_counts.c.run_pk == run_pk)).mappings():
        acc.add_counts(r["ts"], r["stage"], r["mode"], r["reason"], r["count"], r["num_tokens"],
                       r["padded_tokens"], r["duration_s"], r["raw_bs"], r["batch_sizes"])
    acc.flush(conn, run_pk)


def partitions(store: Store) -> dict[str, list[int]]:
    """Day numbers of the day partitions of each partitioned table (PostgreSQL)."""
    if not retention.is_partitioned(store):
        return {}
    with store.read() as conn:
        found = retention.partitions_of(conn)
    out: dict[str, list[int]] = {}
    for parent, child in found:
        day = retention.day_of_partition(child)
        if day is not None:
            out.setdefault(parent, []).append(day)
    return {k: sorted(v) for k, v in out.items()}


def without_builtin_rule(store: Store) -> Store:
    """``store`` without the eager-ratio rule every store starts with (migration 0009), for a
    test that writes the rules it tests and counts their alerts; returns ``store``."""
    from replayscope.collector.alerting.alerts import BUILTIN_EAGER_RATIO_RULE
    from replayscope.collector.tables import alert_rules

    with store.write() as conn:
        conn.execute(alert_rules.delete().where(alert_rules.c.name == BUILTIN_EAGER_RATIO_RULE["name"]))
    return store


@contextlib.contextmanager
def opened_store(url: str):
    """A store at ``url``, migrated, without the built-in rule (the tests write the rules they
    test: ``tests/collector/test_builtin_rule.py`` is about that one), disposed of afterwards
    (the tests' store fixtures)."""
    store = without_builtin_rule(Store.open(url, upgrade=True))
    try:
        yield store
    finally:
        store.dispose()


@pytest.fixture
def store(db_url):
    """A migrated store at the ``db_url`` of the conftest that imports this fixture."""
    with opened_store(db_url) as s:
        yield s
