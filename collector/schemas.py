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


class Out(BaseModel):
    """A response body: every key it has is declared (an undeclared one fails the response,
    so a test finds it, rather than FastAPI dropping it on the way out)."""

    model_config = ConfigDict(extra="forbid")


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
    return create_model(name, __config__=ConfigDict(populate_by_name=True, extra="forbid"), **fields)


CaptureRow = _row_model("CaptureRow", "capture")
PhaseRow = _row_model("PhaseRow", "phase")
DegradeRow = _row_model("DegradeRow", "degrade")
ParityRow = _row_model("ParityRow", "parity")
WarningRow = _row_model("WarningRow", "warning")
RecordingRow = _row_model("RecordingRow", "recording")


class IngestResponse(Out):
    accepted: int
    duplicates: int


class RunCreated(Out):
    run_id: str
    created: bool


class ModeCounts(Out):
    graph: int
    padded: int
    eager: int


class RunListItem(Out):
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


class LogSample(Out):
    stage: str
    every: int = Field(description="the source logs 1 in this many steps of the stage")
    provenance: str
    logged: int = Field(description="steps of the stage the log gave")


class StepDetail(Out):
    graph_sample: Optional[int] = Field(description="1 in N graph steps was sent one by one; null: all")
    raw_expired_before: Optional[float] = Field(description="raw step events before this ts were pruned by "
                                                            "retention; null: none")
    seconds_expired_before: Optional[float] = Field(description="1-second rollups before this ts were pruned "
                                                                "by retention; null: none")
    log_sample: Optional[LogSample] = Field(description="the source logs 1 in N steps of a stage (SGLang's "
                                                        "decode lines); null: every step")


class RunSummary(RunListItem):
    config: Optional[dict[str, Any]]
    torch_version: Optional[str]
    reasons: dict[str, int] = Field(description="eager steps per reason")
    last_event_ts: Optional[float]
    last_seen_at: Optional[float]
    error: Optional[str]
    partial: bool = Field(description="the source did not see the run's start")
    time_provenance: Optional[str]
    version: Optional[str] = Field(description="the engine's version as the run record names it")
    step_detail: StepDetail = Field(description="how much step detail is stored for the run")
    failure: Optional[dict[str, Any]] = Field(description="where a failed run failed: ts, error, rank, phase, graph_bs")
    clock_ahead_s: Optional[float] = Field(
        None, description="the furthest an event was stamped ahead of the collector's clock when it arrived "
                          "(more than 60 s; such events count at their arrival in last_event_ts), else null")


class TimelinePoint(Out):
    t: float = Field(description="bucket start, unix seconds")
    graph: int
    padded: int
    eager: int
    steps: int
    eager_ratio: float


class ReasonRow(Out):
    reason: Optional[str]
    steps: int
    duration_s: float
    share: float = Field(description="share of the run's eager steps")


class BatchRow(Out):
    raw_bs: int
    mode: str
    steps: int
    num_tokens: int
    padded_tokens: int


class StepTimeRow(Out):
    stage: str
    mode: str
    steps: int
    timed_steps: int
    total_s: float
    mean_s: Optional[float]


class Evidence(Out):
    text: str
    provenance: Literal[wire.PROVENANCES] = Field(  # type: ignore[valid-type]
        description="measured, log (the engine's own line), inferred (derived by replayscope) or "
                    "estimated (from a cost model)")


class Finding(Out):
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


class Diagnosis(Out):
    run_id: str
    source: str
    status: Literal[wire.RUN_STATUSES]  # type: ignore[valid-type]
    stand_in: bool = Field(description="CPU stand-in (static backend): its times are CPU timings")
    timing_note: Optional[str]
    startup_s: Optional[float]
    capture: dict[str, Any] = Field(description="total_s, sizes, count, ok, failed, planned, with provenance")
    findings: list[Finding] = Field(description="the outcome first, then by seconds over the expectation")


class PlanScoreOut(Out):
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


class PriceOut(Out):
    value: Optional[float] = Field(description="null: nothing to price it from")
    error: Optional[float] = Field(description="± this, when a fit gives one")
    provenance: Optional[str] = Field(description="none | measured | log | fit | estimated")
    basis: str = Field(description="where the figure comes from")


class PlanOut(Out):
    name: str = Field(description="current (the run's own list; empty with graphs off) | proposed")
    sizes: list[int]
    fit: PlanScoreOut = Field(description="on the steps the sizes were chosen from")
    held_back: Optional[PlanScoreOut] = Field(description="on the steps held back (null: none held back)")
    all: PlanScoreOut
    capture_s: PriceOut
    pool_bytes: PriceOut


class Advice(Out):
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


# A figure that is a count of bytes or a share: kept an integer when it is one.
Number = Union[int, float]


class RegressionFinding(Out):
    metric: Literal[tuple(REGRESSION_METRICS)]  # type: ignore[valid-type]
    label: str
    unit: str = Field(description="ratio | seconds | bytes")
    direction: Literal["worse", "better"]
    value: Number
    median: Number
    low: Number
    high: Number
    margin: Number
    change: Optional[float] = Field(description="share points for eager share, else relative to the median "
                                                "(null at a median of 0)")


class Baseline(Out):
    """The earlier finished runs of the same model and configuration a run is compared with."""

    runs: list[str]
    names: list[str]
    n: int
    first_started_at: float
    last_started_at: float
    versions: list[str]
    config_key: Optional[str]
    text: str


class RunRegressions(Out):
    baseline: Optional[Baseline] = Field(description="null: no earlier finished run of its configuration")
    regressions: list[RegressionFinding]
    improvements: list[RegressionFinding]
    judged: bool = Field(description="false with too few baseline runs to judge")
    figures: dict[str, Optional[Number]] = Field(description="the run's value per metric")


class RunFigures(Out):
    """A run's headline figures (``collector.analysis.fleet``): null when unknown."""

    eager_ratio: Optional[float]
    decode_padded_ratio: Optional[float]
    step_s: dict[str, Optional[float]] = Field(description="mean step time per mode, decode stages")
    graph_step_s: Optional[float]
    padded_step_s: Optional[float]
    eager_step_s: Optional[float]
    capture_total_s: Optional[float]
    startup_s: Optional[float]
    pool_bytes: Optional[int]


class FleetFigures(RunFigures):
    """Figures of a set of runs: shares weighted by steps and tokens, step times by timed
    steps, capture and startup as medians, pool memory as the largest."""

    runs: int
    steps: int
    regressions: int = Field(description="runs with a regression")


class FleetGroup(FleetFigures):
    model: str
    backend: str
    device: str
    version: Optional[str]
    latest_run_id: str
    latest_name: str
    first_started_at: float
    last_started_at: float


class FleetPoint(FleetFigures):
    group: str
    model: str
    backend: str
    device: str
    version: Optional[str]
    t: float = Field(description="bucket start (of the runs' start), unix s")
    bucket_s: int


class FleetRun(RunFigures):
    run_id: str
    name: str
    source: str
    model: str
    backend: str
    device: str
    version: Optional[str] = Field(description="the run record's, else 'torch <version>', else null")
    config_key: Optional[str]
    status: Literal[wire.RUN_STATUSES]  # type: ignore[valid-type]
    started_at: float
    ended_at: Optional[float]
    graph_sample: Optional[int]
    raw_expired_before: Optional[float]
    seconds_expired_before: Optional[float]
    steps: int
    modes: ModeCounts
    decode_num_tokens: int
    decode_padded_tokens: int
    regressions: list[RegressionFinding]
    improvements: list[RegressionFinding]
    baseline_runs: int
    baseline: Optional[Baseline] = Field(description="named only for a run with findings")


class Fleet(Out):
    groups: list[FleetGroup]
    runs: list[FleetRun] = Field(description="the newest runs, newest first, at most limit")
    runs_total: int
    series: list[FleetPoint]


class Health(Out):
    status: Literal["ok"]
    db: str = Field(description="sqlite | postgresql")


class ServiceState(Out):
    name: str
    interval_s: float
    ran_here: int = Field(description="periods this collector ran")
    skipped_here: int = Field(description="periods another collector ran")
    slot: Optional[int] = Field(None, description="the last period it ran in, on any collector (absent: never)")
    ran_at: Optional[float] = None
    holder: Optional[str] = Field(None, description="host:pid of the collector that ran it")
    runs: Optional[int] = Field(None, description="periods it ran in, on every collector")


class Problem(Out):
    """Every error (4xx and 5xx): ``detail`` is one readable line; an invalid field, body key
    or query/path parameter is named in ``field``, an event of a batch by its ``index``."""

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
