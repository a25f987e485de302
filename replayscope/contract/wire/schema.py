"""Wire contract v1: the one definition of replayscope's run record and events: the
vocabulary (modes, stages, sources, provenances, reasons) and every field's type and range.

The runner writes it, the importers produce it, the collector validates it (``replayscope.contract.wire.checks``)
(``replayscope.collector.schemas`` builds its API models from the tables below). Fields may be
added; the ones here may not change meaning. Pure Python: no torch, no pydantic, so
every side of the wire can import it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any


WIRE_VERSION = 1
MODES = ("graph", "padded", "eager")
# A count of steps whose mode the source does not give (vLLM's /metrics counts engine steps,
# not how each ran): only ``step_counts`` may say it; a ``step`` event always knows its mode.
MODE_UNKNOWN = "unknown"
STEP_COUNT_MODES = MODES + (MODE_UNKNOWN,)
# What a step's stage means, whatever its source (docs/importing.md maps each engine's batches):
STEP_STAGES = (
    "decode",    # known to hold only decode tokens: each request's next token
    "prefill",   # prompt tokens on the engine's prefill (extend) path
    "verify",    # speculative decoding's verification of draft tokens, on graphs of its own
    "mixed",     # holds, or may hold, prefill and decode tokens together: the source does not say
                 # it is decode-only (vLLM V1 runs every such batch on graphs keyed by its tokens)
)
# The decode figures are over these stages, for every source: padding, the batch sizes by
# mode, the advisor's traffic, the default alert rule, the Prometheus rule and the Grafana
# board. A ``mixed`` batch holds decode tokens too, on a path graphs serve; ``prefill`` is
# eager by design where it has no graphs, ``verify`` is sized in draft tokens.
DECODE_STAGES = ("decode", "mixed")
# How an alert rule's ``stage`` names them: a rule watches one stage, or the decode stages.
DECODE_VIEW = "+".join(DECODE_STAGES)
RULE_STAGES = STEP_STAGES + (DECODE_VIEW,)


def stages_of(selection: str) -> tuple[str, ...]:
    """The stages a rule's ``stage`` (one of RULE_STAGES) selects."""
    return DECODE_STAGES if selection == DECODE_VIEW else (selection,)


# The stages a GraphRunner captures for; an imported capture may also be "mixed": a graph for
# batches that may hold prefill and decode tokens (vLLM's PIECEWISE pass)
RUNNER_CAPTURE_STAGES = ("decode", "prefill", "verify")
CAPTURE_STAGES = RUNNER_CAPTURE_STAGES + ("mixed",)
CAPTURE_STATUSES = ("ok", "failed")
RUN_END_STATUSES = ("finished", "failed", "interrupted")
RUN_STATUSES = ("running",) + RUN_END_STATUSES
SOURCES = ("runner", "library", "trace", "vllm-log", "sglang-log", "vllm-metrics", "sglang-metrics")
# Where a figure came from. Every number replayscope shows can say which:
PROVENANCES = (
    "measured",   # timed or counted while the program ran (our runner, the library, trace, engine counters)
    "log",        # stated by the engine's own log line
    "inferred",   # derived by replayscope from other facts; the event's ``evidence`` says from what
    "estimated",  # computed from a cost model (e.g. bytes over a plausible bandwidth), not observed
)
_LOG_SOURCES = ("vllm-log", "sglang-log")


def default_provenance(source: str) -> str:
    """The provenance of a figure whose event does not name one: what its source does."""
    return "log" if source in _LOG_SOURCES else "measured"


# Why a step ran eager. Closed vocabulary, from the engines' code and docs (vLLM's CUDA
# graph dispatcher, SGLang's cuda graph runner); extend deliberately (collector/analysis/reasons.py must explain every entry).
REASONS = (
    "prefill",            # variable-length input: a graph records fixed shapes
    "batch_too_large",    # batch size above the largest captured size
    "not_captured",       # padding off and this exact size was not captured
    "lora_not_captured",  # a LoRA adapter with no captured graph variant
    "grammar_switch",     # grammar mask state changed; the graph does not hold it
    "spec_shape",         # speculative verify width differs from the captured one
    "capture_failed",     # the graph that would serve this size failed to capture
    "graphs_disabled",    # graphs off for the run (backend disabled / enforce-eager)
    # Seen by `replayscope trace` in programs it did not write, from PyTorch Inductor's own
    # cudagraph decisions ("skipping cudagraphs due to ...") and from the device in use:
    "graph_warmup",       # Inductor's warm-up or recording call of a compiled function: no graph replayed yet
    "mutated_inputs",     # Inductor skipped graphs: the compiled code mutates an input it does not own
    "cpu_device",         # the work ran on the CPU (no CUDA in the process, or CPU tensors in the graph)
    "dynamic_shapes",     # Inductor skipped graphs for a graph with dynamic (symbolic) shapes
    "incompatible_op",    # Inductor skipped graphs: the graph holds an op that cannot be captured
    "non_tensor_inputs",  # Inductor skipped graphs: the compiled graph takes inputs that are not tensors
    "rerecord_limit",     # Inductor re-recorded the graph too often and runs the function eager for good
    "unknown",            # the source did not say why (imported data; or trace saw no cause)
)
# The reasons a choice of capture sizes decides: another list would have served (or not
# served) these steps. Every other reason sends a step eager whatever the list holds (an
# adapter, a grammar switch, a prefill...); "unknown" is judged step by step (the advisor).
SIZE_DECIDED_REASONS = ("batch_too_large", "not_captured", "capture_failed", "graphs_disabled")
# A caller of the runner library may name a reason of its own; it is recorded as is,
# behind this prefix, and shown as the caller's own words.
CUSTOM_REASON_PREFIX = "custom:"
CUSTOM_REASON_MAX_CHARS = 120
EVENT_KINDS = ("phase", "capture", "step", "step_counts", "degrade", "parity", "run_end", "heartbeat",
               "warning", "recording")
# Why PyTorch Inductor recorded a CUDA graph of a compiled function (``recording`` events,
# from ``replayscope trace``); Inductor's own checks before a replay name the re-record causes.
RECORDING_CAUSES = (
    "first",                # the function's first recording
    "new_shape",            # a new input shape: dynamic shapes record a graph per size, a recompile per shape
    "recompiled",           # Dynamo compiled the function again for the same input shapes
    "static_input_moved",   # a static input (parameter, buffer, marked static) is at another address
    "managed_input_moved",  # an input from an earlier graph's output pool is at another address
    "output_alive",         # an earlier graph's output the recording expected dead is still alive
    "new_path",             # called after another graph than when it was recorded (graph trees record per path)
    "unknown",              # re-recorded, and this PyTorch does not say why
)
# Bounds on every number the store sums or the pages show, so no value that passes
# validation can overflow a column, a rollup or a chart later.
MAX_TIMESTAMP = 4_102_444_800.0      # 2100-01-01 UTC, in unix seconds
MAX_DURATION_S = 30 * 24 * 3600.0    # a step, phase, capture or interval longer than 30 days is a bug
MAX_BATCH = 2**20                    # batch and graph sizes (database INTEGER columns)
MAX_STEP_TOKENS = 2**24              # tokens in one step
MAX_COUNT = 2**40                    # step_counts aggregates: sums of 2^23 of them still fit a BIGINT
MAX_BYTES = 2**53                    # memory sizes (exact in a JSON number / JavaScript)
MAX_SEQ = 2**62
MAX_BATCH_SIZES = 4096               # batch sizes in one list or step_counts event
_FLOAT_MAX = sys.float_info.max      # an integer beyond it cannot be stored as a float
_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
_NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.:-]{0,63}$")


class WireError(ValueError):
    """A record that breaks the contract; ``field`` names the offending field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class FieldSpec:
    type: str                      # "str" | "int" | "float" | "bool" | "object" | "reason"
    required: bool = True
    nullable: bool = False
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    timestamp: bool = False        # unix seconds: a value past MAXIMUM is named as milliseconds etc.
    max_chars: int = 4096
    pattern: re.Pattern[str] | None = None
    doc: str = ""


def _f(type_: str, **kw: Any) -> FieldSpec:
    return FieldSpec(type_, **kw)


def _ts(**kw: Any) -> FieldSpec:
    return _f("float", minimum=0, maximum=MAX_TIMESTAMP, timestamp=True, **kw)


def _duration(**kw: Any) -> FieldSpec:
    return _f("float", minimum=0, maximum=MAX_DURATION_S, **kw)


def _batch(**kw: Any) -> FieldSpec:
    return _f("int", minimum=1, maximum=MAX_BATCH, **kw)


def _provenance() -> FieldSpec:
    return _f("str", required=False, nullable=True, choices=PROVENANCES,
              doc="where the event's figures came from; absent: the source's default "
                  "(log for log importers, else measured)")


def _rank() -> FieldSpec:
    return _f("str", required=False, nullable=True, max_chars=64,
              doc="the process it happened on, as the engine names it: TP1, DP0 TP3, PP1, rank 2, pid 4242")


RUN_FIELDS: dict[str, FieldSpec] = {
    "run_id": _f("str", pattern=_ID_PATTERN, max_chars=128, doc="unique id of the run"),
    "name": _f("str", max_chars=200, doc="human name of the run"),
    "source": _f("str", choices=SOURCES, doc="who produced the run"),
    "started_at": _ts(doc="unix seconds (not milliseconds), before 2100"),
    "backend": _f("str", max_chars=64, doc="cuda, compile, static, disabled, or an engine's mode"),
    "model": _f("str", max_chars=300),
    "device": _f("str", max_chars=200),
    "torch_version": _f("str", required=False, nullable=True, max_chars=64),
    "config": _f("object", required=False, doc="capture sizes, max bs, padding, compile, workload"),
    "wire_version": _f("int", required=False, minimum=1, maximum=1000),
    "partial": _f("bool", required=False, nullable=True,
                  doc="the source did not see the run's start (a log excerpt that begins mid-way)"),
    "time_provenance": _f("str", required=False, nullable=True, choices=PROVENANCES,
                          doc="how the run's timestamps were obtained: inferred when, e.g., the log "
                              "prints no year"),
    "version": _f("str", required=False, nullable=True, max_chars=64,
                  doc="the version of what is deployed (a release tag, an engine version): the fleet "
                      "page groups runs by it and regressions name it"),
    "graph_sample": _f("int", required=False, nullable=True, minimum=1, maximum=MAX_BATCH,
                       doc="1 in this many graph steps is sent as a step event; the others arrive "
                           "counted in step_counts events (with batch_sizes), so totals stay exact"),
}
COMMON_EVENT_FIELDS: dict[str, FieldSpec] = {
    "seq": _f("int", minimum=0, maximum=MAX_SEQ, doc="unique per run; a repeated seq is a retry"),
    "ts": _ts(doc="unix seconds (not milliseconds), before 2100"),
    "kind": _f("str", choices=EVENT_KINDS),
}
EVENT_FIELDS: dict[str, dict[str, FieldSpec]] = {
    "phase": {
        "phase": _f("str", pattern=_NAME_PATTERN, max_chars=64,
                    doc="load_weights, warmup, compile, capture, kv_cache, engine_init, ..."),
        "duration_s": _duration(nullable=True, doc="null: the phase happened but its length is unknown"),
        "start_ts": _ts(required=False, nullable=True, doc="when the phase began; ts - duration_s when absent"),
        "mem_bytes": _f("int", required=False, nullable=True, minimum=-MAX_BYTES, maximum=MAX_BYTES),
        "provenance": _provenance(),
        "rank": _rank(),
    },
    "capture": {
        "graph_bs": _batch(),
        "stage": _f("str", choices=CAPTURE_STAGES),
        "duration_s": _duration(nullable=True, doc="null: captured, but not timed"),
        "pool_bytes": _f("int", required=False, nullable=True, minimum=0, maximum=MAX_BYTES,
                         doc="graph pool size after"),
        "pool_delta_bytes": _f("int", required=False, nullable=True, minimum=-MAX_BYTES, maximum=MAX_BYTES,
                               doc="may be negative"),
        "status": _f("str", choices=CAPTURE_STATUSES),
        "error": _f("str", required=False, nullable=True, max_chars=4000),
        "variant": _f("str", required=False, nullable=True, max_chars=64,
                      doc="what the graph was captured with, e.g. compile"),
        "provenance": _provenance(),
        "rank": _rank(),
    },
    "step": {
        "stage": _f("str", choices=STEP_STAGES),
        "mode": _f("str", choices=MODES),
        "raw_bs": _batch(),
        "graph_bs": _batch(nullable=True, doc="null when eager"),
        "num_tokens": _f("int", minimum=0, maximum=MAX_STEP_TOKENS),
        "padded_tokens": _f("int", minimum=0, maximum=MAX_STEP_TOKENS),
        "reason": _f("reason", nullable=True, doc="one of REASONS when eager, else null"),
        "duration_s": _duration(nullable=True),
        "evidence": _f("str", required=False, nullable=True, max_chars=500,
                       doc="what was seen that gave the reason, when it is not plain from the batch"),
    },
    # Engines that report aggregates (vLLM's --cudagraph-metrics table, SGLang's
    # counters) arrive as counts of steps rather than one event per step.
    "step_counts": {
        "stage": _f("str", choices=STEP_STAGES),
        "mode": _f("str", choices=STEP_COUNT_MODES,
                   doc="unknown: the source counted these steps but not how they ran"),
        "reason": _f("reason", nullable=True),
        "count": _f("int", minimum=1, maximum=MAX_COUNT),
        "num_tokens": _f("int", minimum=0, maximum=MAX_COUNT),
        "padded_tokens": _f("int", minimum=0, maximum=MAX_COUNT),
        "duration_s": _duration(required=False, nullable=True),
        "interval_s": _duration(required=False, nullable=True),
        "provenance": _provenance(),
        "evidence": _f("str", required=False, nullable=True, max_chars=500,
                       doc="what supports the reason (required in spirit when provenance is inferred), "
                           "or the stage where the source does not state it"),
        # Per-size counts (vLLM's --cudagraph-metrics rows, /metrics histogram buckets): the
        # batch size these steps had and the graph that served them, when the source says.
        "raw_bs": _batch(required=False, nullable=True,
                         doc="the batch size (tokens) of these steps; null when the source gives none"),
        "graph_bs": _batch(required=False, nullable=True,
                           doc="the captured size that served them; null when eager or not said"),
        # Counts of several sizes at once (the runner's sampled graph steps: one event a second).
        "batch_sizes": _f("object", required=False, nullable=True,
                          doc="the counted steps by raw batch size: {\"<raw_bs>\": {\"count\", "
                              "\"num_tokens\", \"padded_tokens\", \"duration_s\"}}, summing to the "
                              "event's totals; with it the steps count in the batch-size histogram. "
                              "Not with raw_bs"),
    },
    "degrade": {
        "from": _f("str", max_chars=64),
        "to": _f("str", max_chars=64),
        "error": _f("str", nullable=True, max_chars=4000),
        "graph_bs": _batch(required=False, nullable=True),
        "rank": _rank(),
    },
    "parity": {
        "graph_bs": _batch(),
        "max_abs_diff": _f("float", minimum=0),
        "rel_err": _f("float", minimum=0),
        "tolerance": _f("float", required=False, nullable=True, minimum=0),
    },
    "run_end": {
        "status": _f("str", choices=RUN_END_STATUSES),
        "error": _f("str", required=False, nullable=True, max_chars=4000),
        # Where a failed run failed, when known.
        "rank": _rank(),
        "phase": _f("str", required=False, nullable=True, pattern=_NAME_PATTERN, max_chars=64,
                    doc="the phase it failed in: load_weights, kv_cache, compile, capture, serving, ..."),
        "graph_bs": _batch(required=False, nullable=True, doc="the capture size it failed at"),
    },
    "heartbeat": {},
    # Something the reader should know about the run that is not a step or a phase: a batch
    # the collector rejected, a hook that could not be installed, a figure dropped.
    "warning": {
        "message": _f("str", max_chars=4000),
        "code": _f("str", required=False, nullable=True, pattern=_NAME_PATTERN, max_chars=64,
                   doc="a stable short name, e.g. rejected_event, hook_missing"),
        "rank": _rank(),
    },
    # PyTorch Inductor recorded a CUDA graph of a compiled function (reduce-overhead): its first
    # recording, a new shape, or a re-record, counted against PyTorch's re-record limit.
    "recording": {
        "function": _f("str", max_chars=200, doc="the compiled function, e.g. forward (frame 0)"),
        "cause": _f("str", choices=RECORDING_CAUSES),
        "evidence": _f("str", required=False, nullable=True, max_chars=500,
                       doc="what was seen that gave the cause"),
        "graph_bs": _batch(required=False, nullable=True, doc="the batch of the call it was recorded in"),
        "recordings": _f("int", minimum=1, maximum=MAX_COUNT,
                         doc="recordings of this function so far, this one included"),
        "rerecords": _f("int", required=False, nullable=True, minimum=0, maximum=MAX_COUNT,
                        doc="PyTorch's own count of this function's re-records against its limit; "
                            "null when this PyTorch keeps none"),
        "rerecord_limit": _f("int", required=False, nullable=True, minimum=0, maximum=MAX_COUNT,
                             doc="the re-record limit in force (cudagraph_unexpected_rerecord_limit); "
                                 "null when this PyTorch applies none"),
        "rank": _rank(),
    },
}


def is_valid_reason(value: str) -> bool:
    if value in REASONS:
        return True
    if value.startswith(CUSTOM_REASON_PREFIX):
        text = value[len(CUSTOM_REASON_PREFIX):]
        return 0 < len(text) <= CUSTOM_REASON_MAX_CHARS and text.isprintable()
    return False


def custom_reason(text: str) -> str:
    """The wire form of a caller's own reason (``custom:<text>``)."""
    reason = CUSTOM_REASON_PREFIX + text
    if not is_valid_reason(reason):
        raise WireError("reason", f"a custom reason is 1-{CUSTOM_REASON_MAX_CHARS} printable characters")
    return reason


def reason_label(reason: str | None) -> str | None:
    """A bounded label for a reason: custom reasons collapse to ``custom``."""
    if reason is None:
        return None
    return "custom" if reason.startswith(CUSTOM_REASON_PREFIX) else reason


@dataclass(frozen=True)
class ListOf:
    """A JSON array of items of one shape (a FieldSpec, or an object with known fields)."""

    item: Any
    max_items: int = MAX_BATCH_SIZES
    doc: str = ""


@dataclass(frozen=True)
class MapOf:
    """A JSON object whose keys are free and whose values have one shape."""

    value: FieldSpec
    max_items: int = MAX_BATCH_SIZES
    doc: str = ""


def _optional(type_: str, **kw: Any) -> FieldSpec:
    return _f(type_, required=False, nullable=True, **kw)


# What a run's source may be unable to give (config ``not_measured``): each step's mode, its
# padding, why a step ran eager, and each step's batch size.
NOT_MEASURABLE = ("modes", "padding", "reasons", "batch_sizes")
_GRAPHS = _optional("int", minimum=0, maximum=MAX_BATCH)
CONFIG_FIELDS: dict[str, Any] = {
    "capture_sizes": ListOf(_batch(), doc="the batch sizes with a captured graph"),
    "capture_count": _optional("int", minimum=0, maximum=MAX_BATCH, doc="how many graphs were captured"),
    "capture_passes": ListOf({"pass": _optional("str", max_chars=200), "graphs": _GRAPHS, "graphs_done": _GRAPHS},
                             max_items=1024, doc="an engine's capture progress bars: graphs done of graphs"),
    "ranks": ListOf(_optional("str", max_chars=64), doc="the ranks that logged, in order"),
    "rank_headline": MapOf(_optional("str", max_chars=64), doc="per fact, the rank whose figure is the run's"),
    "weights": _optional("str", max_chars=64, doc="checkpoint or random"),
    "capture_timing": _optional("str", max_chars=64),
    "compile": _optional("bool"),
    "padding": _optional("bool"),
    "not_measured": ListOf(_optional("str", choices=NOT_MEASURABLE),
                           doc="what the source cannot give (a scrape of /metrics): shown as unknown, never 0"),
    "weights_mem": _optional("int", minimum=0, maximum=MAX_BYTES),
    "weight_bytes": _optional("int", minimum=0, maximum=MAX_BYTES),
    "graph_mem_bytes": _optional("int", minimum=-MAX_BYTES, maximum=MAX_BYTES),
    "graph_mem_estimate_bytes": _optional("int", minimum=-MAX_BYTES, maximum=MAX_BYTES),
    "available_gpu_mem_bytes": _optional("int", minimum=0, maximum=MAX_BYTES),
    "memory_cap_bytes": _optional("int", minimum=0, maximum=MAX_BYTES),
    "ready_at": _ts(required=False, nullable=True,
                    doc="when an engine's log said the server (or the offline engine) was ready, unix s"),
}
_BATCH_PART_FIELDS: dict[str, FieldSpec] = {
    "count": _f("int", minimum=1, maximum=MAX_COUNT),
    "num_tokens": _f("int", minimum=0, maximum=MAX_COUNT),
    "padded_tokens": _f("int", minimum=0, maximum=MAX_COUNT),
    "duration_s": _duration(required=False, nullable=True),
}
