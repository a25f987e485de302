"""The ``regression`` kind of alert rule: a run beyond the spread of the earlier runs of its
configuration (``collector.analysis.regressions`` judges; this fires and resolves).

It fires once per run and metric whose change from the baseline median is at least the
rule's ``threshold`` (share points for eager share, relative for the others); it resolves
when a newer run of the same configuration finishes.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from collector.alerting.rule_kind import InvalidRule, Transition, watches
from collector.analysis import regressions
from collector.analysis.regressions import METRICS
from collector.models import fleet as figures_of
from collector.tables import alert_events as ae, runs

NAME = "regression"


def validate(fields: dict[str, Any]) -> None:
    metric = fields.get("metric")
    if metric is not None and metric not in METRICS:
        raise InvalidRule("metric", f"{metric!r} is not one of {', '.join(METRICS)} (or null: any)")


def evaluate(conn, rule: dict[str, Any], now: float) -> list[Transition]:
    """Transitions of one regression rule: a new alert per run and metric that regressed by
    at least the threshold; open ones resolve once a newer run of the same configuration
    finished."""
    transitions: list[Transition] = []
    open_rows = [dict(r._mapping) for r in conn.execute(
        sa.select(ae, runs.c.run_id, runs.c.name.label("run_name"), runs.c.config_key,
                  runs.c.started_at.label("run_started_at"))
        .join(runs, runs.c.id == ae.c.run_pk).where(ae.c.rule_id == rule["id"], ae.c.status == "firing"))]
    for alert in open_rows:
        newer = conn.execute(sa.select(runs.c.id).where(
            runs.c.config_key == alert["config_key"], runs.c.status == "finished",
            runs.c.started_at > alert["run_started_at"]).limit(1)).first()
        if newer is not None:
            conn.execute(ae.update().where(ae.c.id == alert["id"]).values(status="resolved", ended_at=now))
            alert.update(status="resolved", ended_at=now)
            resolved = {k: alert[k] for k in alert if k not in ("config_key", "run_started_at")}
            transitions.append(Transition("resolved", resolved, rule))

    # Runs seen within the window, and exactly the runs their baselines need: per
    # configuration, every run since its earliest recent run and the finished ones just before.
    recent = conn.execute(sa.select(runs.c.id, runs.c.name, runs.c.config_key, runs.c.started_at)
                          .where(runs.c.last_event_ts > now - rule["window_s"])).all()
    recent = [r for r in recent if watches(rule, r.name)]
    if not recent:
        return transitions
    first: dict[str, float] = {}
    for r in recent:
        first[r.config_key] = min(first.get(r.config_key, r.started_at), r.started_at)
    pks: set[int] = set()
    for key, start in first.items():
        same = runs.c.config_key == key
        pks.update(conn.execute(sa.select(runs.c.id).where(same, runs.c.started_at >= start)).scalars())
        pks.update(conn.execute(sa.select(runs.c.id).where(same, runs.c.status == "finished",
                                                           runs.c.started_at < start)
                                .order_by(runs.c.started_at.desc()).limit(regressions.BASELINE_RUNS)).scalars())
    chosen = runs.c.id.in_(sorted(pks))
    rows = conn.execute(sa.select(*figures_of.RUN_COLUMNS).where(chosen).order_by(runs.c.started_at, runs.c.id)).all()
    figures = figures_of.metrics(conn, [r.id for r in rows], chosen)
    table = [figures_of.run_row(r, figures[r.id]) for r in rows]
    pk_of = {r.run_id: r.id for r in rows}
    regressions.annotate(table)
    wanted = {r.id for r in recent}
    done = {(pk, reason) for pk, reason in conn.execute(
        sa.select(ae.c.run_pk, ae.c.reason).where(ae.c.rule_id == rule["id"]))}
    for row in table:
        pk = pk_of[row["run_id"]]
        if pk not in wanted or row["steps"] < rule["min_steps"]:
            continue
        for finding in row["regressions"]:
            if rule.get("metric") not in (None, finding["metric"]) or (pk, finding["metric"]) in done:
                continue
            if finding["change"] is not None and finding["change"] < rule["threshold"]:
                continue
            values = {"rule_id": rule["id"], "rule_name": rule["name"], "run_pk": pk, "status": "firing",
                      "threshold": rule["threshold"], "started_at": now, "ended_at": None,
                      "peak": finding["change"] if finding["change"] is not None else 0.0,
                      "value": float(finding["value"]), "steps": row["steps"], "reason": finding["metric"]}
            alert_id = conn.execute(ae.insert().values(**values)).inserted_primary_key[0]
            alert = {"id": alert_id, **values, "run_id": row["run_id"], "run_name": row["name"],
                     "finding": finding, "baseline": row["baseline"]}
            transitions.append(Transition("firing", alert, rule))
    return transitions


def labels(alert: dict[str, Any], rule: dict[str, Any], status: str) -> tuple[dict[str, str], dict[str, str]]:
    """Alertmanager labels and annotations of a regression alert."""
    alert = dict(alert, status=status)
    metric = alert.get("reason") or "regression"
    label = METRICS[metric].label if metric in METRICS else metric
    names = {"alertname": "ReplayscopeRegression", "rule": rule["name"], "run_id": alert["run_id"],
              "run_name": alert["run_name"], "metric": metric, "severity": "warning"}
    baseline = (alert.get("baseline") or {}).get("text")
    summary = (f"{label} of run {alert['run_name']} is beyond the spread of the earlier runs of its configuration"
               if alert["status"] == "firing" else
               f"a newer run of run {alert['run_name']}'s configuration finished")
    annotations = {"summary": summary, "value": f"{alert['value']:.6g}", "change": f"{alert['peak']:.4f}"}
    if baseline:
        annotations["baseline"] = baseline
    return names, annotations
