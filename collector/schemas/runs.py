"""A run as the reads return it: the runs list, the summary, its charts' rows."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from replayscope.collector.schemas.base import ModeCounts, Out
from replayscope.contract import wire

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
    eager_ratio: Optional[float] = Field(description="eager steps / all steps, prefill included (0 without steps); "
                                                     "null when some steps' mode is unknown (modes.unknown)")
    decode_steps: int = Field(description="steps of the decode stages (decode and mixed)")
    decode_eager_steps: int = Field(description="eager steps of the decode stages")
    decode_eager_ratio: Optional[float] = Field(description="decode_eager_steps / decode_steps: the headline "
                                                            "eager share; null without decode steps, or when some "
                                                            "steps' mode is unknown (modes.unknown)")
    decode_sampled_every: Optional[int] = Field(description="the source logs 1 in this many decode batches "
                                                            "(SGLang): the decode figures are a sample; null: every one")
    padding_known: bool = Field(description="false: the source cannot tell padded steps from graph steps "
                                            "(an engine's /metrics without a known capture list, or padding "
                                            "in not_measured)")
    padded_ratio: Optional[float] = Field(description="padded_tokens / (num_tokens + padded_tokens); null "
                                                      "where padding_known is false")
    num_tokens: int
    padded_tokens: int
    decode_num_tokens: int = Field(description="num_tokens of the decode stages' steps (decode and mixed)")
    decode_padded_tokens: int = Field(description="padded_tokens of the decode stages' steps (decode and mixed)")
    decode_padded_ratio: Optional[float] = Field(
        description="decode_padded_tokens / (decode_num_tokens + decode_padded_tokens); null without tokens in "
                    "the decode stages, or where padding_known is false")
    not_measured: list[str] = Field(
        description="what the run's source cannot give (replayscope.contract.wire NOT_MEASURABLE: modes, padding, reasons, "
                    "batch_sizes), shown as unknown, never 0; e.g. a scrape of vLLM's /metrics")
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
    unknown: int = Field(0, description="steps counted without their mode (a scrape of vLLM's /metrics)")
    steps: int
    eager_ratio: Optional[float] = Field(description="eager / steps; null when some steps' mode is unknown")


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
