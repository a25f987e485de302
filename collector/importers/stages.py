"""How each engine's batches become the wire's stages (``replayscope.contract.wire.STEP_STAGES``), and how
complete an engine's step counts are. docs/importing.md says the same to users; the run
page says it for each imported run.

**vLLM** ``--cudagraph-metrics`` rows carry no stage, only the runtime mode a batch ran in.
``CudagraphDispatcher`` (``vllm/v1/cudagraph_dispatcher.py``; model runner V2:
``vllm/v1/worker/gpu/cudagraph_utils.py``) keys FULL graphs by uniform decode batches only
when the mode runs decode on a routine of its own whose decode mode is FULL
(``CUDAGraphMode.separate_routine()``: FULL_AND_PIECEWISE, FULL_DECODE_ONLY): there a FULL
row is ``decode``. Every other row — PIECEWISE (the mixed routine; V1 also sends it a uniform
batch no FULL graph fits), NONE (more tokens than the largest size, or no key), FULL under
mode FULL (one routine for every batch) — may hold prefill and decode tokens: ``mixed``.

**SGLang** prints a ``Decode batch`` line for 1 in ``--decode-log-interval`` decode batches
(``forward_ct_decode % decode_log_interval == 0`` in its scheduler; 40 by default) and a
``Prefill batch`` line for every prefill batch: ``decode`` and ``prefill`` steps, the
decode ones a sample.
"""

from __future__ import annotations

from typing import Any

# vLLM modes whose FULL graphs serve uniform decode batches only.
VLLM_DECODE_ONLY_FULL = ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY")

# SGLang's --decode-log-interval when its server_args are not in the log.
SGLANG_DECODE_LOG_INTERVAL = 40

# What the run page says about how an imported run's steps got their stages.
STAGE_NOTES = {
    "vllm-log": ("vLLM's --cudagraph-metrics rows name the graph mode, not the batch: a FULL row under "
                 "FULL_AND_PIECEWISE or FULL_DECODE_ONLY is a decode step (vLLM replays FULL graphs only for "
                 "uniform decode batches there); every other row (PIECEWISE, NONE, FULL under mode FULL) is "
                 "mixed: it may hold prefill and decode tokens."),
    "vllm-metrics": ("vLLM's /metrics counts batches by their tokens without saying which are decode-only: "
                     "every step is mixed."),
    "sglang-log": ("SGLang's Decode batch lines are decode steps and its Prefill batch lines prefill steps "
                   "(its extend path, which --enable-mixed-chunk lets carry running requests)."),
    "sglang-metrics": "SGLang's cuda_graph_passes_total modes: decode_* are decode steps, prefill_* prefill.",
}


def vllm_row_stage(mode: str | None, runtime_mode: str) -> tuple[str, str | None]:
    """(stage, evidence) of a ``--cudagraph-metrics`` row: ``mode`` is the server's cudagraph
    mode (the table's ``- Mode:``, else the engine banner's; None when neither printed it),
    ``runtime_mode`` the row's (FULL, PIECEWISE, NONE). Evidence only where it is inferred."""
    if runtime_mode == "FULL" and mode in VLLM_DECODE_ONLY_FULL:
        return "decode", (f"a FULL row under {mode}: vLLM replays FULL graphs only for uniform decode "
                          "batches in this mode")
    return "mixed", None


def vllm_pass_stage(mode: str | None, desc: str) -> str:
    """The stage of a vLLM capture pass from its bar's description: V1 names it ("decode,
    FULL", "mixed prefill-decode, PIECEWISE"); model runner V2 names only the graph mode
    ("PIECEWISE", "FULL"), which maps as a metrics row's does (``vllm_row_stage``); V0's bar
    ("Capturing CUDA graph shapes") captured decode graphs only."""
    words = [w.strip() for w in desc.split(",")]
    runtime = words[-1].upper() if words and words[-1] else ""
    if len(words) > 1:
        return "decode" if words[0].lower() == "decode" else "mixed"
    if runtime in ("FULL", "PIECEWISE"):
        return vllm_row_stage(mode, runtime)[0]
    return "decode"


def log_sample(source: str, config: dict[str, Any] | None) -> dict[str, Any] | None:
    """How an imported run's step counts are sampled, or None when every step is counted:
    ``{"stage", "every", "provenance"}`` (``log``: the log printed the interval; ``inferred``:
    the engine's default, the log did not print it)."""
    if source != "sglang-log":
        return None
    every = (config or {}).get("decode_log_interval")
    provenance = "log"
    if every is None:
        every, provenance = SGLANG_DECODE_LOG_INTERVAL, "inferred"
    if every <= 1:
        return None
    return {"stage": "decode", "every": int(every), "provenance": provenance}


def padding_known(source: str, config: dict[str, Any] | None) -> bool:
    """Whether a run's steps tell a graph of their own size from a padded one (and so its
    padding): an engine's /metrics count graph replays without the batch they padded from,
    unless the run's capture list is known (from a flag or the engine's log, ``capture_sizes``).
    A source that says it cannot give padding (config ``not_measured``) cannot, whatever else."""
    if "padding" in ((config or {}).get("not_measured") or ()):
        return False
    if not source.endswith("-metrics"):
        return True
    return bool((config or {}).get("capture_sizes"))
