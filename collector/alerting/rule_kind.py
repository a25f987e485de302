"""What every kind of alert rule is (``alert_rules.kind``): the interface the evaluator,
the rule checks and the outbox call, so no kind is special-cased anywhere else.

A kind ``validate``s its own fields of a rule (the regression's ``metric``), ``evaluate``s one rule
over the runs in its scope in the evaluator's transaction (its transitions are owed to
the rule's receivers by the caller, ``replayscope.collector.alerting.alerts.evaluate_alerts``), and
gives the Alertmanager ``labels`` and annotations of one of its alerts. The kinds are
listed in ``replayscope.collector.alerting.kinds``.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Protocol

from replayscope.collector.alert_rule import AlertRule, InvalidRule, RuleFields
from replayscope.collector.models import alerts as alert_rows

__all__ = ["InvalidRule", "RuleKind", "Transition", "resolve_row", "watches"]


@dataclass(frozen=True)
class Transition:
    """An alert that started firing or resolved in one evaluation."""

    status: str                 # firing | resolved
    alert: dict                 # the alert_events row (with run_id, run_name)
    rule: AlertRule


def watches(rule: RuleFields, run_name: str) -> bool:
    """Whether the rule covers a run of this name (its ``run_pattern`` glob; none: every run):
    the one place a rule's scope is applied, by every kind and by the run page."""
    return rule.run_pattern is None or fnmatch.fnmatchcase(run_name, rule.run_pattern)


class RuleKind(Protocol):
    name: str

    def validate(self, fields: dict[str, Any]) -> None:
        """Raise ``InvalidRule`` when this kind's own fields of a rule are wrong."""

    def evaluate(self, conn, rule: AlertRule, now: float) -> list[Transition]:
        """The rule's alerts that fired or resolved since its last evaluation (rows written)."""

    def labels(self, alert: dict[str, Any], rule: AlertRule, status: str) -> tuple[dict[str, str], dict[str, str]]:
        """Alertmanager labels and annotations of one alert in ``status``."""


def resolve_row(conn, alert: dict, at: float) -> dict:
    """An open alert resolves at ``at`` (never before it started)."""
    at = max(at, alert["started_at"])
    alert_rows.resolve(conn, alert["id"], at)
    alert.update(status="resolved", ended_at=at)
    return alert
