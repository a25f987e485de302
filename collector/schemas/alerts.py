"""Alert rules (both kinds), the alerts they raised and the notification outbox."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import ConfigDict, Field, create_model

from replayscope.collector.analysis.regressions import METRICS as REGRESSION_METRICS
from replayscope.collector.alert_rule import DEFAULTS, FIELDS, NAME_PATTERN, Spec
from replayscope.collector.schemas.base import Out

_TYPES = {"name": str, "ratio": float, "seconds": int, "count": int, "glob": str, "url": str, "flag": bool}


def _annotation(name: str, spec: Spec) -> Any:
    if spec.kind == "choice":
        kind = Literal[spec.choices]                                 # type: ignore[valid-type]
    elif name == "metric":                                             # the regression kind's vocabulary
        kind = Literal[tuple(REGRESSION_METRICS)]                      # type: ignore[valid-type]
    else:
        kind = _TYPES[spec.kind]
    return Optional[kind] if spec.nullable else kind


def _field(name: str, spec: Spec) -> tuple[Any, Any]:
    """A field of the documented schema, as ``replayscope.collector.alert_rule`` declares it (and checks it)."""
    bounds: dict[str, Any] = {}
    if spec.low is not None:
        bounds.update(ge=spec.low, le=spec.high)
    if spec.max_length is not None and spec.kind in ("name", "glob", "url"):
        bounds["max_length"] = spec.max_length
    if spec.kind == "name":
        bounds["pattern"] = NAME_PATTERN
    return _annotation(name, spec), Field(DEFAULTS.get(name, ...), description=spec.description or None, **bounds)


AlertRuleIn = create_model(
    "AlertRuleIn",
    __doc__="An eager-ratio alert rule (Prometheus semantics, on each run's own event time): active "
            "when eager/steps over the window > threshold with min_steps steps; fires after for_s "
            "active; resolves after keep_firing_for_s at or below resolve_threshold (or too few steps). "
            "Or a regression rule (kind).",
    **{name: _field(name, spec) for name, spec in FIELDS.items()})

AlertRulePatch = create_model(
    "AlertRulePatch",
    **{name: (Optional[f.annotation], Field(None, description=f.description))  # type: ignore[name-defined]
       for name, f in AlertRuleIn.model_fields.items()})


class AlertRule(AlertRuleIn):
    model_config = ConfigDict(extra="forbid")

    id: int
    created_at: float
    updated_at: float


class AlertEvent(Out):
    id: int
    rule_id: Optional[int]
    rule_name: str
    run_id: str
    run_name: str
    status: Literal["firing", "resolved"]
    threshold: float
    started_at: float
    ended_at: Optional[float]
    peak: float
    value: float
    steps: int
    reason: Optional[str]


class Notification(Out):
    """One transition owed to one receiver, in the outbox."""

    id: int
    fingerprint: str
    status: Literal["firing", "resolved"]
    receiver: str = Field(description="webhook | alertmanager")
    state: str = Field(description="pending, unanswered, sent, unconfirmed or expired")
    created_at: float
    expires_at: float
    next_attempt_at: float
    attempts: int
    sent_at: Optional[float]
    last_error: Optional[str] = Field(description="never the URL nor what the receiver answered")
    url: str = Field(description="scheme and host only, unless a writer asks")
    labels: dict[str, Any]
