"""The ``eager_ratio`` kind of alert rule: the share of a run's steps that ran eager over a
sliding window of its own event time, with Prometheus' pending, firing and keep-firing
semantics (``collector.alerting.alerts`` says them in full).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any

from collector.alerting.rule_kind import InvalidRule, Transition, resolve_row, watches
from collector.models import alerts as alert_rows
from collector.models.events import run_pk_of
from collector.store import Store
from runner.wire import stages_of

NAME = "eager_ratio"
ALERTNAME = "ReplayscopeEagerRatioHigh"
MAX_POINTS_PER_RUN = 200_000     # seconds of one run evaluated in one tick; the rest next tick
SETTLE_S = 1.0                   # a run's latest second is complete once nothing arrived for this long


def validate(fields: dict[str, Any]) -> None:
    if fields.get("metric") is not None:
        raise InvalidRule("metric", "only a regression rule watches a metric")


def labels(alert: dict, rule: dict, status: str) -> tuple[dict[str, str], dict[str, str]]:
    names = {"alertname": ALERTNAME, "rule": rule["name"], "run_id": alert["run_id"],
             "run_name": alert["run_name"], "stage": rule["stage"], "severity": "warning"}
    verb = "is" if status == "firing" else "was"
    annotations = {
        "summary": f"eager ratio of run {alert['run_name']} over {rule['window_s']}s {verb} above "
                   f"{rule['threshold']:.0%}",
        "description": f"{' and '.join(stages_of(rule['stage']))} steps ran eager at {alert['value']:.1%} (peak {alert['peak']:.1%} of "
                       f"{alert['steps']} steps, threshold {rule['threshold']:.0%}); dominant reason: "
                       f"{alert.get('reason') or 'none'}",
        "peak": f"{alert['peak']:.4f}", "value": f"{alert['value']:.4f}",
        "reason": alert.get("reason") or "",
    }
    return names, annotations


@dataclass
class _Window:
    """Sliding sums of one run's per-second step counts over ``(t - window_s, t]``."""

    seconds: dict[int, tuple[int, int, dict]]          # second -> (steps, eager, {reason: eager})
    window_s: int
    keys: list[int] = field(default_factory=list)
    steps: int = 0
    eager: int = 0

    def __post_init__(self) -> None:
        self.keys = sorted(self.seconds)

    def add(self, t: int, sign: int) -> None:
        entry = self.seconds.get(t)
        if entry is not None:
            self.steps += sign * entry[0]
            self.eager += sign * entry[1]

    def fill(self, t: int) -> None:
        """The window ending at ``t``, from nothing."""
        self.steps = self.eager = 0
        lo = bisect.bisect_right(self.keys, t - self.window_s)
        hi = bisect.bisect_right(self.keys, t)
        for key in self.keys[lo:hi]:
            self.add(key, 1)

    def next_data_after(self, t: int) -> int | None:
        i = bisect.bisect_right(self.keys, t)
        return self.keys[i] if i < len(self.keys) else None

    def dominant_reason(self, t: int) -> str | None:
        totals: dict[str, int] = {}
        lo = bisect.bisect_right(self.keys, t - self.window_s)
        hi = bisect.bisect_right(self.keys, t)
        for key in self.keys[lo:hi]:
            for reason, n in self.seconds[key][2].items():
                totals[reason] = totals.get(reason, 0) + n
        if not totals:
            return None
        return min(totals.items(), key=lambda kv: (-kv[1], kv[0]))[0] or None


def _window_data(conn, rule: dict, run_pk: int, first: int, last: int) -> dict[int, tuple[int, int, dict]]:
    out: dict[int, list] = {}
    for t, mode, reason, n in alert_rows.second_counts(conn, run_pk, stages_of(rule["stage"]), first, last):
        entry = out.setdefault(int(t), [0, 0, {}])
        entry[0] += int(n)
        if mode == "eager":
            entry[1] += int(n)
            entry[2][reason] = entry[2].get(reason, 0) + int(n)
    return {t: (e[0], e[1], e[2]) for t, e in out.items()}


def judged_ratios(store: Store, rule: dict, run_id: str, every_s: int = 1) -> list[dict]:
    """The eager ratio an eager-ratio rule judges a run by, as its evaluation computes it (the
    rule's stages, the steps of the last ``window_s`` seconds, nothing judged under
    ``min_steps``), at every ``every_s``-th second from the run's first step of those stages to
    its last: ``t``, ``steps`` in the window, ``ratio`` (None where not judged). For drawing."""
    with store.read() as conn:
        run_pk = run_pk_of(conn, run_id)
        if run_pk is None:
            return []
        first, last = alert_rows.seconds_span(conn, run_pk, stages_of(rule["stage"]))
        if first is None:
            return []
        first, last = int(first), int(last)
        window = _Window(_window_data(conn, rule, run_pk, first - rule["window_s"] + 1, last), rule["window_s"])
    out = []
    for t in range(first, last + 1, max(1, int(every_s))):
        window.fill(t)
        judged = window.steps >= rule["min_steps"]
        out.append({"t": float(t), "steps": window.steps, "ratio": window.eager / window.steps if judged else None})
    return out


def evaluate(conn, rule: dict, now: float) -> list[Transition]:
    out: list[Transition] = []
    for run in alert_rows.runs_to_evaluate(conn, rule):
        if not watches(rule, run.name):
            _skip_run(conn, rule, run)
            continue
        out.extend(_evaluate_run(conn, rule, run, now))
    return out


def _skip_run(conn, rule: dict, run) -> None:
    """A run out of the rule's scope: remembered as evaluated, so it is not looked at again
    until it has new events."""
    if run.has_state is None:
        alert_rows.insert_state(conn, rule["id"], run.id, evaluated_to=run.last_event_ts)
    else:
        alert_rows.update_state(conn, rule["id"], run.id, evaluated_to=run.last_event_ts)


def _evaluate_run(conn, rule: dict, run, now: float) -> list[Transition]:
    ended = run.status != "running"
    # A running run's latest second may still be arriving, unless nothing came for a second.
    settled = ended or now - run.last_seen_at >= SETTLE_S
    # Its clock (last_event_ts) counts each event at most at its arrival (collector.ingest): a
    # future-stamped event cannot push evaluation past data still to come. Everything of an
    # ended run has arrived: it is evaluated to its end, however it was stamped.
    frontier = run.last_event_ts
    if ended and run.ended_at is not None:
        frontier = max(frontier, run.ended_at)
    last = math.floor(frontier) - (0 if settled else 1)
    window_s = rule["window_s"]
    if run.has_state is None:
        first_data = alert_rows.first_second(conn, run.id, stages_of(rule["stage"]))
        if run.created_at < rule["updated_at"]:   # a run older than the rule: from its present on
            start = last - 1
        elif first_data is not None and first_data > last:
            # Its first step is stamped ahead of its clock (the collector's, at most): starting
            # there would skip every step stamped before it until the collector's clock got
            # there. Nothing is judged yet; the steps that come next set the start.
            return []
        else:
            start = (int(first_data) if first_data is not None else last) - 1
        adopted = alert_rows.firing_alert_id(conn, rule["id"], run.id)
        state = {"evaluated_to": float(start), "pending_since": None, "clear_since": None, "alert_id": adopted}
        alert_rows.insert_state(conn, rule["id"], run.id, **state)
    else:
        state = {"evaluated_to": run.evaluated_to, "pending_since": run.pending_since,
                 "clear_since": run.clear_since, "alert_id": run.alert_id}
    names = {"run_id": run.run_id, "run_name": run.name}
    transitions: list[Transition] = []
    alert = None
    if state["alert_id"] is not None:
        row = alert_rows.alert(conn, state["alert_id"])
        alert = {**row, **names} if row is not None and row["status"] == "firing" else None
        if alert is None:
            state["alert_id"] = None

    begin = math.floor(state["evaluated_to"]) + 1
    stop = min(last, begin + MAX_POINTS_PER_RUN - 1)
    if stop >= begin:
        window = _Window(_window_data(conn, rule, run.id, begin - window_s + 1, stop), window_s)
        resolve_at = rule["resolve_threshold"] if rule["resolve_threshold"] is not None else rule["threshold"]
        t = begin
        window.fill(t)
        changed = False
        while t <= stop:
            steps, eager = window.steps, window.eager
            if steps == 0 and alert is None and state["pending_since"] is None:
                nxt = window.next_data_after(t)          # nothing to judge until the next step
                if nxt is None or nxt > stop:
                    break
                t = nxt
                window.fill(t)
                continue
            judged = steps >= rule["min_steps"]
            ratio = eager / steps if steps else 0.0
            active = judged and ratio > rule["threshold"]
            clear = not judged or ratio <= resolve_at
            if alert is not None:
                if judged:
                    alert["value"] = ratio
                    if ratio > alert["peak"]:
                        alert.update(peak=ratio, steps=steps, reason=window.dominant_reason(t))
                    changed = True
                if not clear:
                    state["clear_since"] = None
                else:
                    if state["clear_since"] is None:
                        state["clear_since"] = float(t)
                    if t - state["clear_since"] >= rule["keep_firing_for_s"]:
                        alert_rows.save_figures(conn, alert)
                        resolve_row(conn, alert, float(t))
                        transitions.append(Transition("resolved", dict(alert), rule))
                        alert, changed = None, False
                        state.update(alert_id=None, clear_since=None, pending_since=None)
            elif active:
                if state["pending_since"] is None:
                    state["pending_since"] = float(t)
                if t - state["pending_since"] >= rule["for_s"]:
                    alert = _fire(conn, rule, run.id, names, float(t), ratio, steps, window.dominant_reason(t))
                    transitions.append(Transition("firing", dict(alert), rule))
                    state.update(alert_id=alert["id"], pending_since=None, clear_since=None)
            else:
                state["pending_since"] = None
            t += 1
            window.add(t, 1)
            window.add(t - window_s, -1)
        if alert is not None and changed:
            alert_rows.save_figures(conn, alert)
        state["evaluated_to"] = float(stop)

    if ended and state["evaluated_to"] >= last:
        state.update(pending_since=None, evaluated_to=max(state["evaluated_to"], frontier))
        if alert is not None:         # the run ended: so did its alert
            end = run.ended_at if run.ended_at is not None else float(last)
            resolve_row(conn, alert, min(end, frontier))
            transitions.append(Transition("resolved", dict(alert), rule))
            state.update(alert_id=None, clear_since=None)
    alert_rows.update_state(conn, rule["id"], run.id, **state)
    return transitions


def _fire(conn, rule: dict, run_pk: int, names: dict, t: float, ratio: float, steps: int,
          reason: str | None) -> dict:
    values = {"rule_id": rule["id"], "rule_name": rule["name"], "run_pk": run_pk, "status": "firing",
              "threshold": rule["threshold"], "started_at": t, "ended_at": None, "peak": ratio, "value": ratio,
              "steps": steps, "reason": reason}
    alert_id = alert_rows.insert_alert(conn, values)
    return {"id": alert_id, **values, **names}
