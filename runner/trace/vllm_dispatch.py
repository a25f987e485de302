"""Why vLLM's CUDA-graph dispatcher chose what it chose for a step: a pure function of its inputs.

vLLM's model runner V2 decides each step's graph in ``CudaGraphManager.dispatch(num_reqs,
num_tokens, uniform_token_count, num_active_loras)`` (``v1/worker/gpu/cudagraph_utils.py``,
vLLM 0.25.0): a FULL graph for a uniform decode batch whose token count one covers, else a
PIECEWISE graph (attention outside the graph) for any batch whose token count one covers, else
eager (``cg_mode`` NONE). It returns the descriptor and drops why. The trace reads the same inputs
and the graphs the manager captured (its ``_capture_descs``), and says why here:

| chosen | why (the step's reason, or its note) |
| --- | --- |
| NONE, graphs off (``cudagraph_mode`` NONE, ``enforce_eager``) | ``graphs_disabled`` |
| NONE, before the graphs were captured | ``not_captured`` |
| NONE, more tokens than the largest graph for its shape | ``batch_too_large`` |
| NONE, a LoRA count no graph was captured for | ``lora_not_captured`` |
| NONE, a mixed batch where only uniform decode has graphs (FULL_DECODE_ONLY) | ``prefill`` |
| NONE, uniform, but not decode's width (speculative decoding) and no PIECEWISE | ``spec_shape`` |
| PIECEWISE where FULL graphs exist | a note: prefill (a mixed batch), batch_too_large, lora_not_captured |

A step's stage follows the graph it ran on, as the log importer maps vLLM's rows: ``decode`` on a
FULL graph of a uniform decode batch (or eager for one), ``mixed`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from replayscope.runner.trace.causes import Cause


@dataclass(frozen=True)
class Graphs:
    """What the manager captured: token counts of its uniform decode (FULL) graphs and of the graphs
    that serve any batch shape (PIECEWISE, or FULL under mode FULL), per LoRA count."""

    mode: str                                   # the manager's cudagraph_mode (NONE, PIECEWISE, FULL_AND_PIECEWISE, ...)
    captured: bool                              # the graphs exist (dispatch returns NONE before)
    decode_query_len: int = 1
    decode: tuple[tuple[int, int, int], ...] = ()   # (num_tokens, uniform_token_count, num_active_loras)
    mixed: tuple[tuple[int, int], ...] = ()         # (num_tokens, num_active_loras)


@dataclass(frozen=True)
class Decision:
    stage: str
    hint: Cause | None = None       # why eager
    note: str | None = None         # why PIECEWISE, not FULL


def _batch(num_reqs: int, num_tokens: int) -> str:
    return f"{num_reqs} request{'s' if num_reqs != 1 else ''}, {num_tokens} token{'s' if num_tokens != 1 else ''}"


def explain(graphs: Graphs, num_reqs: int, num_tokens: int, uniform: int | None, loras: int,
            chosen: str) -> Decision:
    """The stage and the reason (NONE) or note (PIECEWISE) of one dispatch. ``chosen`` is the
    descriptor's ``cg_mode`` name; ``loras`` the effective LoRA count the manager dispatched on."""
    is_decode = uniform is not None and uniform == graphs.decode_query_len
    batch = _batch(num_reqs, num_tokens)
    decode_sizes = [n for n, width, lora in graphs.decode if width == uniform and lora == loras]
    mixed_sizes = [n for n, lora in graphs.mixed if lora == loras]
    if chosen == "FULL":
        return Decision("decode" if uniform is not None and decode_sizes else "mixed")
    if chosen == "PIECEWISE":
        if not graphs.decode:
            return Decision("mixed", note=f"PIECEWISE: cudagraph_mode {graphs.mode} has no FULL graphs "
                                          f"(attention runs outside the graphs)")
        if not is_decode:
            return Decision("mixed", note=f"PIECEWISE, not FULL (prefill): {batch}, a mixed prefill-decode batch; "
                                          f"vLLM's FULL graphs serve uniform decode batches only")
        largest = max((n for n, width, _l in graphs.decode if width == uniform), default=0)
        if num_tokens > largest:
            return Decision("mixed", note=f"PIECEWISE, not FULL (batch_too_large): {batch}; the largest FULL "
                                          f"decode graph holds {largest} tokens")
        if not decode_sizes:
            return Decision("mixed", note=f"PIECEWISE, not FULL (lora_not_captured): {batch} with {loras} "
                                          f"LoRA adapter(s); no FULL graph was captured for that count")
        return Decision("mixed", note=f"PIECEWISE, not FULL: {batch}; FULL decode graphs exist up to {largest} "
                                      f"tokens")
    stage = "decode" if is_decode else "mixed"
    if graphs.mode == "NONE" or not (graphs.decode or graphs.mixed):
        return Decision(stage, Cause("graphs_disabled", f"vLLM runs with cudagraph_mode {graphs.mode} "
                                                        f"(or enforce_eager): no CUDA graph was captured"))
    if not graphs.captured:
        return Decision(stage, Cause("not_captured", f"{batch} before vLLM captured its graphs"))
    serving = sorted(set(mixed_sizes + (decode_sizes if uniform is not None else [])))
    any_lora = [n for n, _l in graphs.mixed] + [n for n, w, _l in graphs.decode if w == uniform]
    if not serving and any_lora:
        return Decision(stage, Cause("lora_not_captured", f"{batch} with {loras} LoRA adapter(s): vLLM "
                                                          f"captured no graph for that count"))
    if not serving:
        if uniform is None or is_decode:
            return Decision(stage, Cause("prefill", f"{batch}, a mixed prefill-decode batch: cudagraph_mode "
                                                    f"{graphs.mode} has graphs for uniform decode batches only"))
        return Decision(stage, Cause("spec_shape", f"{batch}, {uniform} tokens per request: the graphs are "
                                                   f"for {graphs.decode_query_len} per request"))
    if num_tokens > serving[-1]:
        shape = "decode" if is_decode else "mixed prefill-decode"
        return Decision(stage, Cause("batch_too_large", f"{batch} ({shape}); the largest graph for it holds "
                                                        f"{serving[-1]} tokens"))
    return Decision(stage, Cause("not_captured", f"{batch}: no captured graph matched "
                                                 f"(uniform tokens per request {uniform}, sizes up to {serving[-1]})"))
