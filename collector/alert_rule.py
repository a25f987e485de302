"""The alert rule, declared once: ``RuleFields`` is a frozen dataclass whose every field
carries its type, bounds, default and nullability (``Spec``), and from it follow

- the check every write of a rule goes through, the API's and the Alerts page's alike
  (``check_field``, called by ``replayscope.collector.alerting.alerts.validate_rule``): the same
  bounds, the same messages;
- the API's documented schema (``replayscope.collector.schemas.alerts.AlertRuleIn``, generated from ``FIELDS``);
- the store's columns (``replayscope.collector.tables.alert_rules``, generated from ``FIELDS``);
- the defaults (``DEFAULTS``) and the Alerts page's form (its bounds and first values);
- the typed rule the models return (``AlertRule``: the fields with ``id`` and times).

A kind's own field (the regression's ``metric``) is checked here for its type and
length, and by its kind for its value (``replayscope.collector.alerting.kinds``).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from replayscope.contract.errors import Invalid
from replayscope.contract.wire import DECODE_VIEW, RULE_STAGES

MAX_WINDOW_S = 7 * 24 * 3600
RULE_KINDS = ("eager_ratio", "regression")      # each a module of replayscope.collector.alerting (kinds.KINDS)
_REQUIRED = dataclasses.MISSING


class InvalidRule(Invalid):
    pass


@dataclass(frozen=True)
class Spec:
    """What a field of a rule may hold. ``kind``: name | ratio | seconds | count | glob | url |
    choice | flag | kind_text (a kind's own field)."""

    kind: str
    description: str = ""
    nullable: bool = False
    low: float | None = None
    high: float | None = None
    max_length: int | None = None
    choices: tuple[str, ...] = ()


def _field(kind: str, description: str = "", default: Any = _REQUIRED, **bounds: Any) -> Any:
    spec = Spec(kind, description, **bounds)
    return field(default=default, metadata={"spec": spec})


@dataclass(frozen=True, kw_only=True)
class RuleFields:
    """An alert rule as it is written (by the API or the Alerts page)."""

    name: str = _field("name", "1-100 characters: letters, digits, space, _ . : -", max_length=100)
    threshold: float = _field("ratio", "eager ratio, 0..1", low=0, high=1)
    window_s: int = _field("seconds", "seconds of event time", 300, low=1, high=MAX_WINDOW_S)
    min_steps: int = _field("count", "steps needed in the window to judge", 100, low=1, high=2**31 - 1)
    for_s: int = _field("seconds", "active this long before it fires (pending)", 60, low=0, high=MAX_WINDOW_S)
    keep_firing_for_s: int = _field("seconds", "clear this long before a firing alert resolves", 300,
                                    low=0, high=MAX_WINDOW_S)
    resolve_threshold: Optional[float] = _field(
        "ratio", "resolves at or below this (<= threshold); null: the threshold", None, nullable=True, low=0, high=1)
    run_pattern: Optional[str] = _field("glob", "glob on run names; null = all runs", None, nullable=True,
                                        max_length=200)
    stage: str = _field("choice", "the steps watched: one stage, or decode+mixed (the decode stages, where "
                                  "every source's decode steps are)", DECODE_VIEW, choices=RULE_STAGES, max_length=16)
    webhook_url: Optional[str] = _field("url", "http(s); default: REPLAYSCOPE_ALERT_WEBHOOK. Shown as scheme and "
                                               "host to readers without the token", None, nullable=True,
                                        max_length=2000)
    enabled: bool = _field("flag", "", True)
    kind: str = _field("choice", "eager_ratio: the rule above; regression: fires for a run whose metric is "
                                 "beyond the spread of the earlier runs of its model and configuration, by at "
                                 "least threshold (share points for eager share, relative for the rest)",
                       "eager_ratio", choices=RULE_KINDS, max_length=16)
    metric: Optional[str] = _field("kind_text", "regression rules: the metric watched; null = any", None,
                                   nullable=True, max_length=32)


@dataclass(frozen=True, kw_only=True)
class AlertRule(RuleFields):
    """A stored rule, as the models return it."""

    id: int
    created_at: float
    updated_at: float

    @classmethod
    def from_row(cls, row: Any) -> "AlertRule":
        return cls(**{f.name: row[f.name] for f in dataclasses.fields(cls)})

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FIELDS: dict[str, Spec] = {f.name: f.metadata["spec"] for f in dataclasses.fields(RuleFields)}
DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(RuleFields) if f.default is not _REQUIRED}
REQUIRED = tuple(name for name in FIELDS if name not in DEFAULTS)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.:-]{0,%d}$" % (FIELDS["name"].max_length - 1))
NAME_PATTERN = _NAME.pattern


# -- the check ----------------------------------------------------------------------------------

def check_field(name: str, value: Any) -> Any:
    """The field's value, normalised ('' is null where null is allowed), or ``InvalidRule``
    saying what it must be. The webhook URL's target and a kind's own field are checked
    further by ``replayscope.collector.alerting`` (they need the operator's policy and the kinds)."""
    spec = FIELDS.get(name)
    if spec is None:
        raise InvalidRule(name, f"unknown field (known: {', '.join(FIELDS)})")
    if value is None or (value == "" and spec.kind in ("glob", "url")):
        if spec.nullable:
            return None
    return _CHECKS[spec.kind](name, spec, value)


def _whole(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int)


def _name(name: str, spec: Spec, value: Any) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise InvalidRule(name, f"1-{spec.max_length} characters: letters, digits, space, _ . : -, starting "
                                "with a letter or digit")
    return value


def _ratio(name: str, spec: Spec, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidRule(name, "must be a number")
    if not spec.low <= value <= spec.high:
        raise InvalidRule(name, f"{value:g} is outside {spec.low:g}..{spec.high:g} (it is an eager ratio)")
    return float(value)


def _seconds(name: str, spec: Spec, value: Any) -> int:
    if not _whole(value):
        raise InvalidRule(name, "must be a whole number of seconds")
    if not spec.low <= value <= spec.high:
        raise InvalidRule(name, f"must be {spec.low}..{spec.high} seconds")
    return value


def _count(name: str, spec: Spec, value: Any) -> int:
    if not _whole(value) or not spec.low <= value <= spec.high:
        raise InvalidRule(name, f"must be a whole number {spec.low}..{spec.high}")
    return value


def _glob(name: str, spec: Spec, value: Any) -> str:
    if not isinstance(value, str) or len(value) > spec.max_length:
        raise InvalidRule(name, f"must be a glob on run names (up to {spec.max_length} characters) or null "
                                "for all runs")
    try:
        re.compile(fnmatch.translate(value))
    except re.error as error:
        raise InvalidRule(name, f"not a valid glob: {error}") from None
    return value


def _url(name: str, spec: Spec, value: Any) -> str:
    if not isinstance(value, str) or len(value) > spec.max_length:
        raise InvalidRule(name, f"must be an http(s) URL of up to {spec.max_length} characters or null (then "
                                "REPLAYSCOPE_ALERT_WEBHOOK is used)")
    return value


def _choice(name: str, spec: Spec, value: Any) -> str:
    if not isinstance(value, str) or value not in spec.choices:
        raise InvalidRule(name, f"{value!r} is not one of {', '.join(spec.choices)}")
    return value


def _flag(name: str, spec: Spec, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidRule(name, "must be true or false")
    return value


def _kind_text(name: str, spec: Spec, value: Any) -> str:
    if not isinstance(value, str) or len(value) > spec.max_length:
        raise InvalidRule(name, f"must be a name of up to {spec.max_length} characters or null")
    return value


_CHECKS = {"name": _name, "ratio": _ratio, "seconds": _seconds, "count": _count, "glob": _glob, "url": _url,
           "choice": _choice, "flag": _flag, "kind_text": _kind_text}
