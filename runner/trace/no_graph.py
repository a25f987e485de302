"""Why a traced process has no CUDA graph, when PyTorch does not say.

Three cases PyTorch is silent about (read in its source, 2.4 to 2.13):

- no CUDA: ``torch.cuda.is_available()`` is False, or the process never initialised CUDA. Under
  ``torch.compile(mode="reduce-overhead")`` Inductor then skips CUDA graphs for every graph
  without a message: its skip counter (``counters["inductor"]["cudagraph_skips"]``) goes up,
  ``log_cudagraph_skip_and_bump_counter`` is only called for graphs with CUDA tensors;
- graphs off in Inductor's config: the graphs were compiled with ``triton.cudagraphs`` False
  (``torch.compile``'s default mode, or options / ``torch._inductor.config`` setting it off).
  ``TORCHINDUCTOR_CUDAGRAPHS`` only sets that config's default: ``reduce-overhead`` and
  ``max-autotune`` turn it on whatever the variable says;
- a skip Inductor counted without saying why (e.g. a graph whose skip was decided when it was
  first compiled and is now loaded from a cache).

The hooks (``replayscope.runner.trace.hooks``): ``torch._inductor.compile_fx.compile_fx`` (what
``torch.compile``'s Inductor backend calls, importing it at each call) says whether a graph was
compiled with CUDA graphs on; the skip counter is read around each Dynamo compile. Pure: no
torch import here.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from replayscope.runner.trace.causes import Cause

CONFIG_KEY = "triton.cudagraphs"
ENV_CUDAGRAPHS = "TORCHINDUCTOR_CUDAGRAPHS"


class GraphIntent:
    """What the process's Inductor compiles asked for, and what Inductor skipped silently."""

    __slots__ = ("compiles", "with_graphs", "silent_skips")

    def __init__(self):
        self.compiles = 0          # Inductor compiles (torch.compile's backend calls)
        self.with_graphs = 0       # ... compiled with triton.cudagraphs on
        self.silent_skips = 0      # CUDA-graph skips Inductor counted without a message


def skip_count() -> int | None:
    """Inductor's own count of CUDA-graph skips, or None before Dynamo is imported."""
    utils = sys.modules.get("torch._dynamo.utils")
    try:
        return int(utils.counters["inductor"]["cudagraph_skips"])
    except Exception:  # noqa: BLE001 (not imported yet, or another layout)
        return None


def no_graph_cause(intent: GraphIntent, cuda: str) -> Cause | None:
    """Why no CUDA graph exists in the process, from what it compiled and the device; None when
    nothing explains it."""
    silent = (f"; Inductor counted {intent.silent_skips} CUDA-graph skip"
              f"{'s' if intent.silent_skips != 1 else ''} without a message" if intent.silent_skips else "")
    compiled = (": torch.compile(mode=\"reduce-overhead\") runs without CUDA graphs on the CPU and PyTorch "
                "says nothing of it" if intent.compiles else "")
    if cuda == "unavailable":
        return Cause("cpu_device", f"CUDA is not available in this process (torch.cuda.is_available() is "
                                   f"False){compiled}{silent}")
    if cuda == "uninitialized":
        return Cause("cpu_device", f"CUDA was never initialised in this process: its work ran on the CPU"
                                   f"{compiled}{silent}")
    if intent.compiles and not intent.with_graphs:
        env = os.environ.get(ENV_CUDAGRAPHS)
        set_by = f"; {ENV_CUDAGRAPHS}={env} is set" if env is not None else ""
        return Cause("graphs_disabled", f"torch.compile compiled {intent.compiles} graph"
                                        f"{'s' if intent.compiles != 1 else ''} with Inductor's CUDA graphs off "
                                        f"({CONFIG_KEY} False: the mode is not reduce-overhead or max-autotune, "
                                        f"or options or torch._inductor.config turned it off{set_by})")
    if intent.silent_skips:
        return Cause("unknown", f"Inductor counted {intent.silent_skips} CUDA-graph skip"
                                f"{'s' if intent.silent_skips != 1 else ''} without a message (e.g. a graph "
                                f"loaded from its cache, its skip decided when it was first compiled)")
    return None


def asked_for_graphs(config_patches: Any) -> bool:
    if isinstance(config_patches, dict) and CONFIG_KEY in config_patches:
        return bool(config_patches[CONFIG_KEY])
    config = sys.modules.get("torch._inductor.config")
    return bool(getattr(getattr(config, "triton", None), "cudagraphs", False))
