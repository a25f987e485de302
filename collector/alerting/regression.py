"""The ``regression`` kind of alert rule: a run beyond the spread of the earlier runs of its
configuration (``replayscope.collector.analysis.regressions`` judges; this fires and resolves).

It fires once per run and metric whose change from the baseline median is at least the
rule's ``threshold`` (share points for eager share, relative for the others); it resolves
when a newer run of the same configuration finishes.
"""

from __future__ import annotations

from typing import Any

from replayscope.collector.alert_rule import AlertRule
from replayscope.collector.alerting.rule_kind import InvalidRule, Transition, watches
from replayscope.collector.analysis import regressions
from replayscope.collector.analysis.regressions import METRICS
from replayscope.collector.models import alerts as alert_rows, fleet

NAME = "regression"


def validate(fields: dict[str, Any]) -> None:
    metric = fields.get("metric")
    if metric is not None and metric not in METRICS:
        raise InvalidRule("metric", f"{metric!r} is not one of {', '.join(METRICS)} (or null: any)")


def evaluate(conn, rule: AlertRule, now: float) -> list[Transition]:
    """Transitions of one regression rule: a new alert per run and metric that regressed by
    at least the threshold; open ones resolve once a newer run of the same configuration
    finished."""
    transitions: list[Transition] = []
    for alert in alert_rows.firing_with_config(conn, rule.id):
        if fleet.newer_finished(conn, alert["config_key"], alert["run_started_at"]):
            alert_rows.resolve(conn, alert["id"], now)
            alert.update(status="resolved", ended_at=now)
            resolved = {k: alert[k] for k in alert if k not in ("config_key", "run_started_at")}
            transitions.append(Transition("resolved", resolved, rule))

    # Runs seen within the window, and exactly the runs their baselines need: per
    # configuration, every run since its earliest recent run and the finished ones just before.
    recent = [r for r in fleet.seen_since(conn, now - rule.window_s) if watches(rule, r.name)]
    if not recent:
        return transitions
    first: dict[str, float] = {}
    for r in recent:
        first[r.config_key] = min(first.get(r.config_key, r.started_at), r.started_at)
    pks: set[int] = set()
    for key, start in first.items():
        pks.update(fleet.started_since(conn, key, start))
        pks.update(fleet.finished_before(conn, key, start, regressions.BASELINE_RUNS))
    by_pk = fleet.rows_of_runs(conn, sorted(pks))
    table = list(by_pk.values())
    pk_of = {row["run_id"]: pk for pk, row in by_pk.items()}
    regressions.annotate(table)
    wanted = {r.id for r in recent}
    done = alert_rows.alerted(conn, rule.id)
    for row in table:
        pk = pk_of[row["run_id"]]
        if pk not in wanted or row["steps"] < rule.min_steps:
            continue
        for finding in row["regressions"]:
            if rule.metric not in (None, finding["metric"]) or (pk, finding["metric"]) in done:
                continue
            if finding["change"] is not None and finding["change"] < rule.threshold:
                continue
            values = {"rule_id": rule.id, "rule_name": rule.name, "run_pk": pk, "status": "firing",
                      "threshold": rule.threshold, "started_at": now, "ended_at": None,
                      "peak": finding["change"] if finding["change"] is not None else 0.0,
                      "value": float(finding["value"]), "steps": row["steps"], "reason": finding["metric"]}
            alert_id = alert_rows.insert_alert(conn, values)
            alert = {"id": alert_id, **values, "run_id": row["run_id"], "run_name": row["name"],
                     "finding": finding, "baseline": row["baseline"]}
            transitions.append(Transition("firing", alert, rule))
    return transitions


def labels(alert: dict[str, Any], rule: AlertRule, status: str) -> tuple[dict[str, str], dict[str, str]]:
    """Alertmanager labels and annotations of a regression alert."""
    alert = dict(alert, status=status)
    metric = alert.get("reason") or "regression"
    label = METRICS[metric].label if metric in METRICS else metric
    names = {"alertname": "ReplayscopeRegression", "rule": rule.name, "run_id": alert["run_id"],
              "run_name": alert["run_name"], "metric": metric, "severity": "warning"}
    baseline = (alert.get("baseline") or {}).get("text")
    summary = (f"{label} of run {alert['run_name']} is beyond the spread of the earlier runs of its configuration"
               if alert["status"] == "firing" else
               f"a newer run of run {alert['run_name']}'s configuration finished")
    annotations = {"summary": summary, "value": f"{alert['value']:.6g}", "change": f"{alert['peak']:.4f}"}
    if baseline:
        annotations["baseline"] = baseline
    return names, annotations
