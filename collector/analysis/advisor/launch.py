"""What a CUDA graph saves a token-batched engine whose run timed no steps: an estimate.

A vLLM log gives the batches' token counts and how they ran, never their times. What a
graph saves is the launch overhead of an eager step, a fixed few hundred µs whatever the
batch, against a step's compute, which grows with its tokens:

- a step of ``T`` tokens costs ``W / HBM + W * T / FLOPS``: every weight byte read once, and
  2 FLOPs per parameter and token, with ``W`` the weights' bytes the log printed (2 bytes a
  parameter). A sum, not the roofline's maximum: a decode step's time does grow with its
  batch below the ridge (attention, activations, the sampler), and a padded row is not free;
- an eager step pays ``LAUNCH_S`` on top; a FULL graph (vLLM's uniform decode batches) saves
  all of it, a PIECEWISE graph (mixed prefill-decode batches, and decode batches above the
  FULL sizes) only ``PIECEWISE_SAVES`` of it: attention runs eager between its pieces;
- a padded graph step computes its padding rows too.

So a 2,048-token forward (tens of ms) gains well under 1% from a graph, and a decode step of
a few tokens (a few ms) several %. The figures are an H200's, the GPU this project measures on;
the result is ``estimated`` and says so. A size whose graph saves less than
``MIN_GAIN_SHARE`` of its steps' estimated time is within the estimate's error: not worth a
graph (``choice.paying_sizes``).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from replayscope.collector.analysis.advisor.objective import Objective

HBM_BYTES_PER_S = 4.8e12 * 0.8     # an H200's 4.8 TB/s, 80% of it reached by a decode step
DENSE_FLOPS = 989e12 * 0.6         # an H200's dense BF16 989 TFLOP/s, 60% of it reached by large GEMMs
LAUNCH_S = 300e-6                  # an eager step's launch overhead a FULL graph saves
PIECEWISE_SAVES = 0.5              # the share of it a PIECEWISE graph saves
MIN_GAIN_SHARE = 0.01              # a graph saving less of its steps' estimated time is not worth one
BYTES_PER_PARAM = 2                # BF16 / FP16 weights

PIECEWISE_ONLY_MODES = ("PIECEWISE",)
FULL_ONLY_MODES = ("FULL",)
DECODE_ONLY_MODES = ("FULL_DECODE_ONLY",)


def params_in_name(model: str) -> float | None:
    """Parameters a model's name states (``Llama-3.1-8B`` → 8e9, ``Qwen2-0.5B`` → 5e8), or None."""
    m = re.search(r"(?<![\d.])(\d+(?:\.\d+)?)\s*[bB](?![a-zA-Z])", model or "")
    return float(m.group(1)) * 1e9 if m else None


def weight_bytes(load_bytes: int | None, model: str) -> tuple[float | None, str]:
    """(the weights' bytes, where the figure comes from)."""
    if load_bytes:
        return float(load_bytes), f"the weights' {load_bytes / 2**30:.1f} GiB the log printed"
    params = params_in_name(model)
    if params:
        return params * BYTES_PER_PARAM, (f"{params / 1e9:g}B parameters from the model's name, "
                                          f"{BYTES_PER_PARAM} bytes each")
    return None, "neither the weights' size nor the model's parameters are known"


def full_graph_max(config: dict[str, Any], sizes: Sequence[int]) -> tuple[int | None, str]:
    """(the largest size vLLM captures a FULL graph for, in words): under FULL_AND_PIECEWISE
    the capture list's sizes up to the largest decode batch (``max_num_seqs`` x (1 + k)), or as
    many of its smallest sizes as the log's FULL capture pass counted; 0 under PIECEWISE (every
    graph piecewise); None: every graph FULL, or not known (decode steps priced as FULL)."""
    mode = str(config.get("cudagraph_mode") or "").upper()
    if mode in PIECEWISE_ONLY_MODES:
        return 0, "cudagraph_mode PIECEWISE: every graph is piecewise"
    if mode in FULL_ONLY_MODES:
        return None, "cudagraph_mode FULL: every graph is full"
    seqs = config.get("max_num_seqs")
    if isinstance(seqs, int) and seqs > 0:
        largest = seqs * (1 + int(config.get("num_speculative_tokens") or 0))
        return largest, f"FULL graphs for decode batches up to {largest} tokens (max_num_seqs)"
    for p in config.get("capture_passes") or []:
        count = p.get("graphs") or 0
        if "FULL" in str(p.get("pass")) and "PIECEWISE" not in str(p.get("pass")) and 0 < count <= len(sizes):
            largest = sorted(sizes)[count - 1]
            return largest, f"FULL graphs for decode batches up to {largest} tokens (the log's FULL capture pass)"
    return None, "the largest FULL graph is not in the log: decode steps are priced as FULL"


def launch_objective(config: dict[str, Any], model: str, load_bytes: int | None,
                     sizes: Sequence[int]) -> Objective | None:
    """The ``estimated`` objective, or None when the weights' size is not known."""
    weights, where = weight_bytes(load_bytes, model)
    if weights is None:
        return None
    full_max, full_why = full_graph_max(config, sizes)
    mode = str(config.get("cudagraph_mode") or "").upper()
    extra = 0.0 if mode in FULL_ONLY_MODES else LAUNCH_S * (1 - PIECEWISE_SAVES)
    mixed_text = f"{PIECEWISE_SAVES:.0%} by a PIECEWISE one (mixed batches)"
    if mode in DECODE_ONLY_MODES:              # mixed batches run eager whatever the list
        extra, mixed_text = LAUNCH_S, "nothing for a mixed batch (FULL_DECODE_ONLY runs them eager)"
    memory_s, per_token_s = weights / HBM_BYTES_PER_S, weights / DENSE_FLOPS
    basis = (f"estimated (the run timed no steps): a step of T tokens computes for {memory_s * 1e3:.2f} ms + "
             f"{per_token_s * 1e6:.1f} µs × T ({where}, on an H200: reading the weights, and 2 FLOPs per "
             f"parameter and token); an eager step launches its kernels for {LAUNCH_S * 1e6:.0f} µs more, all "
             f"saved by a FULL graph, {mixed_text}; {full_why}; "
             f"a size saving under {MIN_GAIN_SHARE:.0%} of its steps' time is not worth a graph")
    return Objective("time", memory_s, per_token_s, memory_s, per_token_s, "estimated", basis,
                     eager_extra=LAUNCH_S, piecewise_extra=extra, full_max=full_max)
