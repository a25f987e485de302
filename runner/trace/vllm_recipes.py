"""vLLM: its step and its per-size captures, in the V1 runner and the model runner V2.

Read in vllm-project/vllm's source (the search index's stored versions; commit of the file read):

| layout | step | a capture of one size |
| --- | --- | --- |
| V1: ``v1/worker/gpu_model_runner.py`` | ``GPUModelRunner.execute_model(scheduler_output, intermediate_tensors=None)`` | ``GPUModelRunner._dummy_run(num_tokens, cudagraph_runtime_mode=None, ...)`` (@000fc94), called per size by ``capture_model`` |
| model runner V2: ``v1/worker/gpu/model_runner.py`` | ``GPUModelRunner.execute_model(scheduler_output, intermediate_tensors=None, dummy_run=False, skip_attn_for_dummy_run=False, is_profile=False)``; its dummy and profile runs are not steps (@0036d38) | the ``cudagraph/`` manager: ``CudaGraphManager.capture_graph(cudagraph_key, model, ...)``, ``cudagraph_key.total_num_tokens``, ``.is_full_graph`` (``gpu/cudagraph/manager.py`` @1f8c5b6); ``gpu/cudagraph_utils.py``'s ``CudaGraphManager.capture`` has no per-size call: each graph is sized from the capturing frames' ``desc.num_tokens`` |

The step's batch is its scheduled tokens (vLLM keys its graphs by tokens, so padding is to the
captured token count); nothing scheduled, no step. Graphs off: ``enforce_eager`` or
``cudagraph_mode`` ``NONE``.
"""

from __future__ import annotations

from typing import Any

from runner.trace.causes import Cause
from runner.trace.hooks import Patches
from runner.trace.recipes import BatchOf, SizeOf, StepBatch, arg, capture_wrapper, incomplete, size_value, \
    step_wrapper
from runner.trace.tracer import Tracer


def graphs_off(runner: Any) -> bool:
    if getattr(getattr(runner, "model_config", None), "enforce_eager", False) is True:
        return True
    config = getattr(runner, "compilation_config", None) or getattr(
        getattr(runner, "vllm_config", None), "compilation_config", None)
    mode = getattr(config, "cudagraph_mode", None)
    return mode is not None and getattr(mode, "name", str(mode)) == "NONE"


def vllm_batch(tracer: Tracer) -> BatchOf:
    known: dict[str, Any] = {}

    def batch(args: tuple, kwargs: dict) -> StepBatch | None:
        if kwargs.get("dummy_run") or kwargs.get("is_profile"):
            return None                       # the V2 runner's warm-up and capture runs
        runner, scheduled = args[0], arg(args, kwargs, 1, "scheduler_output")
        tokens = size_value(getattr(scheduled, "total_num_scheduled_tokens", None))
        if tokens is None:
            return None                       # nothing scheduled: no forward
        if "off" not in known:
            known["off"] = graphs_off(runner)
            tracer.set_model(getattr(getattr(runner, "model_config", None), "model", None))
        per_request = getattr(scheduled, "num_scheduled_tokens", None)
        requests = len(per_request) if isinstance(per_request, dict) and per_request else tokens
        if tokens == requests:
            hint = Cause("graphs_disabled", "vLLM runs with enforce_eager or cudagraph_mode NONE") \
                if known["off"] else None
            return StepBatch("decode", tokens, tokens, hint)
        if getattr(scheduled, "scheduled_spec_decode_tokens", None):
            return StepBatch("verify", tokens, tokens)
        return StepBatch("mixed", tokens, tokens,
                         Cause("prefill", f"{requests} requests with {tokens} tokens: a batch with prompt tokens"))
    return batch


def dummy_run_size(tracer: Tracer) -> SizeOf:
    def size_of(args: tuple, kwargs: dict) -> tuple[int, str, str] | None:
        size = size_value(arg(args, kwargs, 1, "num_tokens"))
        if size is None:
            return None
        tracer.set_model(getattr(getattr(args[0], "model_config", None), "model", None))
        mode = kwargs.get("cudagraph_runtime_mode")
        label = f"vllm {getattr(mode, 'name', mode)}" if mode is not None else "vllm"
        return size, "decode", label
    return size_of


def graph_key_size(args: tuple, kwargs: dict) -> tuple[int, str, str] | None:
    key = arg(args, kwargs, 1, "cudagraph_key")
    size = size_value(getattr(key, "total_num_tokens", None))
    if size is None:
        return None
    full = getattr(key, "is_full_graph", None)
    return size, "decode", "vllm FULL" if full else "vllm PIECEWISE" if full is False else "vllm"


def install_runner(tracer: Tracer, module: Any, patches: Patches) -> None:
    runner = getattr(module, "GPUModelRunner", None)
    if runner is None or not callable(getattr(runner, "execute_model", None)):
        incomplete(tracer, "vLLM", "GPUModelRunner.execute_model")
        return
    patches.replace(runner, "execute_model",
                    lambda original: step_wrapper(tracer, original, vllm_batch(tracer), "vLLM"))
    if callable(getattr(runner, "_dummy_run", None)):
        patches.replace(runner, "_dummy_run",
                        lambda original: capture_wrapper(tracer, original, dummy_run_size(tracer), "vLLM"))
    if "vllm" not in tracer.recipes:
        tracer.recipes.append("vllm")


def install_graph_manager(tracer: Tracer, module: Any, patches: Patches) -> None:
    manager = getattr(module, "CudaGraphManager", None)
    if manager is None or not callable(getattr(manager, "capture_graph", None)):
        tracer.warn("recipe_incomplete", f"the vLLM recipe found no CudaGraphManager.capture_graph in "
                                         f"{module.__name__} (a layout it does not know): captures are sized "
                                         f"from the capturing frames", once=f"recipe_incomplete:{module.__name__}")
        return
    patches.replace(manager, "capture_graph",
                    lambda original: capture_wrapper(tracer, original, graph_key_size, "vLLM"))
    tracer.recipes.append("vllm cudagraph manager")


# module imported -> installer; the bootstrap registers these as post-import hooks
RECIPES = {
    "vllm.v1.worker.gpu_model_runner": install_runner,
    "vllm.v1.worker.gpu.model_runner": install_runner,          # the model runner V2
    "vllm.v1.worker.gpu.cudagraph.manager": install_graph_manager,
}
