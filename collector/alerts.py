"""Eager-ratio alerts: validated rules and their evaluation, with Prometheus semantics.

A rule is *active* for a run at a moment ``t`` of the run's own event time when, over
``(t - window_s, t]``, at least ``min_steps`` steps of ``stage`` were recorded (steps and
engines' step counts alike) and the share of them that ran eager is above ``threshold``.
``stage`` is one stage or ``decode+mixed`` (the default): the decode stages,
``runner.wire.DECODE_STAGES``, that every source's decode steps are in.
Like a Prometheus alerting rule it is *pending* while active for less than ``for_s``,
then *fires*. Once firing it holds while the share stays above ``resolve_threshold``
(default: the threshold) and resolves only after being clear (too few steps, or at or
below ``resolve_threshold``) for ``keep_firing_for_s`` without a break. With the defaults
(``for_s`` 60, ``keep_firing_for_s`` 300) a share that oscillates around the threshold
every few seconds never completes a pending period, a firing alert never resolves in less
than five minutes, and the next firing needs a minute of being active after a resolve:
per rule and run, transitions at least 60 s apart and at most two in any six minutes
(while the run goes on; its end, or the rule's disabling, resolves at once).

Time is the run's event time, evaluated second by second from where the last evaluation
stopped (``alert_state``), never past the collector's clock: ingest counts an event
stamped ahead of it only as of its arrival (``runs.last_event_ts``). So a runner whose
clock is behind alerts like any other, one stamped ahead alerts late instead of never, and
an imported or scraped run is evaluated over its whole history once it arrives. A run
that ended (``run_end``, or the heartbeat timeout) resolves its alert when it ended.
Each firing is one ``alert_events`` row: start and end (event time), peak ratio (of
windows with ``min_steps`` steps), latest ratio, and the dominant eager reason at the peak.
Each transition owes its receivers a notification (``collector.notifications``), written
in the same transaction.
"""

from __future__ import annotations

import bisect
import fnmatch
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from collector import notifications, webhook_urls
from collector.notifications import Delivery
from collector.store import Store
from collector.tables import (alert_events as ae, alert_notifications as an, alert_rules as ar,
                              alert_state as st, runs, step_rollups as sr)
from collector.webhook_urls import TargetPolicy
from runner.errors import Conflict, Invalid, NotFound, ReplayscopeError
from runner.wire import DECODE_VIEW, RULE_STAGES, stages_of

RULE_DEFAULTS: dict[str, Any] = {
    "window_s": 300, "min_steps": 100, "run_pattern": None, "stage": DECODE_VIEW,
    "webhook_url": None, "enabled": True, "for_s": 60, "keep_firing_for_s": 300, "resolve_threshold": None,
    "kind": "eager_ratio", "metric": None,
}
RULE_FIELDS = ("name", "threshold", "window_s", "min_steps", "run_pattern", "stage", "webhook_url", "enabled",
               "for_s", "keep_firing_for_s", "resolve_threshold", "kind", "metric")
# eager_ratio: the share of eager steps over a window (above); regression: collector.regressions.
RULE_KINDS = ("eager_ratio", "regression")
MAX_WINDOW_S = 7 * 24 * 3600
MAX_POINTS_PER_RUN = 200_000     # seconds of one run evaluated in one tick; the rest next tick
SETTLE_S = 1.0                   # a run's latest second is complete once nothing arrived for this long
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.:-]{0,99}$")
_ADVISORY_LOCK = 0x7265706C      # PostgreSQL: one evaluation at a time across collectors


class InvalidRule(Invalid):
    pass


class UnknownRule(NotFound):
    def __init__(self, rule_id: int):
        super().__init__(f"no alert rule with id {rule_id}")
        self.rule_id = rule_id


class DuplicateRule(Conflict, InvalidRule):
    def __init__(self, name: str):
        super().__init__("name", f"a rule named {name!r} already exists")


# -- rules ---------------------------------------------------------------------------------

def _seconds(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRule(name, "must be a whole number of seconds")
    if not low <= value <= MAX_WINDOW_S:
        raise InvalidRule(name, f"must be {low}..{MAX_WINDOW_S} seconds")
    return value


def _ratio(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidRule(name, "must be a number")
    if not 0 <= value <= 1:
        raise InvalidRule(name, f"{value:g} is outside 0..1 (it is an eager ratio)")
    return float(value)


def _check_rule_field(name: str, value: Any, policy: TargetPolicy) -> Any:
    if name == "name":
        if not isinstance(value, str) or not _NAME.match(value):
            raise InvalidRule(name, "1-100 characters: letters, digits, space, _ . : -, starting with a letter or digit")
        return value
    if name == "threshold":
        return _ratio(name, value)
    if name == "resolve_threshold":
        return None if value is None else _ratio(name, value)
    if name == "window_s":
        return _seconds(name, value, 1)
    if name in ("for_s", "keep_firing_for_s"):
        return _seconds(name, value, 0)
    if name == "min_steps":
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
            raise InvalidRule(name, "must be an integer >= 1")
        return value
    if name == "run_pattern":
        if value is None or value == "":
            return None
        if not isinstance(value, str) or len(value) > 200:
            raise InvalidRule(name, "must be a glob on run names (up to 200 characters) or null for all runs")
        try:
            re.compile(fnmatch.translate(value))
        except re.error as error:
            raise InvalidRule(name, f"not a valid glob: {error}") from None
        return value
    if name == "stage":
        if value not in RULE_STAGES:
            raise InvalidRule(name, f"{value!r} is not one of {', '.join(RULE_STAGES)}")
        return value
    if name == "webhook_url":
        if value is None or value == "":
            return None
        check_webhook_url(value, policy, name)
        return value
    if name == "enabled":
        if not isinstance(value, bool):
            raise InvalidRule(name, "must be true or false")
        return value
    if name == "kind":
        if value not in RULE_KINDS:
            raise InvalidRule(name, f"{value!r} is not one of {', '.join(RULE_KINDS)}")
        return value
    if name == "metric":
        from collector.regressions import METRICS
        if value is not None and value not in METRICS:
            raise InvalidRule(name, f"{value!r} is not one of {', '.join(METRICS)} (or null: any)")
        return value
    raise InvalidRule(name, f"unknown field (known: {', '.join(RULE_FIELDS)})")


def check_webhook_url(value: Any, policy: TargetPolicy | None = None, field: str = "webhook_url") -> None:
    """Webhooks are http(s) URLs with a host and a valid port, to an address the operator
    allows (``collector.webhook_urls``); nothing else is ever posted to."""
    try:
        webhook_urls.checked(value, policy or TargetPolicy())
    except webhook_urls.RefusedTarget as error:
        raise InvalidRule(field, str(error)) from None
    except webhook_urls.BadURL as error:
        raise InvalidRule(field, f"{error}: must be an http(s) URL or null (then REPLAYSCOPE_ALERT_WEBHOOK "
                                 f"is used)") from None


def validate_rule(data: Any, *, partial: bool = False, policy: TargetPolicy | None = None) -> dict[str, Any]:
    """The rule's fields, checked and normalised; defaults filled unless ``partial``.
    ``policy``: the non-public webhook addresses the operator allows (none by default)."""
    if not isinstance(data, dict):
        raise InvalidRule("(rule)", "must be a JSON object")
    policy = policy or TargetPolicy()
    out: dict[str, Any] = {}
    for name, value in data.items():
        out[name] = _check_rule_field(name, value, policy)
    if not partial:
        for required in ("name", "threshold"):
            if required not in out:
                raise InvalidRule(required, "is required")
        for name, default in RULE_DEFAULTS.items():
            out.setdefault(name, default)
        _check_thresholds(out)
    if out.get("metric") is not None and out.get("kind", "regression") != "regression":
        raise InvalidRule("metric", "only a regression rule watches a metric")
    return out


def _check_thresholds(rule: dict) -> None:
    resolve = rule.get("resolve_threshold")
    if resolve is not None and resolve > rule["threshold"]:
        raise InvalidRule("resolve_threshold", f"{resolve:g} is above the threshold {rule['threshold']:g}: "
                                               "a rule resolves at or below the share it fires above")


def _rule_dict(conn, rule_id: int) -> dict:
    row = conn.execute(sa.select(ar).where(ar.c.id == rule_id)).mappings().first()
    if row is None:
        raise UnknownRule(rule_id)
    return dict(row)


def get_rule(store: Store, rule_id: int) -> dict:
    with store.read() as conn:
        return _rule_dict(conn, rule_id)


def create_rule(store: Store, data: Any, *, now: float | None = None, policy: TargetPolicy | None = None) -> dict:
    """Create a rule (``policy``: the non-public webhook addresses allowed, see ``validate_rule``)."""
    fields = validate_rule(data, policy=policy)
    now = time.time() if now is None else now
    try:
        with store.write() as conn:
            rule_id = conn.execute(ar.insert().values(**fields, created_at=now, updated_at=now)).inserted_primary_key[0]
            return _rule_dict(conn, rule_id)
    except sa_exc.IntegrityError:
        raise DuplicateRule(fields["name"]) from None


def update_rule(store: Store, rule_id: int, data: Any, *, partial: bool = True, now: float | None = None,
                delivery: Delivery | None = None) -> dict:
    """Change a rule (``partial``: only the given fields; else a full replacement).
    Disabling it resolves its firing alerts (and notifies their receivers)."""
    fields = validate_rule(data, partial=partial, policy=delivery.policy if delivery is not None else None)
    now = time.time() if now is None else now
    try:
        with store.write() as conn:
            current = _rule_dict(conn, rule_id)
            _check_thresholds({**current, **fields})
            conn.execute(ar.update().where(ar.c.id == rule_id).values(**fields, updated_at=now))
            rule = _rule_dict(conn, rule_id)
            scope_changed = any(rule[k] != current[k] for k in ("run_pattern", "stage"))
            if not rule["enabled"] or scope_changed:
                _end_rule_alerts(conn, rule, delivery, now)    # other runs or steps: start afresh
            return rule
    except sa_exc.IntegrityError:
        raise DuplicateRule(fields.get("name", "")) from None


def delete_rule(store: Store, rule_id: int, *, now: float | None = None, delivery: Delivery | None = None) -> None:
    """Delete a rule; its firing alerts resolve (notified), its history stays."""
    now = time.time() if now is None else now
    with store.write() as conn:
        rule = _rule_dict(conn, rule_id)
        _end_rule_alerts(conn, rule, delivery, now)
        conn.execute(ae.update().where(ae.c.rule_id == rule_id).values(rule_id=None))
        conn.execute(ar.delete().where(ar.c.id == rule_id))


def _end_rule_alerts(conn, rule: dict, delivery: Delivery | None, now: float) -> None:
    """Resolve a rule's firing alerts where each run's evaluation stands, and forget its state."""
    states = {r.run_pk: r.evaluated_to for r in conn.execute(
        sa.select(st.c.run_pk, st.c.evaluated_to).where(st.c.rule_id == rule["id"]))}
    for alert in _open_alerts(conn, ae.c.rule_id == rule["id"]):
        _resolve(conn, alert, rule, states.get(alert["run_pk"], alert["started_at"]), delivery, now)
    conn.execute(st.delete().where(st.c.rule_id == rule["id"]))


def _open_alerts(conn, where) -> list[dict]:
    return [dict(r) for r in conn.execute(
        sa.select(ae, runs.c.run_id, runs.c.name.label("run_name"))
        .join(runs, runs.c.id == ae.c.run_pk).where(where, ae.c.status == "firing")).mappings()]


def _resolve(conn, alert: dict, rule: dict, at: float, delivery: Delivery | None, now: float) -> dict:
    at = max(at, alert["started_at"])
    conn.execute(ae.update().where(ae.c.id == alert["id"]).values(status="resolved", ended_at=at))
    alert.update(status="resolved", ended_at=at)
    notifications.enqueue(conn, "resolved", alert, rule, delivery, now)
    return alert


# -- evaluation ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Transition:
    """An alert that started firing or resolved in one evaluation."""

    status: str                 # firing | resolved
    alert: dict                 # the alert_events row (with run_id, run_name)
    rule: dict                  # the rule row


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
    rows = conn.execute(
        sa.select(sr.c.t, sr.c.mode, sr.c.reason, sa.func.sum(sr.c.steps))
        .where(sr.c.run_pk == run_pk, sr.c.bucket_s == 1, sr.c.stage.in_(stages_of(rule["stage"])),
               sr.c.t >= first, sr.c.t <= last)
        .group_by(sr.c.t, sr.c.mode, sr.c.reason))
    out: dict[int, list] = {}
    for t, mode, reason, n in rows:
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
        run_pk = conn.execute(sa.select(runs.c.id).where(runs.c.run_id == run_id)).scalar()
        if run_pk is None:
            return []
        first, last = conn.execute(sa.select(sa.func.min(sr.c.t), sa.func.max(sr.c.t)).where(
            sr.c.run_pk == run_pk, sr.c.bucket_s == 1, sr.c.stage.in_(stages_of(rule["stage"])))).one()
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


def evaluate_alerts(store: Store, now: float | None = None, *, delivery: Delivery | None = None) -> list[Transition]:
    """Evaluate every enabled rule over the new event time of the runs in scope; returns
    the transitions (each already owed to its receivers in the outbox)."""
    now = time.time() if now is None else now
    transitions: list[Transition] = []
    with store.write() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_ADVISORY_LOCK})")
        rules = [dict(r) for r in conn.execute(sa.select(ar).order_by(ar.c.id)).mappings()]
        for rule in rules:
            if not rule["enabled"]:
                _end_rule_alerts(conn, rule, delivery, now)
                continue
            if rule.get("kind") == "regression":
                from collector import regressions
                transitions.extend(Transition(status, alert, rule)
                                   for status, alert in regressions.evaluate_rule(conn, rule, now, delivery))
                continue
            transitions.extend(_evaluate_rule(conn, rule, now, delivery))
    return transitions


def _candidates(conn, rule: dict) -> list:
    """Runs with event time this rule has not evaluated yet, or that ended while pending or firing."""
    joined = runs.outerjoin(st, sa.and_(st.c.run_pk == runs.c.id, st.c.rule_id == rule["id"]))
    return conn.execute(
        sa.select(runs.c.id, runs.c.run_id, runs.c.name, runs.c.status, runs.c.created_at, runs.c.ended_at,
                  runs.c.last_event_ts, runs.c.last_seen_at, st.c.run_pk.label("has_state"), st.c.evaluated_to, st.c.pending_since,
                  st.c.clear_since, st.c.alert_id)
        .select_from(joined)
        .where(runs.c.last_event_ts.is_not(None), sa.or_(
            sa.and_(st.c.run_pk.is_(None), runs.c.last_seen_at >= rule["created_at"]),
            runs.c.last_event_ts > st.c.evaluated_to,
            sa.and_(runs.c.status != "running", sa.or_(
                st.c.alert_id.is_not(None), st.c.pending_since.is_not(None), runs.c.ended_at > st.c.evaluated_to))))
        .order_by(runs.c.id)).all()


def watches(rule: dict, run_name: str) -> bool:
    """Whether the rule covers a run of this name (its ``run_pattern`` glob; none: every run)."""
    return rule["run_pattern"] is None or fnmatch.fnmatchcase(run_name, rule["run_pattern"])


def _evaluate_rule(conn, rule: dict, now: float, delivery: Delivery | None) -> list[Transition]:
    out: list[Transition] = []
    for run in _candidates(conn, rule):
        if not watches(rule, run.name):
            _skip_run(conn, rule, run)
            continue
        out.extend(_evaluate_run(conn, rule, run, now, delivery))
    return out


def _skip_run(conn, rule: dict, run) -> None:
    """A run out of the rule's scope: remembered as evaluated, so it is not looked at again
    until it has new events."""
    if run.has_state is None:
        conn.execute(st.insert().values(rule_id=rule["id"], run_pk=run.id, evaluated_to=run.last_event_ts))
    else:
        conn.execute(st.update().where(st.c.rule_id == rule["id"], st.c.run_pk == run.id)
                     .values(evaluated_to=run.last_event_ts))


def _evaluate_run(conn, rule: dict, run, now: float, delivery: Delivery | None) -> list[Transition]:
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
        first_data = conn.execute(sa.select(sa.func.min(sr.c.t)).where(
            sr.c.run_pk == run.id, sr.c.bucket_s == 1, sr.c.stage.in_(stages_of(rule["stage"])))).scalar()
        if run.created_at < rule["updated_at"]:   # a run older than the rule: from its present on
            start = last - 1
        else:
            start = (int(first_data) if first_data is not None else last) - 1
        adopted = conn.execute(sa.select(ae.c.id).where(ae.c.rule_id == rule["id"], ae.c.run_pk == run.id,
                                                        ae.c.status == "firing")).scalar()
        state = {"evaluated_to": float(start), "pending_since": None, "clear_since": None, "alert_id": adopted}
        conn.execute(st.insert().values(rule_id=rule["id"], run_pk=run.id, **state))
    else:
        state = {"evaluated_to": run.evaluated_to, "pending_since": run.pending_since,
                 "clear_since": run.clear_since, "alert_id": run.alert_id}
    names = {"run_id": run.run_id, "run_name": run.name}
    transitions: list[Transition] = []
    alert = None
    if state["alert_id"] is not None:
        row = conn.execute(sa.select(ae).where(ae.c.id == state["alert_id"])).mappings().first()
        alert = {**dict(row), **names} if row is not None and row["status"] == "firing" else None
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
                        _save_alert(conn, alert)
                        _resolve(conn, alert, rule, float(t), delivery, now)
                        transitions.append(Transition("resolved", dict(alert), rule))
                        alert, changed = None, False
                        state.update(alert_id=None, clear_since=None, pending_since=None)
            elif active:
                if state["pending_since"] is None:
                    state["pending_since"] = float(t)
                if t - state["pending_since"] >= rule["for_s"]:
                    alert = _fire(conn, rule, run.id, names, float(t), ratio, steps, window.dominant_reason(t),
                                  delivery, now)
                    transitions.append(Transition("firing", dict(alert), rule))
                    state.update(alert_id=alert["id"], pending_since=None, clear_since=None)
            else:
                state["pending_since"] = None
            t += 1
            window.add(t, 1)
            window.add(t - window_s, -1)
        if alert is not None and changed:
            _save_alert(conn, alert)
        state["evaluated_to"] = float(stop)

    if ended and state["evaluated_to"] >= last:
        state.update(pending_since=None, evaluated_to=max(state["evaluated_to"], frontier))
        if alert is not None:         # the run ended: so did its alert
            end = run.ended_at if run.ended_at is not None else float(last)
            _resolve(conn, alert, rule, min(end, frontier), delivery, now)
            transitions.append(Transition("resolved", dict(alert), rule))
            state.update(alert_id=None, clear_since=None)
    conn.execute(st.update().where(st.c.rule_id == rule["id"], st.c.run_pk == run.id).values(**state))
    return transitions


def _fire(conn, rule: dict, run_pk: int, names: dict, t: float, ratio: float, steps: int, reason: str | None,
          delivery: Delivery | None, now: float) -> dict:
    values = {"rule_id": rule["id"], "rule_name": rule["name"], "run_pk": run_pk, "status": "firing",
              "threshold": rule["threshold"], "started_at": t, "ended_at": None, "peak": ratio, "value": ratio,
              "steps": steps, "reason": reason}
    alert_id = conn.execute(ae.insert().values(**values)).inserted_primary_key[0]
    alert = {"id": alert_id, **values, **names}
    notifications.enqueue(conn, "firing", alert, rule, delivery, now)
    return alert


def _save_alert(conn, alert: dict) -> None:
    conn.execute(ae.update().where(ae.c.id == alert["id"]).values(
        value=alert["value"], peak=alert["peak"], steps=alert["steps"], reason=alert["reason"]))


# -- what readers see -------------------------------------------------------------------------

def public_rule(rule: dict, writer: bool) -> dict:
    """A rule as a reader sees it: the webhook URL (itself often a secret) only for writers."""
    if writer or not rule.get("webhook_url"):
        return rule
    return {**rule, "webhook_url": webhook_urls.redact(rule["webhook_url"])}


def resolve_run_alerts(conn, run_pk: int, delivery: Delivery | None, now: float) -> None:
    """A run is going away: its firing alerts resolve (notified), its outbox rows are kept."""
    rules = {r["id"]: dict(r) for r in conn.execute(sa.select(ar)).mappings()}
    for alert in _open_alerts(conn, ae.c.run_pk == run_pk):
        rule = rules.get(alert["rule_id"])
        if rule is not None:
            run_last = conn.execute(sa.select(runs.c.last_event_ts).where(runs.c.id == run_pk)).scalar()
            _resolve(conn, alert, rule, run_last or alert["started_at"], delivery, now)
    conn.execute(an.update().where(an.c.alert_id.in_(sa.select(ae.c.id).where(ae.c.run_pk == run_pk)))
                 .values(alert_id=None))
    conn.execute(st.delete().where(st.c.run_pk == run_pk))
