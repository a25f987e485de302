"""Alert rules (both kinds), the alerts they raised and the notification outbox."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model

from collector.analysis.regressions import METRICS as REGRESSION_METRICS
from collector.schemas.base import Out
from runner import wire

class AlertRuleIn(BaseModel):
    """An eager-ratio alert rule (Prometheus semantics, on each run's own event time): active
    when eager/steps over the window > threshold with min_steps steps; fires after for_s
    active; resolves after keep_firing_for_s at or below resolve_threshold (or too few steps)."""

    name: str = Field(max_length=100)
    threshold: float = Field(ge=0, le=1, description="eager ratio, 0..1")
    window_s: int = Field(300, ge=1, le=7 * 24 * 3600, description="seconds of event time")
    min_steps: int = Field(100, ge=1, description="steps needed in the window to judge")
    for_s: int = Field(60, ge=0, le=7 * 24 * 3600, description="active this long before it fires (pending)")
    keep_firing_for_s: int = Field(300, ge=0, le=7 * 24 * 3600,
                                   description="clear this long before a firing alert resolves")
    resolve_threshold: Optional[float] = Field(None, ge=0, le=1,
                                               description="resolves at or below this (<= threshold); "
                                                           "null: the threshold")
    run_pattern: Optional[str] = Field(None, description="glob on run names; null = all runs")
    stage: Literal[wire.RULE_STAGES] = Field(  # type: ignore[valid-type]
        wire.DECODE_VIEW, description="the steps watched: one stage, or decode+mixed (the decode stages, "
                                      "where every source's decode steps are)")
    webhook_url: Optional[str] = Field(None, description="http(s); default: REPLAYSCOPE_ALERT_WEBHOOK. "
                                                         "Shown as scheme and host to readers without the token")
    enabled: bool = True
    kind: Literal["eager_ratio", "regression"] = Field(
        "eager_ratio", description="eager_ratio: the rule above; regression: fires for a run whose metric is "
                                   "beyond the spread of the earlier runs of its model and configuration, by at "
                                   "least threshold (share points for eager share, relative for the rest)")
    metric: Optional[Literal[tuple(REGRESSION_METRICS)]] = Field(  # type: ignore[valid-type]
        None, description="regression rules: the metric watched; null = any")


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
