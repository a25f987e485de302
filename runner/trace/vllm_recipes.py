"""vLLM: its step, its per-size captures and its dispatcher's decisions, in the V1 runner and the
model runner V2.

Read in vllm-project/vllm's source (the search index's stored versions; commit of the file read),
and run on an H200 with vLLM 0.25.0 (docs/engines.md):

| layout | step | a capture of one size |
| --- | --- | --- |
| V1: ``v1/worker/gpu_model_runner.py`` | ``GPUModelRunner.execute_model(scheduler_output, intermediate_tensors=None)`` | ``GPUModelRunner._dummy_run(num_tokens, cudagraph_runtime_mode=None, ...)`` (@000fc94), called per size by ``capture_model`` |
| model runner V2: ``v1/worker/gpu/model_runner.py`` | ``GPUModelRunner.execute_model(scheduler_output, intermediate_tensors=None, dummy_run=False, skip_attn_for_dummy_run=False, is_profile=False)``; its dummy and profile runs are not steps (@0036d38, 0.25.0) | ``gpu/cudagraph_utils.py`` (0.25.0): ``CudaGraphManager.capture(create_forward_fn, ...)`` calls ``create_forward_fn(desc, warmup)`` once or twice per ``BatchExecutionDescriptor`` (PIECEWISE sizes first, then FULL); everything captured from one descriptor's first call to the next is that (mode, size)'s capture, its pieces counted in it. Older V2: ``gpu/cudagraph/manager.py`` ``CudaGraphManager.capture_graph(cudagraph_key, ...)`` (@1f8c5b6) |
| both: ``v1/worker/gpu_worker.py`` | ``Worker.compile_or_warm_up_model`` and ``determine_available_memory`` are start-up: the forwards they run (V2's ``warmup_kernels`` prefill and decode through ``execute_model``, the profile run) are not steps; ``load_model``, ``determine_available_memory``, ``initialize_from_config`` and ``compile_or_warm_up_model`` are timed as the phases ``load_weights``, ``profile``, ``kv_cache`` and ``warmup`` (with the device memory each took), and ``engine_init`` runs from the profile to the warm-up's end, as vLLM's "init engine (profile, create kv cache, warmup model)" | |

The step's batch is its scheduled tokens (vLLM keys its graphs by tokens, so padding is to the
captured token count); nothing scheduled, no step. In V2 the dispatcher's decision
(``CudaGraphManager.dispatch``) gives the step's stage and why it ran eager or PIECEWISE
(``replayscope.runner.trace.vllm_dispatch``). Graphs off: ``enforce_eager`` or ``cudagraph_mode`` ``NONE``.
The capture phase's memory is what vLLM itself logs as "took X GiB": the device's free memory
before the capture minus after (``cudaMemGetInfo``), which counts the graphs' own device memory
beside the allocator's pool.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from replayscope.runner.trace import device
from replayscope.runner.trace.causes import Cause
from replayscope.runner.trace.hooks import Patches
from replayscope.runner.trace.recipes import (BatchOf, SizeOf, StepBatch, arg, capture_wrapper, incomplete,
                                              note_engine_version, size_value, step_wrapper)
from replayscope.runner.trace.tracer import Tracer
from replayscope.runner.trace.vllm_dispatch import Graphs, explain


def graphs_off(runner: Any) -> bool:
    if getattr(getattr(runner, "model_config", None), "enforce_eager", False) is True:
        return True
    config = getattr(runner, "compilation_config", None) or getattr(
        getattr(runner, "vllm_config", None), "compilation_config", None)
    mode = getattr(config, "cudagraph_mode", None)
    return mode is not None and getattr(mode, "name", str(mode)) == "NONE"


BATCHES_KEPT = 4096      # a step's StepBatch (and its hint) made once per (stage, tokens, requests)


def vllm_batch(tracer: Tracer) -> BatchOf:
    known: dict[str, Any] = {}
    kept: dict[tuple, StepBatch] = {}

    def batch(args: tuple, kwargs: dict) -> StepBatch | None:
        if kwargs.get("dummy_run") or kwargs.get("is_profile") or tracer.engine_startup:
            return None                       # start-up: warm-up, profile and capture forwards
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
            stage = "decode"
        elif getattr(scheduled, "scheduled_spec_decode_tokens", None):
            stage = "verify"
        else:
            stage = "mixed"
        key = (stage, tokens, requests)
        step_batch = kept.get(key)
        if step_batch is None:
            step_batch = _step_batch(stage, tokens, requests, known["off"])
            if len(kept) < BATCHES_KEPT:
                kept[key] = step_batch
        return step_batch
    return batch


def _step_batch(stage: str, tokens: int, requests: int, graphs_are_off: bool) -> StepBatch:
    if stage == "decode":
        hint = Cause("graphs_disabled", "vLLM runs with enforce_eager or cudagraph_mode NONE") \
            if graphs_are_off else None
        return StepBatch("decode", tokens, tokens, hint)
    if stage == "verify":
        return StepBatch("verify", tokens, tokens)
    return StepBatch("mixed", tokens, tokens,
                     Cause("prefill", f"{requests} requests with {tokens} tokens: a batch with prompt tokens"))


def dummy_run_size(tracer: Tracer) -> SizeOf:
    def size_of(args: tuple, kwargs: dict) -> tuple[int, str, str] | None:
        size = size_value(arg(args, kwargs, 1, "num_tokens"))
        if size is None:
            return None
        tracer.set_model(getattr(getattr(args[0], "model_config", None), "model", None))
        mode = kwargs.get("cudagraph_runtime_mode")
        name = getattr(mode, "name", mode)
        label = f"vllm {name}" if mode is not None else "vllm"
        return size, "decode" if name == "FULL" and kwargs.get("uniform_decode") else "mixed", label
    return size_of


def graph_key_size(args: tuple, kwargs: dict) -> tuple[int, str, str] | None:
    key = arg(args, kwargs, 1, "cudagraph_key")
    size = size_value(getattr(key, "total_num_tokens", None))
    if size is None:
        return None
    full = getattr(key, "is_full_graph", None)
    stage = "decode" if full and getattr(key, "is_uniform", False) else "mixed"
    return size, stage, "vllm FULL" if full else "vllm PIECEWISE" if full is False else "vllm"


def descriptor_capture(desc: Any) -> tuple[int, str, str] | None:
    """(size, stage, label) of a V2 ``BatchExecutionDescriptor``: FULL graphs of uniform decode
    batches are ``decode``; PIECEWISE (and FULL under mode FULL) graphs serve any batch: ``mixed``."""
    size = size_value(getattr(desc, "num_tokens", None))
    if size is None:
        return None
    mode = getattr(getattr(desc, "cg_mode", None), "name", None)
    stage = "decode" if mode == "FULL" and getattr(desc, "uniform_token_count", None) is not None else "mixed"
    return size, stage, f"vllm {mode}" if mode else "vllm"


def install_runner(tracer: Tracer, module: Any, patches: Patches) -> None:
    note_engine_version(tracer, "vllm")
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


# Worker method -> the start-up phase it is, named as the log importer names vLLM's own lines
# ("Model loading took", "Memory profiling takes", "Available KV cache memory", "init engine
# (profile, create kv cache, warmup model) took"): the engine's init runs from the profile to the
# end of the warm-up, as vLLM's EngineCore times it.
WORKER_PHASES = {"load_model": "load_weights", "determine_available_memory": "profile",
                 "initialize_from_config": "kv_cache", "compile_or_warm_up_model": "warmup"}
ENGINE_INIT_FROM, ENGINE_INIT_TO = "determine_available_memory", "compile_or_warm_up_model"


def phase_wrapper(tracer: Tracer, original: Callable, method: str) -> Callable:
    """A worker's start-up method timed as its phase (with the device memory it took), the
    forwards it runs kept out of the steps; the engine's init phase closed after the warm-up."""
    name = WORKER_PHASES[method]

    def phase(*args, **kwargs):
        started, free_before = time.time(), device.free_bytes()
        if method == ENGINE_INIT_FROM and tracer.engine_init_started is None:
            tracer.engine_init_started = started
        tracer.engine_startup += 1
        try:
            return original(*args, **kwargs)
        finally:
            tracer.engine_startup -= 1
            ended, free_after = time.time(), device.free_bytes()
            took = free_before - free_after if free_before is not None and free_after is not None else None
            try:
                tracer.engine_phase(name, started, ended - started, took)
                if method == ENGINE_INIT_TO and tracer.engine_init_started is not None:
                    tracer.engine_phase("engine_init", tracer.engine_init_started,
                                        ended - tracer.engine_init_started, None)
                    tracer.engine_init_started = None
            except Exception as error:  # noqa: BLE001
                tracer.hook_error("vllm start-up phase", error)
    phase.__wrapped__ = original
    return phase


def install_worker(tracer: Tracer, module: Any, patches: Patches) -> None:
    note_engine_version(tracer, "vllm")
    worker = getattr(module, "Worker", None)
    found = [name for name in WORKER_PHASES if callable(getattr(worker, name, None))]
    if "compile_or_warm_up_model" not in found:
        tracer.warn("recipe_incomplete", f"the vLLM recipe found no Worker.compile_or_warm_up_model in "
                                         f"{module.__name__}: the engine's warm-up forwards may be counted as steps",
                    once=f"recipe_incomplete:{module.__name__}")
    for name in found:
        patches.replace(worker, name, lambda original, name=name: phase_wrapper(tracer, original, name))


def per_descriptor_capture(tracer: Tracer, original: Callable) -> Callable:
    """V2's ``CudaGraphManager.capture(create_forward_fn, ...)``: one capture per descriptor (its
    pieces counted in it), and the device memory the whole capture took, measured as vLLM does."""
    def capture(self, *args, **kwargs):
        create = args[0] if args else kwargs.get("create_forward_fn")
        if not callable(create):
            return original(self, *args, **kwargs)
        current: list = [None, None]          # the descriptor being captured, its capture context

        def close(error: BaseException | None = None) -> None:
            context, current[0], current[1] = current[1], None, None
            if context is not None:
                context.__exit__(type(error) if error else None, error, None)

        def create_forward_fn(desc, *more, **named):
            if current[0] is None or desc != current[0]:
                close()
                spec = None
                try:
                    spec = descriptor_capture(desc)
                except Exception as error:  # noqa: BLE001
                    tracer.hook_error("vllm capture", error)
                if spec is not None:
                    current[0], current[1] = desc, tracer.capture_context(*spec).__enter__()
            return create(desc, *more, **named)
        free_before = device.free_bytes()
        rest = args[1:] if args else ()
        if args:
            call = lambda: original(self, create_forward_fn, *rest, **kwargs)          # noqa: E731
        else:
            call = lambda: original(self, **{**kwargs, "create_forward_fn": create_forward_fn})  # noqa: E731
        try:
            result = call()
        except BaseException as error:
            close(error)
            raise
        close()
        free_after = device.free_bytes()
        if free_before is not None and free_after is not None:
            tracer.engine_capture_mem = (tracer.engine_capture_mem or 0) + free_before - free_after
        return result
    capture.__wrapped__ = original
    return capture


def _graphs(manager: Any) -> Graphs:
    mode = getattr(getattr(manager, "cudagraph_mode", None), "name", None) or "NONE"
    decode, mixed = [], []
    for descs in (getattr(manager, "_capture_descs", None) or {}).values():
        for desc in descs:
            loras = getattr(desc, "num_active_loras", 0) or 0
            if getattr(desc, "uniform_token_count", None) is not None:
                decode.append((desc.num_tokens, desc.uniform_token_count, loras))
            else:
                mixed.append((desc.num_tokens, loras))
    return Graphs(mode, bool(getattr(manager, "_graphs_captured", False)),
                  int(getattr(manager, "decode_query_len", 1) or 1), tuple(decode), tuple(mixed))


def dispatch_wrapper(tracer: Tracer, original: Callable) -> Callable:
    """V2's ``CudaGraphManager.dispatch``: the step's stage, and why it ran eager or PIECEWISE."""
    graphs: dict[tuple[int, bool], Graphs] = {}
    decided: dict[tuple, Any] = {}

    def dispatch(self, num_reqs, num_tokens, uniform_token_count, num_active_loras=0, *args, **kwargs):
        desc = original(self, num_reqs, num_tokens, uniform_token_count, num_active_loras, *args, **kwargs)
        if not tracer.in_step:
            return desc
        try:
            chosen = getattr(getattr(desc, "cg_mode", None), "name", None) or "NONE"
            captured = bool(getattr(self, "_graphs_captured", False))
            key = (id(self), captured, num_reqs, num_tokens, uniform_token_count,
                   getattr(desc, "num_active_loras", num_active_loras), chosen)
            decision = decided.get(key)
            if decision is None:
                known = graphs.get((id(self), captured))
                if known is None:
                    known = graphs[(id(self), captured)] = _graphs(self)
                decision = decided[key] = explain(known, num_reqs, num_tokens, uniform_token_count, key[5], chosen)
            tracer.step_stage = decision.stage
            if decision.hint is not None:
                tracer.step_hint = decision.hint
            tracer.step_note = decision.note
        except Exception as error:  # noqa: BLE001
            tracer.hook_error("vllm dispatch", error)
        return desc
    dispatch.__wrapped__ = original
    return dispatch


def install_graph_utils(tracer: Tracer, module: Any, patches: Patches) -> None:
    manager = getattr(module, "CudaGraphManager", None)
    if manager is None or not callable(getattr(manager, "capture", None)):
        tracer.warn("recipe_incomplete", f"the vLLM recipe found no CudaGraphManager.capture in {module.__name__} "
                                         f"(a layout it does not know): captures are sized from the capturing frames",
                    once=f"recipe_incomplete:{module.__name__}")
        return
    patches.replace(manager, "capture", lambda original: per_descriptor_capture(tracer, original))
    if callable(getattr(manager, "dispatch", None)):
        patches.replace(manager, "dispatch", lambda original: dispatch_wrapper(tracer, original))
    tracer.recipes.append("vllm cudagraph dispatcher")


# module imported -> installer; the bootstrap registers these as post-import hooks
RECIPES = {
    "vllm.v1.worker.gpu_model_runner": install_runner,
    "vllm.v1.worker.gpu.model_runner": install_runner,          # the model runner V2
    "vllm.v1.worker.gpu.cudagraph.manager": install_graph_manager,
    "vllm.v1.worker.gpu.cudagraph_utils": install_graph_utils,  # the model runner V2 in vLLM 0.25
    "vllm.v1.worker.gpu_worker": install_worker,
}
