"""API models, generated from ``runner.wire``'s field tables so OpenAPI shows the real
event schema. The hot ingest path does not go through these (it validates raw JSON with
``runner.wire.validate_event``); they document it, and shape the read responses.
"""

from __future__ import annotations

import keyword
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from collector.analysis.regressions import METRICS as REGRESSION_METRICS
from runner import wire
from runner.wire import FieldSpec

_REASON_DOC = ("one of " + ", ".join(wire.REASONS) + f", or '{wire.CUSTOM_REASON_PREFIX}<text>' "
               f"(1-{wire.CUSTOM_REASON_MAX_CHARS} printable characters)")


def _annotation(spec: FieldSpec) -> Any:
    if spec.choices:
        base: Any = Literal[spec.choices]  # type: ignore[valid-type]
    else:
        base = {"str": str, "reason": str, "int": int, "float": float, "bool": bool,
                "object": dict[str, Any]}[spec.type]
    return Optional[base] if spec.nullable or not spec.required else base


def _field(name: str, spec: FieldSpec, *, all_optional: bool = False) -> tuple[str, tuple[Any, Any]]:
    kw: dict[str, Any] = {"description": (spec.doc or None) if spec.type != "reason" else
                          ((spec.doc + "; ") if spec.doc else "") + _REASON_DOC}
    if spec.minimum is not None and spec.type in ("int", "float"):
        kw["ge"] = spec.minimum
    if spec.maximum is not None and spec.type in ("int", "float"):
        kw["le"] = spec.maximum
    if spec.type in ("str", "reason") and not spec.choices:
        kw["max_length"] = spec.max_chars
        if spec.pattern is not None:
            kw["pattern"] = spec.pattern.pattern
    py_name = name
    if keyword.iskeyword(name):
        py_name, kw["alias"] = name + "_", name
    required = spec.required and not all_optional
    annotation = _annotation(spec) if not all_optional else Optional[_annotation(spec)]
    return py_name, (annotation, Field(... if required else None, **kw))


def _title(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("_"))


def _event_model(kind: str) -> type[BaseModel]:
    fields = dict(_field(n, s) for n, s in wire.COMMON_EVENT_FIELDS.items() if n != "kind")
    fields["kind"] = (Literal[kind], Field(...))  # type: ignore[valid-type]
    fields.update(_field(n, s) for n, s in wire.EVENT_FIELDS[kind].items())
    return create_model(f"{_title(kind)}Event", __config__=ConfigDict(extra="allow", populate_by_name=True),
                        **fields)


EVENT_MODELS: dict[str, type[BaseModel]] = {kind: _event_model(kind) for kind in wire.EVENT_KINDS}
Event = Annotated[Union[tuple(EVENT_MODELS.values())], Field(discriminator="kind")]  # type: ignore[misc]


class EventBatch(BaseModel):
    """``POST /v1/runs/{run_id}/events``: all-or-nothing; a repeated seq is ignored."""

    events: list[Event]  # type: ignore[valid-type]


RunRecord = create_model("RunRecord", __config__=ConfigDict(extra="allow"),
                         **dict(_field(n, s) for n, s in wire.RUN_FIELDS.items()))


def _row_model(name: str, kind: str, rename: dict[str, str] | None = None) -> type[BaseModel]:
    fields = {"seq": (int, ...), "ts": (float, ...)}
    fields.update(_field(n, s, all_optional=True) for n, s in wire.EVENT_FIELDS[kind].items())
    return create_model(name, __config__=ConfigDict(populate_by_name=True), **fields)


CaptureRow = _row_model("CaptureRow", "capture")
PhaseRow = _row_model("PhaseRow", "phase")
DegradeRow = _row_model("DegradeRow", "degrade")
ParityRow = _row_model("ParityRow", "parity")
WarningRow = _row_model("WarningRow", "warning")
RecordingRow = _row_model("RecordingRow", "recording")


class IngestResponse(BaseModel):
    accepted: int
    duplicates: int


class RunCreated(BaseModel):
    run_id: str
    created: bool


class ModeCounts(BaseModel):
    graph: int
    padded: int
    eager: int


class RunListItem(BaseModel):
    run_id: str
    name: str
    source: str
    backend: str
    model: str
    device: str
    status: Literal[wire.RUN_STATUSES]  # type: ignore[valid-type]
    started_at: float
    ended_at: Optional[float]
    steps: int
    modes: ModeCounts
    stage_steps: dict[str, int] = Field(description="steps per stage")
    eager_ratio: float = Field(description="eager steps / all steps")
    padded_ratio: float = Field(description="padded_tokens / (num_tokens + padded_tokens)")
    num_tokens: int
    padded_tokens: int
    decode_num_tokens: int = Field(description="num_tokens of the decode stages' steps (decode and mixed)")
    decode_padded_tokens: int = Field(description="padded_tokens of the decode stages' steps (decode and mixed)")
    decode_padded_ratio: Optional[float] = Field(
        description="decode_padded_tokens / (decode_num_tokens + decode_padded_tokens); null without tokens in "
                    "the decode stages")
    capture_total_s: Optional[float] = Field(description="seconds; null when the source gave no capture time")
    alerts_firing: int


class RunSummary(RunListItem):
    config: Optional[dict[str, Any]]
    torch_version: Optional[str]
    reasons: dict[str, int] = Field(description="eager steps per reason")
    last_event_ts: Optional[float]
    last_seen_at: Optional[float]
    error: Optional[str]
    partial: bool = Field(description="the source did not see the run's start")
    time_provenance: Optional[str]
    failure: Optional[dict[str, Any]] = Field(description="where a failed run failed: ts, error, rank, phase, graph_bs")
    clock_ahead_s: Optional[float] = Field(
        None, description="the furthest an event was stamped ahead of the collector's clock when it arrived "
                          "(more than 60 s; such events count at their arrival in last_event_ts), else null")


class TimelinePoint(BaseModel):
    t: float = Field(description="bucket start, unix seconds")
    graph: int
    padded: int
    eager: int
    steps: int
    eager_ratio: float


class ReasonRow(BaseModel):
    reason: Optional[str]
    steps: int
    duration_s: float
    share: float = Field(description="share of the run's eager steps")


class BatchRow(BaseModel):
    raw_bs: int
    mode: str
    steps: int
    num_tokens: int
    padded_tokens: int


class StepTimeRow(BaseModel):
    stage: str
    mode: str
    steps: int
    timed_steps: int
    total_s: float
    mean_s: Optional[float]


class Evidence(BaseModel):
    text: str
    provenance: Literal[wire.PROVENANCES] = Field(  # type: ignore[valid-type]
        description="measured, log (the engine's own line), inferred (derived by replayscope) or "
                    "estimated (from a cost model)")


class Finding(BaseModel):
    cause: str = Field(description="failure, interrupted, slow_weight_load, load_setup, torch_compile, "
                                   "slow_size, slow_captures, too_many_sizes, unaccounted, graph_memory")
    title: str
    severity: Literal["error", "warning", "info"]
    seconds: Optional[float] = Field(description="startup time over the expectation; null when the "
                                                 "finding is not a matter of time (failures, memory)")
    evidence: list[Evidence]
    actions: dict[str, list[str]] = Field(description="what to do, per engine: replayscope, vllm, sglang")
    failure_class: Optional[str] = Field(description="oom, kernel_assert, collective, capture_invalidated, "
                                                     "compile_error, timeout, unknown (failures only)")
    where: Optional[dict[str, Any]] = Field(description="where a failure happened: phase, graph_bs, rank, ts")


class Diagnosis(BaseModel):
    run_id: str
    source: str
    status: Literal[wire.RUN_STATUSES]  # type: ignore[valid-type]
    stand_in: bool = Field(description="CPU stand-in (static backend): its times are CPU timings")
    timing_note: Optional[str]
    startup_s: Optional[float]
    capture: dict[str, Any] = Field(description="total_s, sizes, count, ok, failed, planned, with provenance")
    findings: list[Finding] = Field(description="the outcome first, then by seconds over the expectation")


class PlanScoreOut(BaseModel):
    sizes: list[int]
    steps: int
    graph_steps: int = Field(description="served by a graph of their own size")
    padded_steps: int = Field(description="served by a larger graph")
    eager_steps: int = Field(description="served by no graph")
    padded_rows: int
    computed_rows: int = Field(description="rows the graphs computed, padding included, plus the eager rows")
    cost: float = Field(description="the objective's total (objective.unit)")
    eager_share: Optional[float]
    waste_share: Optional[float] = Field(description="padding waste: padded rows / rows computed")
    cost_per_step: Optional[float]


class PriceOut(BaseModel):
    value: Optional[float] = Field(description="null: nothing to price it from")
    error: Optional[float] = Field(description="± this, when a fit gives one")
    provenance: Optional[str] = Field(description="none | measured | log | fit | estimated")
    basis: str = Field(description="where the figure comes from")


class PlanOut(BaseModel):
    name: str = Field(description="current (the run's own list; empty with graphs off) | proposed")
    sizes: list[int]
    fit: PlanScoreOut = Field(description="on the steps the sizes were chosen from")
    held_back: Optional[PlanScoreOut] = Field(description="on the steps held back (null: none held back)")
    all: PlanScoreOut
    capture_s: PriceOut
    pool_bytes: PriceOut


class Advice(BaseModel):
    run_id: str
    name: Optional[str]
    source: Optional[str]
    engine: str = Field(description="runner | vllm | sglang: whose rules the proposal keeps")
    engine_label: str
    stage: Optional[str] = Field(description="the decode-like stage the sizes serve")
    budget: int
    budget_basis: str
    sizes: list[int] = Field(description="the proposed capture sizes")
    graphs_used: int
    graphs_off: Optional[str] = Field(description="why the run had no graphs and what turns them on")
    padding: bool
    objective: dict[str, Any] = Field(description="kind (time | rows), unit, the cost line's numbers, provenance, basis")
    split: dict[str, Any] = Field(description="fit_share, fit_steps, held_back_steps, held_back_from_ts")
    plans: list[PlanOut]
    verdict: dict[str, Any] = Field(description="the proposal against the current list on the held-back steps")
    validity: list[dict[str, Any]] = Field(description="per engine: label, own, problems, facts, unknown")
    flags: list[dict[str, Any]] = Field(description="engine, label (the versions that accept it), text, for_this_run, kind")
    decode_steps: int = Field(description="decode steps with a batch size the list decides")
    distinct_batch_sizes: int
    left_out: dict[str, int] = Field(description="decode steps eager for a reason no list decides, by reason")
    histogram: list[dict[str, Any]] = Field(description="steps per (raw_bs, mode) as the run ran them")
    notes: list[str]
    note: Optional[str]


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
    id: int
    created_at: float
    updated_at: float


class AlertEvent(BaseModel):
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


class Problem(BaseModel):
    """An error: ``detail`` is one readable line; batch errors also name index and field."""

    detail: str
    index: Optional[int] = None
    field: Optional[str] = None


def request_body(model: type[BaseModel]) -> dict:
    """``openapi_extra`` documenting a body that the route parses itself."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


def add_component_schemas(openapi: dict, models: list[type[BaseModel]]) -> dict:
    schemas = openapi.setdefault("components", {}).setdefault("schemas", {})
    for model in models:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in schema.pop("$defs", {}).items():
            schemas.setdefault(name, sub)
        schemas[model.__name__] = schema
    return openapi
