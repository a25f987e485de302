"""Reads of a run's recorded events one by one (captures, phases, degrades, parity checks,
recordings, warnings) and of the alert rules and their alerts. Part of the read model
(``replayscope.collector.models.queries``).
"""

from __future__ import annotations

import sqlalchemy as sa

from replayscope.collector.alert_rule import AlertRule
from replayscope.collector.store import Store
from replayscope.collector.tables import (alert_events as ae, alert_rules as ar, captures as cap,
                                          degrades as deg, parity_checks as par, phases as ph,
                                          recordings as rec, run_warnings as rw, runs)


def run_pk_of(conn, run_id: str) -> int | None:
    return conn.execute(sa.select(runs.c.id).where(runs.c.run_id == run_id)).scalar()


def last_event_ts(conn, run_pk: int) -> float | None:
    """The run's clock (``runs.last_event_ts``): where alert evaluation follows it to."""
    return conn.execute(sa.select(runs.c.last_event_ts).where(runs.c.id == run_pk)).scalar()


def _event_rows(store: Store, run_id: str, table: sa.Table, rename: dict[str, str] | None = None) -> list[dict]:
    rename = rename or {}
    cols = [c for c in table.columns if c.name != "run_pk"]
    with store.read() as conn:
        pk = run_pk_of(conn, run_id)
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


def alert_rules(store: Store) -> list[AlertRule]:
    """Every alert rule, by name."""
    with store.read() as conn:
        rows = conn.execute(sa.select(ar).order_by(ar.c.name)).mappings().all()
    return [AlertRule.from_row(r) for r in rows]


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
