"""Dispatch: which way a batch runs. A pure function of the batch and the capture plan.

The order of the checks below is the order of preference, as in vLLM's
``CudagraphDispatcher.dispatch``: nothing else happens here.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from replayscope.runner.plan import CapturePlan


@dataclass(frozen=True)
class BatchShape:
    """The properties of a batch that decide whether a captured graph can run it."""

    stage: str                     # decode | prefill | verify | mixed
    raw_bs: int
    query_len: int = 1             # tokens per request in this step
    adapters: frozenset[int] = field(default_factory=frozenset)   # LoRA adapters in the batch (0 = none)
    grammar_switched: bool = False  # some request's grammar mask changed since its last step
    caller_reason: str | None = None  # a reason only the caller can see (library use)


@dataclass(frozen=True)
class Decision:
    mode: str                 # graph | padded | eager
    graph_bs: int | None      # the captured size replayed; None when eager
    reason: str | None        # why eager; None otherwise


def _eager(reason: str) -> Decision:
    return Decision("eager", None, reason)


def dispatch(batch: BatchShape, plan: CapturePlan) -> Decision:
    if batch.caller_reason is not None:
        return _eager(batch.caller_reason)
    if not plan.enabled:
        return _eager("graphs_disabled")
    if batch.stage in ("prefill", "mixed"):
        return _eager("prefill")
    if batch.query_len != plan.query_len:
        return _eager("spec_shape" if batch.stage == "verify" else "not_captured")
    if not batch.adapters <= plan.lora_adapters | {0}:
        return _eager("lora_not_captured")
    if batch.grammar_switched:
        return _eager("grammar_switch")

    captured = plan.captured
    if not captured:
        return _eager("capture_failed")
    if batch.raw_bs in captured:
        return Decision("graph", batch.raw_bs, None)
    if plan.padding:
        i = bisect.bisect_left(captured, batch.raw_bs)
        if i < len(captured):
            return Decision("padded", captured[i], None)

    # No graph can serve it: say which fact of the plan is to blame.
    if batch.raw_bs > plan.max_size:
        return _eager("batch_too_large")
    if batch.raw_bs in plan.failed or (plan.padding and any(s >= batch.raw_bs for s in plan.failed)):
        return _eager("capture_failed")
    return _eager("not_captured")
