"""The kinds of alert rule, by ``alert_rules.kind``: each a module with the interface of
``replayscope.collector.alerting.rule_kind.RuleKind`` (validate, evaluate, labels); their names are
``replayscope.collector.alert_rule.RULE_KINDS`` (tests/collector/test_alert_rule.py keeps them equal)."""

from __future__ import annotations

from replayscope.collector.alert_rule import AlertRule
from replayscope.collector.alerting import eager_ratio, regression
from replayscope.collector.alerting.rule_kind import RuleKind

KINDS: dict[str, RuleKind] = {eager_ratio.NAME: eager_ratio, regression.NAME: regression}


def kind_of(rule: AlertRule) -> RuleKind:
    return KINDS[rule.kind]
