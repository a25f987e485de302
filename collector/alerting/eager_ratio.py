"""The ``eager_ratio`` kind of alert rule: the share of a run's steps that ran eager over a
sliding window of its own event time, with Prometheus' pending, firing and keep-firing
semantics (``replayscope.collector.alerting.alerts`` says them in full).
"""

from __future__ import annotations

import math
from typing import Any

from replayscope.collector.alert_rule import AlertRule
from replayscope.collector.alerting import eager_ratio_machine as machine
from replayscope.collector.alerting.rule_kind import InvalidRule, Transition, resolve_row, watches
from replayscope.collector.models import alerts as alert_rows
from replayscope.collector.models.events import run_pk_of
from replayscope.collector.store import Store
from replayscope.contract.wire import stages_of

NAME = "eager_ratio"
ALERTNAME = "ReplayscopeEagerRatioHigh"
SETTLE_S = 1.0                   # a run's latest second is complete once nothing arrived for this long


def validate(fields: dict[str, Any]) -> None:
    if fields.get("metric") is not None:
        raise InvalidRule("metric", "only a regression rule watches a metric")


def labels(alert: dict, rule: AlertRule, status: str) -> tuple[dict[str, str], dict[str, str]]:
    names = {"alertname": ALERTNAME, "rule": rule.name, "run_id": alert["run_id"],
             "run_name": alert["run_name"], "stage": rule.stage, "severity": "warning"}
    verb = "is" if status == "firing" else "was"
    annotations = {
        "summary": f"eager ratio of run {alert['run_name']} over {rule.window_s}s {verb} above "
                   f"{rule.threshold:.0%}",
        "description": f"{' and '.join(stages_of(rule.stage))} steps ran eager at {alert['value']:.1%} (peak {alert['peak']:.1%} of "
                       f"{alert['steps']} steps, threshold {rule.threshold:.0%}); dominant reason: "
                       f"{alert.get('reason') or 'none'}",
        "peak": f"{alert['peak']:.4f}", "value": f"{alert['value']:.4f}",
        "reason": alert.get("reason") or "",
    }
    return names, annotations


def _window_data(conn, rule: AlertRule, run_pk: int, first: int, last: int) -> dict[int, tuple[int, int, dict]]:
    out: dict[int, list] = {}
    for t, mode, reason, n in alert_rows.second_counts(conn, run_pk, stages_of(rule.stage), first, last):
        entry = out.setdefault(int(t), [0, 0, {}])
        entry[0] += int(n)
        if mode == "eager":
            entry[1] += int(n)
            entry[2][reason] = entry[2].get(reason, 0) + int(n)
    return {t: (e[0], e[1], e[2]) for t, e in out.items()}


def judged_ratios(store: Store, rule: AlertRule, run_id: str, every_s: int = 1) -> list[dict]:
    """The eager ratio an eager-ratio rule judges a run by, as its evaluation computes it (the
    rule's stages, the steps of the last ``window_s`` seconds, nothing judged under
    ``min_steps``), at every ``every_s``-th second from the run's first step of those stages to
    its last: ``t``, ``steps`` in the window, ``ratio`` (None where not judged). For drawing."""
    with store.read() as conn:
        run_pk = run_pk_of(conn, run_id)
        if run_pk is None:
            return []
        first, last = alert_rows.seconds_span(conn, run_pk, stages_of(rule.stage))
        if first is None:
            return []
        first, last = int(first), int(last)
        window = machine.Window(_window_data(conn, rule, run_pk, first - rule.window_s + 1, last), rule.window_s)
    out = []
    for t in range(first, last + 1, max(1, int(every_s))):
        steps, eager = window.totals(t)
        judged = steps >= rule.min_steps
        out.append({"t": float(t), "steps": steps, "ratio": eager / steps if judged else None})
    return out


def evaluate(conn, rule: AlertRule, now: float) -> list[Transition]:
    out: list[Transition] = []
    for run in alert_rows.runs_to_evaluate(conn, rule):
        if not watches(rule, run.name):
            _skip_run(conn, rule, run)
            continue
        out.extend(_evaluate_run(conn, rule, run, now))
    return out


def _skip_run(conn, rule: AlertRule, run) -> None:
    """A run out of the rule's scope: remembered as evaluated, so it is not looked at again
    until it has new events."""
    if run.has_state is None:
        alert_rows.insert_state(conn, rule.id, run.id, evaluated_to=run.last_event_ts)
    else:
        alert_rows.update_state(conn, rule.id, run.id, evaluated_to=run.last_event_ts)


def _evaluate_run(conn, rule: AlertRule, run, now: float) -> list[Transition]:
    """Read the run's state and window, judge them (``eager_ratio_machine.evaluate``), store
    what it decided: the state, each alert fired or resolved, the open alert's figures."""
    ended = run.status != "running"
    # A running run's latest second may still be arriving, unless nothing came for a second.
    settled = ended or now - run.last_seen_at >= SETTLE_S
    # Its clock (last_event_ts) counts each event at most at its arrival (replayscope.collector.ingest): a
    # future-stamped event cannot push evaluation past data still to come. Everything of an
    # ended run has arrived: it is evaluated to its end, however it was stamped.
    frontier = run.last_event_ts
    if ended and run.ended_at is not None:
        frontier = max(frontier, run.ended_at)
    last = math.floor(frontier) - (0 if settled else 1)
    loaded = _load_state(conn, rule, run, last)
    if loaded is None:
        return []
    state, alert = loaded
    begin = math.floor(state.evaluated_to) + 1
    stop = min(last, begin + machine.MAX_POINTS_PER_RUN - 1)
    end = None
    if ended and stop >= last:
        end = machine.RunEnd(min(run.ended_at if run.ended_at is not None else float(last), frontier), frontier)
    window = machine.Window(_window_data(conn, rule, run.id, begin - rule.window_s + 1, stop), rule.window_s)
    new, changes = machine.evaluate(state, window, rule, last, end)
    names = {"run_id": run.run_id, "run_name": run.name}
    transitions: list[Transition] = []
    stored = state.firing
    for change in changes:
        if change.status == "firing":
            alert = _fire(conn, rule, run.id, names, change.figures)
        else:
            _save_figures(conn, alert, change.figures)
            resolve_row(conn, alert, change.at)
        transitions.append(Transition(change.status, dict(alert), rule))
        stored = change.figures
    if new.firing is not None and new.firing != stored:
        _save_figures(conn, alert, new.firing)
    alert_rows.update_state(conn, rule.id, run.id, evaluated_to=new.evaluated_to, pending_since=new.pending_since,
                            clear_since=new.clear_since, alert_id=alert["id"] if new.firing is not None else None)
    return transitions


def _load_state(conn, rule: AlertRule, run, last: int) -> tuple[machine.State, dict | None] | None:
    """The run's state for the rule and its firing alert (row with run_id, run_name); a run
    not evaluated before starts now (stored), or None while none of its steps can be judged."""
    if run.has_state is None:
        first_data = alert_rows.first_second(conn, run.id, stages_of(rule.stage))
        if run.created_at < rule.updated_at:   # a run older than the rule: from its present on
            start = last - 1
        elif first_data is not None and first_data > last:
            # Its first step is stamped ahead of its clock (the collector's, at most): starting
            # there would skip every step stamped before it until the collector's clock got
            # there. Nothing is judged yet; the steps that come next set the start.
            return None
        else:
            start = (int(first_data) if first_data is not None else last) - 1
        alert_id = alert_rows.firing_alert_id(conn, rule.id, run.id)
        alert_rows.insert_state(conn, rule.id, run.id, evaluated_to=float(start), pending_since=None,
                                clear_since=None, alert_id=alert_id)
        evaluated_to, pending_since, clear_since = float(start), None, None
    else:
        alert_id = run.alert_id
        evaluated_to, pending_since, clear_since = run.evaluated_to, run.pending_since, run.clear_since
    row = alert_rows.alert(conn, alert_id) if alert_id is not None else None
    if row is None or row["status"] != "firing":
        return machine.State(evaluated_to, pending_since, clear_since), None
    figures = machine.Figures(row["started_at"], row["peak"], row["value"], row["steps"], row["reason"])
    alert = {**row, "run_id": run.run_id, "run_name": run.name}
    return machine.State(evaluated_to, pending_since, clear_since, figures), alert


def _save_figures(conn, alert: dict, figures: machine.Figures) -> None:
    alert.update(peak=figures.peak, value=figures.value, steps=figures.steps, reason=figures.reason)
    alert_rows.save_figures(conn, alert)


def _fire(conn, rule: AlertRule, run_pk: int, names: dict, figures: machine.Figures) -> dict:
    values = {"rule_id": rule.id, "rule_name": rule.name, "run_pk": run_pk, "status": "firing",
              "threshold": rule.threshold, "started_at": figures.started_at, "ended_at": None,
              "peak": figures.peak, "value": figures.value, "steps": figures.steps, "reason": figures.reason}
    alert_id = alert_rows.insert_alert(conn, values)
    return {"id": alert_id, **values, **names}
