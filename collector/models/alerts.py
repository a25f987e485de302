"""Alert rules, their alerts and where each rule's evaluation of each run stands
(``alert_rules``, ``alert_events``, ``alert_state``), and what evaluation reads of the
1-second rollups: the statements of ``replayscope.collector.alerting`` (which decides; these only
read and write rows, inside the caller's transaction).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from replayscope.collector.alert_rule import AlertRule

from replayscope.collector.tables import (alert_events as ae, alert_rules as ar, alert_state as st, runs,
                                          step_rollups as sr)

_EVALUATION_LOCK = 0x7265706C      # PostgreSQL: one evaluation at a time across collectors


# -- rules ----------------------------------------------------------------------------------

def rule(conn, rule_id: int) -> AlertRule | None:
    row = conn.execute(sa.select(ar).where(ar.c.id == rule_id)).mappings().first()
    return None if row is None else AlertRule.from_row(row)


def rules(conn) -> list[AlertRule]:
    """Every rule, by id."""
    return [AlertRule.from_row(r) for r in conn.execute(sa.select(ar).order_by(ar.c.id)).mappings()]


def insert_rule(conn, fields: dict[str, Any], now: float) -> int:
    return conn.execute(ar.insert().values(**fields, created_at=now, updated_at=now)).inserted_primary_key[0]


def update_rule(conn, rule_id: int, fields: dict[str, Any], now: float) -> None:
    conn.execute(ar.update().where(ar.c.id == rule_id).values(**fields, updated_at=now))


def delete_rule(conn, rule_id: int) -> None:
    """The rule goes; its alerts stay, no longer naming it."""
    conn.execute(ae.update().where(ae.c.rule_id == rule_id).values(rule_id=None))
    conn.execute(ar.delete().where(ar.c.id == rule_id))


def lock_evaluation(conn) -> None:
    """PostgreSQL: wait for this transaction's turn to evaluate (one at a time across collectors)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_EVALUATION_LOCK})")


# -- alerts ---------------------------------------------------------------------------------

def _firing(conn, where, *run_columns) -> list[dict]:
    return [dict(r) for r in conn.execute(
        sa.select(ae, runs.c.run_id, runs.c.name.label("run_name"), *run_columns)
        .join(runs, runs.c.id == ae.c.run_pk).where(where, ae.c.status == "firing")).mappings()]


def firing_of_rule(conn, rule_id: int) -> list[dict]:
    """The rule's firing alerts, each with its run's run_id and run_name."""
    return _firing(conn, ae.c.rule_id == rule_id)


def firing_of_run(conn, run_pk: int) -> list[dict]:
    """The run's firing alerts, each with its run_id and run_name."""
    return _firing(conn, ae.c.run_pk == run_pk)


def firing_with_config(conn, rule_id: int) -> list[dict]:
    """As ``firing_of_rule``, with the run's ``config_key`` and ``run_started_at``."""
    return _firing(conn, ae.c.rule_id == rule_id, runs.c.config_key, runs.c.started_at.label("run_started_at"))


def alert(conn, alert_id: int) -> dict | None:
    row = conn.execute(sa.select(ae).where(ae.c.id == alert_id)).mappings().first()
    return None if row is None else dict(row)


def firing_alert_id(conn, rule_id: int, run_pk: int) -> int | None:
    return conn.execute(sa.select(ae.c.id).where(ae.c.rule_id == rule_id, ae.c.run_pk == run_pk,
                                                 ae.c.status == "firing")).scalar()


def alerted(conn, rule_id: int) -> set[tuple[int, str | None]]:
    """(run_pk, reason) of every alert the rule ever raised."""
    return {(pk, reason) for pk, reason in conn.execute(
        sa.select(ae.c.run_pk, ae.c.reason).where(ae.c.rule_id == rule_id))}


def insert_alert(conn, values: dict[str, Any]) -> int:
    return conn.execute(ae.insert().values(**values)).inserted_primary_key[0]


def save_figures(conn, alert: dict) -> None:
    """An open alert's latest value, peak, steps and reason."""
    conn.execute(ae.update().where(ae.c.id == alert["id"]).values(
        value=alert["value"], peak=alert["peak"], steps=alert["steps"], reason=alert["reason"]))


def resolve(conn, alert_id: int, at: float) -> None:
    conn.execute(ae.update().where(ae.c.id == alert_id).values(status="resolved", ended_at=at))


# -- where evaluation stands ------------------------------------------------------------------

def evaluated_to(conn, rule_id: int) -> dict[int, float]:
    """run_pk -> how far the rule's evaluation of the run went."""
    return {r.run_pk: r.evaluated_to for r in conn.execute(
        sa.select(st.c.run_pk, st.c.evaluated_to).where(st.c.rule_id == rule_id))}


def forget_rule(conn, rule_id: int) -> None:
    conn.execute(st.delete().where(st.c.rule_id == rule_id))


def forget_run(conn, run_pk: int) -> None:
    conn.execute(st.delete().where(st.c.run_pk == run_pk))


def insert_state(conn, rule_id: int, run_pk: int, **state: Any) -> None:
    conn.execute(st.insert().values(rule_id=rule_id, run_pk=run_pk, **state))


def update_state(conn, rule_id: int, run_pk: int, **state: Any) -> None:
    conn.execute(st.update().where(st.c.rule_id == rule_id, st.c.run_pk == run_pk).values(**state))


def runs_to_evaluate(conn, rule: AlertRule) -> list:
    """Runs with event time the rule has not evaluated yet, or that ended while pending or
    firing, by id; each row has the run's id, run_id, name, status, created_at, ended_at,
    last_event_ts, last_seen_at and its state (``has_state`` None: none yet)."""
    joined = runs.outerjoin(st, sa.and_(st.c.run_pk == runs.c.id, st.c.rule_id == rule.id))
    return conn.execute(
        sa.select(runs.c.id, runs.c.run_id, runs.c.name, runs.c.status, runs.c.created_at, runs.c.ended_at,
                  runs.c.last_event_ts, runs.c.last_seen_at, st.c.run_pk.label("has_state"), st.c.evaluated_to, st.c.pending_since,
                  st.c.clear_since, st.c.alert_id)
        .select_from(joined)
        .where(runs.c.last_event_ts.is_not(None), sa.or_(
            sa.and_(st.c.run_pk.is_(None), runs.c.last_seen_at >= rule.created_at),
            runs.c.last_event_ts > st.c.evaluated_to,
            sa.and_(runs.c.status != "running", sa.or_(
                st.c.alert_id.is_not(None), st.c.pending_since.is_not(None), runs.c.ended_at > st.c.evaluated_to))))
        .order_by(runs.c.id)).all()


# -- the rollups evaluation reads ---------------------------------------------------------------

def _seconds_of(run_pk: int, stages):
    return sr.c.run_pk == run_pk, sr.c.bucket_s == 1, sr.c.stage.in_(stages)


def first_second(conn, run_pk: int, stages) -> int | None:
    """The run's first 1-second bucket with steps of ``stages``."""
    return conn.execute(sa.select(sa.func.min(sr.c.t)).where(*_seconds_of(run_pk, stages))).scalar()


def seconds_span(conn, run_pk: int, stages) -> tuple[Any, Any]:
    """(first, last) 1-second bucket with steps of ``stages``; (None, None) when none."""
    return tuple(conn.execute(sa.select(sa.func.min(sr.c.t), sa.func.max(sr.c.t))
                              .where(*_seconds_of(run_pk, stages))).one())


def second_counts(conn, run_pk: int, stages, first: int, last: int) -> list[tuple]:
    """(t, mode, reason, steps) per 1-second bucket ``first``..``last`` and mode and reason,
    over ``stages``."""
    return conn.execute(
        sa.select(sr.c.t, sr.c.mode, sr.c.reason, sa.func.sum(sr.c.steps))
        .where(*_seconds_of(run_pk, stages), sr.c.t >= first, sr.c.t <= last)
        .group_by(sr.c.t, sr.c.mode, sr.c.reason)).all()
