"""The read side's answers about a run: the startup post-mortem and the capture-size advice."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from replayscope.collector.schemas.base import Out
from replayscope.contract import wire

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


class UnaccountedStretch(Out):
    start_ts: float
    end_ts: float
    seconds: float
    after: str = Field(description="what it follows: the end of a phase, the run's start")
    before: str = Field(description="what ends it: the start of a phase, the ready line, the failure")


class Diagnosis(Out):
    run_id: str
    source: str
    status: Literal[wire.RUN_STATUSES]  # type: ignore[valid-type]
    stand_in: bool = Field(description="CPU stand-in (static backend): its times are CPU timings")
    timing_note: Optional[str]
    startup_s: Optional[float]
    capture: dict[str, Any] = Field(description="total_s, sizes, count, ok, failed, planned, with provenance")
    findings: list[Finding] = Field(description="the outcome first, then by seconds over the expectation")
    startup_from: Optional[float] = Field(description="where startup_s starts (unix s): the run's start, an "
                                                      "engine log's first line")
    ready_at: Optional[float] = Field(description="where startup_s ends when the log said it was ready "
                                                  "(unix s); null: it ends at the failure or last phase")
    unaccounted: list[UnaccountedStretch] = Field(description="stretches no phase, capture or line covers, "
                                                              "in time order")


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
    objective: dict[str, Any] = Field(description="kind (time | rows), unit, the cost line's numbers, provenance "
                                                  "(measured | estimated | given | default), basis; eager_extra "
                                                  "and piecewise_extra: the launch overhead an eager step and a "
                                                  "PIECEWISE graph step pay, full_max: the largest FULL graph")
    split: dict[str, Any] = Field(description="fit_share, fit_steps, held_back_steps, held_back_from_ts")
    plans: list[PlanOut]
    verdict: dict[str, Any] = Field(description="the proposal against the current list on the held-back steps; "
                                                "estimated: true when no step was timed (the cost is the estimate's)")
    dropped: list[dict[str, Any]] = Field(description="sizes the choice found and left off: size, saving, share of "
                                                      "its steps' cost, why (the gain does not pay for the graph, or "
                                                      "its pool is over the current list's), named (the size in its "
                                                      "unit: 'bs 48', '57 tokens')")
    cap: Optional[int] = Field(description="the largest size that could be chosen (the engine's limit, the "
                                           "largest batch; null: none)")
    validity: list[dict[str, Any]] = Field(description="per engine: label, own, problems, facts, unknown")
    flags: list[dict[str, Any]] = Field(description="engine, label (the versions that accept it), text, for_this_run, kind")
    decode_steps: int = Field(description="decode steps with a batch size the list decides")
    distinct_batch_sizes: int
    left_out: dict[str, int] = Field(description="decode steps eager for a reason no list decides, by reason")
    histogram: list[dict[str, Any]] = Field(description="steps per (raw_bs, mode) as the run ran them")
    notes: list[str]
    note: Optional[str]
