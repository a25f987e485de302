"""SGLang: its step and its per-size captures, in every layout it has shipped.

Read in sgl-project/sglang's source (the search index's stored versions; commit of the file read):

| layout | step | a capture of one size |
| --- | --- | --- |
| until 2025: ``model_executor/cuda_graph_runner.py`` | ``ModelRunner.forward(forward_batch, ...)`` (``model_runner.py``) | ``CudaGraphRunner.capture_one_batch_size(bs, forward)`` (``cuda_graph_runner.py`` @21514ff) |
| 2026: the ``model_executor/runner/`` package | ``ModelRunner.forward(forward_batch, skip_attn_backend_init=None, pp_proxy_tensors=None, ...)``, which replays through ``decode_cuda_graph_runner.execute`` (``model_runner.py`` @0005834) | ``DecodeCudaGraphRunner.capture_one_shape(size, forward, stream_idx=None, variant_label=None)``, called from ``capture`` → ``_capture_one_stream`` (``runner/decode_cuda_graph_runner.py`` @003fca8); ``PrefillCudaGraphRunner.capture_one_shape(size, *, prefix_num_chunks=0)``, ``size`` in tokens (``runner/prefill_cuda_graph_runner.py`` @00021f7) |
| the ``runner/`` package's first form | as above | ``DecodeRunner.capture_one_shape(size, forward, stream_idx=None, variant_label=None)`` (``runner/decode_runner.py`` @5d6be97); ``PrefillRunner.capture_one_shape(size)``, ``size`` in tokens (``runner/prefill_runner.py`` @0bb09fc) |

In the 2026 layout a capture of one shape goes through the runner's pluggable backend
(``self.backend.capture_one(shape_key, run_once, ...)``: ``full`` one ``torch.cuda.CUDAGraph``,
``breakable`` segments, ``tc_piecewise`` the pieces of a compiled graph): the graphs captured
inside one ``capture_one_shape`` call are one capture event of that size, labelled with the
backend (``sglang full``, ``sglang breakable, 12 graphs``) and the call's variant where it has
one: the decode runner's ``variant_label`` ("lora" / "nolora") and ``stream_idx``, the prefill
runner's ``prefix_num_chunks``. Subclasses (speculative draft runners) call
``super().capture_one_shape``: the outermost call with graphs inside is the event.

SGLang 0.5.17's released wheel (the version run on the H200) has exactly the 2026 layout above:
``ModelRunner.forward(forward_batch, skip_attn_backend_init=None, pp_proxy_tensors=None,
reinit_attn_backend=False, split_forward_count=1)``, called for real batches only (start-up's
dummy runs call the model directly); the decode runner calls ``capture_one_shape(bs, forward,
stream_idx, variant_label)`` positionally. Its ``breakable`` backend (the prefill default on CUDA)
captures each segment as a ``torch.cuda.CUDAGraph``; with ``SGLANG_ENABLE_CUDA_GRAPH_DEDUP=1``
(off by default) segments replay through cuda-python's ``cudaGraphLaunch``, which the trace does
not see.

The step is ``ModelRunner.forward``, its batch ``forward_batch.batch_size``; a prefill or mixed
batch counts its tokens (SGLang keys its prefill graphs by tokens). Idle batches are not steps.
An eager prefill is ``prefill`` where the process has no prefill graphs; where it captured some
(the 2026 layout, ``breakable`` by default on CUDA), its reason is the one any eager step gets
(``batch_too_large`` above the largest number of tokens captured).
The scheduler's events are written before it sends out a finished request
(``managers/scheduler_components/output_streamer.py`` ``SchedulerOutputStreamer.stream_output``,
0.5.17): ``Engine.shutdown`` SIGKILLs the scheduler (``kill_process_tree``) as soon as the last
answer is in, and on the H200 the last 11 steps of 58 (22 with graphs off) died unwritten.
The capture phase's memory is measured as SGLang measures each pass (free device memory, cache
emptied, before minus after building a graph runner: its "mem usage=M GB"), not as the graphs'
reserved-memory growth, which on the H200 said 0.13 GiB where SGLang said 0.19 + 0.06 GB.
Graphs off: ``server_args.disable_cuda_graph`` (until 2025), or a decode backend ``disabled``
in ``server_args.cuda_graph_config`` (2026).
"""

from __future__ import annotations

from typing import Any

from replayscope.runner.trace import device
from replayscope.runner.trace.causes import Cause
from replayscope.runner.trace.hooks import Patches
from replayscope.runner.trace.recipes import (BatchOf, SizeOf, StepBatch, arg, capture_wrapper, incomplete,
                                              note_engine_version, size_value, step_wrapper)
from replayscope.runner.trace.tracer import Tracer


def _mode_is(mode: Any, name: str) -> bool:
    check = getattr(mode, name, None)
    return bool(check()) if callable(check) else False


def graphs_off(server_args: Any) -> str | None:
    """What says SGLang runs without decode CUDA graphs, or None."""
    if getattr(server_args, "disable_cuda_graph", False) is True:
        return "SGLang runs with --disable-cuda-graph"
    decode = getattr(getattr(server_args, "cuda_graph_config", None), "decode", None)
    backend = getattr(decode, "backend", None)
    if backend is not None and "disabled" in str(getattr(backend, "value", backend)).lower():
        return "SGLang's decode CUDA-graph backend is disabled (cuda_graph_config)"
    return None


BATCHES_KEPT = 4096      # a step's StepBatch (and its hint) made once per (stage, rows, tokens)


def sglang_batch(tracer: Tracer) -> BatchOf:
    known: dict[str, Any] = {}
    kept: dict[tuple, StepBatch] = {}

    def batch(args: tuple, kwargs: dict) -> StepBatch | None:
        runner, forward_batch = args[0], arg(args, kwargs, 1, "forward_batch")
        rows = size_value(getattr(forward_batch, "batch_size", None))
        mode = getattr(forward_batch, "forward_mode", None)
        if rows is None or _mode_is(mode, "is_idle"):
            return None
        if "off" not in known:
            server_args = getattr(runner, "server_args", None)
            known["off"] = graphs_off(server_args)
            tracer.set_model(getattr(server_args, "model_path", None))
        ids = getattr(forward_batch, "input_ids", None)
        tokens = size_value(ids.shape[0]) if getattr(ids, "shape", None) else None
        tokens = tokens or rows
        if _mode_is(mode, "is_decode"):
            stage = "decode"
        elif _mode_is(mode, "is_target_verify"):
            stage = "verify"
        else:
            stage = "mixed" if _mode_is(mode, "is_mixed") else "prefill"
        prefill_graphs = stage == "prefill" and bool(tracer.captured_by_stage.get("prefill"))
        key = (stage, rows, tokens, prefill_graphs)
        step_batch = kept.get(key)
        if step_batch is None:
            step_batch = _step_batch(stage, rows, tokens, known["off"], prefill_graphs)
            if len(kept) < BATCHES_KEPT:
                kept[key] = step_batch
        return step_batch
    return batch


def _step_batch(stage: str, rows: int, tokens: int, graphs_off_because: str | None,
                prefill_graphs: bool = False) -> StepBatch:
    if stage == "decode":
        hint = Cause("graphs_disabled", graphs_off_because) if graphs_off_because else None
        return StepBatch("decode", rows, tokens, hint)
    if stage == "verify":
        return StepBatch("verify", rows, tokens)
    if prefill_graphs:
        # this process captured prefill graphs (2026's PrefillCudaGraphRunner): a prefill that
        # replays none ran eager for another reason (above the largest size captured, ...)
        return StepBatch(stage, tokens, tokens)
    return StepBatch(stage, tokens, tokens, Cause("prefill", f"{stage} batch of {rows} requests, {tokens} tokens"))


def _backend_label(runner: Any) -> str:
    name = type(getattr(runner, "backend", None)).__name__
    for part, label in (("Breakable", "breakable"), ("Piecewise", "tc_piecewise"), ("Full", "full")):
        if part in name:
            return f"sglang {label}"
    return "sglang"


def _variant_of(args: tuple, kwargs: dict) -> str:
    """What else names the graph a ``capture_one_shape`` call captures (SGLang 0.5.17): the decode
    runner's ``variant_label`` ("lora" / "nolora" when it records a graph without LoRA too) and
    ``stream_idx``, passed positionally (``capture_one_shape(bs, forward, stream_idx,
    variant_label)``), and the prefill runner's ``prefix_num_chunks`` (chunked-prefix variants)."""
    parts = []
    label = arg(args, kwargs, 4, "variant_label")
    if isinstance(label, str) and label:
        parts.append(label)
    stream = arg(args, kwargs, 3, "stream_idx")
    if isinstance(stream, int) and not isinstance(stream, bool):
        parts.append(f"stream {stream}")
    chunks = kwargs.get("prefix_num_chunks")
    if isinstance(chunks, int) and chunks > 0:
        parts.append(f"prefix chunks {chunks}")
    return "".join(f", {part}" for part in parts)


def capture_size(tracer: Tracer, name: str, stage: str) -> SizeOf:
    """The size a runner's per-size capture is called with (``bs`` or ``size``, the first argument),
    labelled with the runner's backend and the call's variant."""
    def size_of(args: tuple, kwargs: dict) -> tuple[int, str, str] | None:
        size = size_value(arg(args, kwargs, 1, name))
        if size is None:
            return None
        runner = args[0]
        server_args = getattr(getattr(runner, "model_runner", None), "server_args", None)
        tracer.set_model(getattr(server_args, "model_path", None))
        return size, stage, _backend_label(runner) + _variant_of(args, kwargs)
    return size_of


def install_runner(tracer: Tracer, module: Any, patches: Patches) -> None:
    note_engine_version(tracer, "sglang")
    runner = getattr(module, "ModelRunner", None)
    if runner is None or not callable(getattr(runner, "forward", None)):
        incomplete(tracer, "SGLang", "ModelRunner.forward")
        return
    patches.replace(runner, "forward",
                    lambda original: step_wrapper(tracer, original, sglang_batch(tracer), "SGLang"))
    tracer.recipes.append("sglang")


def measured_pass(tracer: Tracer, original: Any, depth: list[int]) -> Any:
    """A graph runner's ``__init__`` (it captures every size) measured as SGLang 0.5.17 measures
    it (``cuda_graph_setup.py``: free device memory, cache emptied, before minus after building
    the runner; its "Capture ... end. ... mem usage=M GB"). A subclass's ``__init__`` calling its
    base's is one pass: the outermost call measures."""
    def init(self, *args, **kwargs):
        depth[0] += 1
        before = device.free_bytes_emptied() if depth[0] == 1 else None
        try:
            return original(self, *args, **kwargs)
        finally:
            depth[0] -= 1
            after = device.free_bytes_emptied() if before is not None else None
            if before is not None and after is not None:
                tracer.engine_capture_mem = (tracer.engine_capture_mem or 0) + before - after
    return init


def capture_installer(method: str, argument: str, stage: str, expected: str, measure: bool = False):
    """An installer for a module of graph runners: every class defined there with ``method``
    (``method(self, <argument>, ...)``) captures one size per call. None found: a warning
    naming what was expected (``expected``), and sizes come from the capturing frames."""
    depth = [0]

    def install(tracer: Tracer, module: Any, patches: Patches) -> None:
        found = False
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == module.__name__ \
                    and callable(value.__dict__.get(method)):
                patches.replace(value, method, lambda original: capture_wrapper(
                    tracer, original, capture_size(tracer, argument, stage), "SGLang"))
                if measure and "__init__" in value.__dict__:
                    patches.replace(value, "__init__", lambda original: measured_pass(tracer, original, depth))
                found = True
        if found:
            label = f"sglang {module.__name__.rsplit('.', 1)[-1]}"
            if label not in tracer.recipes:
                tracer.recipes.append(label)
        else:
            tracer.warn("recipe_incomplete", f"the SGLang recipe found no {expected} in {module.__name__} "
                                             f"(a layout it does not know): captures are sized from the "
                                             f"capturing frames", once=f"recipe_incomplete:{module.__name__}")
    return install


def _finishing(reqs: Any) -> tuple[bool, bool]:
    """(a request's answer is finished in this output, every request of it is finished). A request
    whose answer already went out (``finished_output``) is in the overlap scheduler's next batch
    too, "one additional delayed token" SGLang then skips: it finishes nothing."""
    try:
        if not any(req.finished() and not getattr(req, "finished_output", None) for req in reqs or ()):
            return False, False
        return True, all(req.finished() for req in reqs)
    except Exception:  # noqa: BLE001 (an unknown request shape: no early write)
        return False, False


def install_output_streamer(tracer: Tracer, module: Any, patches: Patches) -> None:
    """Write the scheduler's events before it sends out a finished request (SGLang 0.5.17:
    ``SchedulerOutputStreamer.stream_output(reqs, return_logprob, skip_req=None)``, its
    requests' ``finished()``). ``Engine.shutdown`` SIGKILLs the scheduler moments after the last
    answer arrives: without this its last steps (the emitter's flush interval) died with it. The
    program learns of a finished request only from what this call sends, so every step it ran
    before is written first. Where every request of the output finished, the write waits for the
    GPU timing of the forward still in flight (the overlap scheduler's one forward more of those
    requests): the program may stop the engine the moment that answer arrives. Where some run on,
    it writes only what is ready, keeping the overlap (the next write takes the rest). An output
    that finishes no answer (already-answered requests' delayed rows included) writes nothing."""
    streamer = getattr(module, "SchedulerOutputStreamer", None)
    if streamer is None or not callable(getattr(streamer, "stream_output", None)):
        return      # an older layout: its steps still end with the emitter's flush interval

    def wrap(original):
        def stream_output(self, reqs, *args, **kwargs):
            finishing, every = _finishing(reqs)
            if finishing:
                try:
                    tracer.flush_events(wait_for_gpu=every)
                except Exception as error:  # noqa: BLE001 (the engine's output goes out whatever happens)
                    tracer.hook_error("SGLang stream_output", error)
            return original(self, reqs, *args, **kwargs)
        return stream_output
    patches.replace(streamer, "stream_output", wrap)
    tracer.recipes.append("sglang output streamer")


SHUTDOWN_NOTE = ("SGLang's Engine.shutdown stops its scheduler with SIGKILL once the program is done with the "
                 "engine; the scheduler's steps were written before each answer left it")


def install_engine_shutdown(tracer: Tracer, module: Any, patches: Patches) -> None:
    """Tell ``replayscope trace`` that the engine's processes are being stopped by the engine
    itself (SGLang 0.5.17: ``Engine.shutdown()``, called by the program, by ``with Engine(...)``'s
    exit and at interpreter exit, SIGKILLs every child): their runs end ``finished`` with a note
    where the program is ending normally, instead of ``interrupted`` like a process killed from
    outside."""
    engine = getattr(module, "Engine", None)
    if engine is None or not callable(getattr(engine, "shutdown", None)):
        return

    def wrap(original):
        def shutdown(self, *args, **kwargs):
            try:
                tracer.stopping_children(SHUTDOWN_NOTE)
            except Exception as error:  # noqa: BLE001 (the engine shuts down whatever happens)
                tracer.hook_error("SGLang Engine.shutdown", error)
            return original(self, *args, **kwargs)
        return shutdown
    patches.replace(engine, "shutdown", wrap)
    tracer.recipes.append("sglang engine shutdown")


PACKAGE = "sglang.srt.model_executor"
# module imported -> installer; the bootstrap registers these as post-import hooks
RECIPES = {
    f"{PACKAGE}.model_runner": install_runner,
    f"{PACKAGE}.cuda_graph_runner": capture_installer("capture_one_batch_size", "bs", "decode",
                                                      "CudaGraphRunner.capture_one_batch_size"),
    f"{PACKAGE}.runner.decode_cuda_graph_runner": capture_installer(
        "capture_one_shape", "size", "decode", "DecodeCudaGraphRunner.capture_one_shape", measure=True),
    f"{PACKAGE}.runner.prefill_cuda_graph_runner": capture_installer(
        "capture_one_shape", "size", "prefill", "PrefillCudaGraphRunner.capture_one_shape", measure=True),
    f"{PACKAGE}.runner.decode_runner": capture_installer("capture_one_shape", "size", "decode",
                                                         "DecodeRunner.capture_one_shape"),
    f"{PACKAGE}.runner.prefill_runner": capture_installer("capture_one_shape", "size", "prefill",
                                                          "PrefillRunner.capture_one_shape"),
    "sglang.srt.managers.scheduler_components.output_streamer": install_output_streamer,
    "sglang.srt.entrypoints.engine": install_engine_shutdown,
}
