"""Alert rules: validated, stored, evaluated by their kind (``replayscope.collector.alerting.kinds``);
the ``eager_ratio`` kind (``replayscope.collector.alerting.eager_ratio``) has Prometheus semantics:

A rule is *active* for a run at a moment ``t`` of the run's own event time when, over
``(t - window_s, t]``, at least ``min_steps`` steps of ``stage`` were recorded (steps and
engines' step counts alike) and the share of them that ran eager is above ``threshold``.
``stage`` is one stage or ``decode+mixed`` (the default): the decode stages,
``replayscope.contract.wire.DECODE_STAGES``, that every source's decode steps are in.
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
Each transition owes its receivers a notification (``replayscope.collector.alerting.notifications``), written
in the same transaction.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from sqlalchemy import exc as sa_exc

from replayscope.collector.alerting import notifications, webhook_urls
from replayscope.collector.alert_rule import DEFAULTS, REQUIRED, AlertRule, check_field
from replayscope.collector.alerting.kinds import KINDS, kind_of
from replayscope.collector.alerting.notifications import Delivery
from replayscope.collector.alerting.rule_kind import InvalidRule, Transition, resolve_row
from replayscope.collector.alerting.webhook_urls import TargetPolicy
from replayscope.collector.models import alerts as alert_rows, outbox as outbox_rows
from replayscope.collector.models.events import last_event_ts
from replayscope.collector.store import Store
from replayscope.contract.errors import Conflict, NotFound

# The rule every store starts with (migration 0009 writes it once; deleted, it stays deleted):
# the defaults (replayscope.collector.alert_rule) at a threshold of 20%. deploy/prometheus/replayscope-rules.yml
# is the same rule for Prometheus (tests/collector/test_prometheus_rules.py keeps them equal).
BUILTIN_EAGER_RATIO_RULE: dict[str, Any] = {**DEFAULTS, "name": "built-in - decode eager ratio above 0.2",
                                            "threshold": 0.2}


class UnknownRule(NotFound):
    def __init__(self, rule_id: int):
        super().__init__(f"no alert rule with id {rule_id}")
        self.rule_id = rule_id


class DuplicateRule(Conflict, InvalidRule):
    def __init__(self, name: str):
        super().__init__("name", f"a rule named {name!r} already exists")


# -- rules ---------------------------------------------------------------------------------

def _check_rule_field(name: str, value: Any, policy: TargetPolicy) -> Any:
    value = check_field(name, value)          # the bounds and messages of replayscope.collector.alert_rule
    if name == "webhook_url" and value is not None:
        check_webhook_url(value, policy, name)
    return value


def check_webhook_url(value: Any, policy: TargetPolicy | None = None, field: str = "webhook_url") -> None:
    """Webhooks are http(s) URLs with a host and a valid port, to an address the operator
    allows (``replayscope.collector.alerting.webhook_urls``); nothing else is ever posted to."""
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
        for required in REQUIRED:
            if required not in out:
                raise InvalidRule(required, "is required")
        for name, default in DEFAULTS.items():
            out.setdefault(name, default)
        _check_thresholds(out)
    # A partial change that names no kind is checked as the kind that has every field.
    KINDS[out.get("kind", "regression")].validate(out)
    return out


def _check_thresholds(fields: dict) -> None:
    """A rule's written fields (checked, defaults filled) resolve at or below where they fire."""
    resolve, threshold = fields.get("resolve_threshold"), fields["threshold"]
    if resolve is not None and resolve > threshold:
        raise InvalidRule("resolve_threshold", f"{resolve:g} is above the threshold {threshold:g}: "
                                               "a rule resolves at or below the share it fires above")


def _rule(conn, rule_id: int) -> AlertRule:
    rule = alert_rows.rule(conn, rule_id)
    if rule is None:
        raise UnknownRule(rule_id)
    return rule


def get_rule(store: Store, rule_id: int) -> AlertRule:
    with store.read() as conn:
        return _rule(conn, rule_id)


def create_rule(store: Store, data: Any, *, now: float | None = None, policy: TargetPolicy | None = None) -> AlertRule:
    """Create a rule (``policy``: the non-public webhook addresses allowed, see ``validate_rule``)."""
    fields = validate_rule(data, policy=policy)
    now = time.time() if now is None else now
    try:
        with store.write() as conn:
            rule_id = alert_rows.insert_rule(conn, fields, now)
            return _rule(conn, rule_id)
    except sa_exc.IntegrityError:
        raise DuplicateRule(fields["name"]) from None


def update_rule(store: Store, rule_id: int, data: Any, *, partial: bool = True, now: float | None = None,
                delivery: Delivery | None = None) -> AlertRule:
    """Change a rule (``partial``: only the given fields; else a full replacement).
    Disabling it resolves its firing alerts (and notifies their receivers)."""
    fields = validate_rule(data, partial=partial, policy=delivery.policy if delivery is not None else None)
    now = time.time() if now is None else now
    try:
        with store.write() as conn:
            current = _rule(conn, rule_id)
            _check_thresholds({**current.as_dict(), **fields})
            alert_rows.update_rule(conn, rule_id, fields, now)
            rule = _rule(conn, rule_id)
            scope_changed = (rule.run_pattern, rule.stage) != (current.run_pattern, current.stage)
            if not rule.enabled or scope_changed:
                _end_rule_alerts(conn, rule, delivery, now)    # other runs or steps: start afresh
            return rule
    except sa_exc.IntegrityError:
        raise DuplicateRule(fields.get("name", "")) from None


def delete_rule(store: Store, rule_id: int, *, now: float | None = None, delivery: Delivery | None = None) -> None:
    """Delete a rule; its firing alerts resolve (notified), its history stays."""
    now = time.time() if now is None else now
    with store.write() as conn:
        rule = _rule(conn, rule_id)
        _end_rule_alerts(conn, rule, delivery, now)
        alert_rows.delete_rule(conn, rule_id)


def _end_rule_alerts(conn, rule: AlertRule, delivery: Delivery | None, now: float) -> None:
    """Resolve a rule's firing alerts where each run's evaluation stands, and forget its state."""
    states = alert_rows.evaluated_to(conn, rule.id)
    for alert in alert_rows.firing_of_rule(conn, rule.id):
        _resolve(conn, alert, rule, states.get(alert["run_pk"], alert["started_at"]), delivery, now)
    alert_rows.forget_rule(conn, rule.id)


def _resolve(conn, alert: dict, rule: AlertRule, at: float, delivery: Delivery | None, now: float) -> dict:
    resolve_row(conn, alert, at)
    notifications.enqueue(conn, "resolved", alert, rule, delivery, now)
    return alert


# -- evaluation ------------------------------------------------------------------------------

def evaluate_alerts(store: Store, now: float | None = None, *, delivery: Delivery | None = None) -> list[Transition]:
    """Evaluate every enabled rule, each by its kind (``replayscope.collector.alerting.kinds``); returns the
    transitions, each owed to its receivers in the outbox in the same transaction."""
    now = time.time() if now is None else now
    transitions: list[Transition] = []
    with store.write() as conn:
        alert_rows.lock_evaluation(conn)
        for rule in alert_rows.rules(conn):
            if not rule.enabled:
                _end_rule_alerts(conn, rule, delivery, now)
                continue
            for transition in kind_of(rule).evaluate(conn, rule, now):
                notifications.enqueue(conn, transition.status, transition.alert, rule, delivery, now)
                transitions.append(transition)
    return transitions


# -- what readers see -------------------------------------------------------------------------

def public_rule(rule: AlertRule, writer: bool) -> AlertRule:
    """A rule as a reader sees it: the webhook URL (itself often a secret) only for writers."""
    if writer or not rule.webhook_url:
        return rule
    return dataclasses.replace(rule, webhook_url=webhook_urls.redact(rule.webhook_url))


def resolve_run_alerts(conn, run_pk: int, delivery: Delivery | None, now: float) -> None:
    """A run is going away: its firing alerts resolve (notified), its outbox rows are kept."""
    rules = {r.id: r for r in alert_rows.rules(conn)}
    for alert in alert_rows.firing_of_run(conn, run_pk):
        rule = rules.get(alert["rule_id"])
        if rule is not None:
            run_last = last_event_ts(conn, run_pk)
            _resolve(conn, alert, rule, run_last or alert["started_at"], delivery, now)
    outbox_rows.detach_run(conn, run_pk)
    alert_rows.forget_run(conn, run_pk)
