"""Inductor's CUDA-graph trees (``torch.compile(mode="reduce-overhead")``): each call of a
compiled function, its steps without ``--step``, and its recordings with their causes.

The entry points, in ``torch._inductor.cudagraph_trees`` (read in PyTorch 2.4, 2.6, 2.8,
2.11 and 2.13; every name is looked up, a missing one is a ``hook_missing`` warning):

- ``CUDAGraphTreeManager.__init__``: its start-up capture (an empty graph that holds the pool)
  is not a graph of the program;
- ``CUDAGraphTreeManager.run(new_inputs, function_id)``: one call of a compiled function. It
  replayed (a graph replay happened during it), warmed up or recorded (``graph_warmup``), or
  ran eager with the reason Inductor logged for it. With no ``--step``, a call outside any
  recipe's step is a step of its own, its batch the first dynamic dimension of its inputs;
- ``CUDAGraphTreeManager.record_function(new_inputs, function_id)``: a recording, a
  ``recording`` event with its cause and PyTorch's count against its re-record limit
  (``num_rerecord``, ``exceed_rerecord_limit``; 2.4 has neither, 2.6-2.11 apply no limit while
  ``torch._dynamo.config.inline_inbuilt_nn_modules`` is on, its default);
- ``CUDAGraphNode.check_invariants(inputs)``: Inductor's check before a replay; the status it
  returns when it fails (``CheckInvariantStatus``, 2.6+; a bool in 2.4) is the cause of the
  re-record that follows.
"""

from __future__ import annotations

from typing import Any, Callable

from replayscope.runner.trace.hooks import Patches, _missing, _safely
from replayscope.runner.trace.step_core import compiled_for
from replayscope.runner.trace.tracer import Tracer
from replayscope.runner.trace.tree_state import cause_of, input_shapes, rerecords

def install_graph_tree_hooks(tracer: Tracer, trees_module: Any, patches: Patches) -> bool:
    manager = getattr(trees_module, "CUDAGraphTreeManager", None)
    if manager is None or not all(callable(getattr(manager, n, None)) for n in ("__init__", "run")):
        _missing(tracer, "torch._inductor.cudagraph_trees.CUDAGraphTreeManager (run)",
                 "calls of torch.compile(mode=\"reduce-overhead\") functions are not traced: no steps "
                 "without --step, and their steps read graph or unknown only")
        return False
    auto_steps = tracer.settings.step is None

    def make_init(original: Callable) -> Callable:
        def __init__(self, *args, **kwargs):
            tracer.ignore_captures += 1     # the manager captures an empty graph to hold its pool
            try:
                return original(self, *args, **kwargs)
            finally:
                tracer.ignore_captures -= 1
        return __init__

    def make_run(original: Callable) -> Callable:
        def run(self, new_inputs, function_id, *args, **kwargs):
            trees = tracer.graph_trees
            step = False
            if auto_steps and not tracer.in_step:
                try:
                    bs = trees.batch(self, function_id, new_inputs)
                    step = tracer.step_begin("decode", bs, bs)
                except Exception as error:  # noqa: BLE001
                    tracer.hook_error("Inductor step", error)
            replays, recordings = tracer.total_replays, tracer.inductor_recordings
            tracer.inductor_calls.append(function_id)
            trees.mismatch = None
            try:
                result = original(self, new_inputs, function_id, *args, **kwargs)
            except BaseException:
                tracer.inductor_calls.pop()
                if step:
                    tracer.step_abort()
                raise
            try:                    # _safely's work without its call: this runs once per compiled call
                tracer.inductor_call_end(function_id, replays, recordings)
            except Exception as error:  # noqa: BLE001
                tracer.hook_error("Inductor call", error)
            if step:
                tracer.step_end()
            return result
        core = compiled_for(tracer)
        if core is not None:        # the same call's common case in C; anything else is this run
            return core.TreeRun(tracer, original, run, auto_steps)
        return run

    def make_record(original: Callable) -> Callable:
        def record_function(self, new_inputs, function_id, *args, **kwargs):
            previous = tracer.inductor_record_begin(function_id)
            shapes = input_shapes(new_inputs)
            try:
                return original(self, new_inputs, function_id, *args, **kwargs)
            finally:
                tracer.inductor_record_end(previous)
                _safely(tracer, "Inductor recording", recorded, self, function_id, shapes)
        return record_function

    def recorded(manager: Any, function_id: Any, shapes: tuple) -> None:
        trees = tracer.graph_trees
        function = trees.function_of(manager, function_id)
        cause, evidence = cause_of(trees, function, function_id, shapes)
        function.recordings += 1
        function.ids.add(function_id)
        function.shapes.add(shapes)
        function.last_cause = cause
        trees.by_id[function_id] = function
        tracer.recording(function.name, cause, evidence, function.recordings, rerecords(manager, function_id),
                         trees.enforced_limit(manager))

    patches.replace(manager, "__init__", make_init)
    patches.replace(manager, "run", make_run)
    if callable(getattr(manager, "record_function", None)):
        patches.replace(manager, "record_function", make_record)
    else:
        _missing(tracer, "torch._inductor.cudagraph_trees.CUDAGraphTreeManager.record_function",
                 "Inductor's recordings and re-records are not recorded")
    _install_check_hook(tracer, trees_module, patches)
    tracer.hooks.append("inductor graph trees")
    return True


def _install_check_hook(tracer: Tracer, trees_module: Any, patches: Patches) -> None:
    node = getattr(trees_module, "CUDAGraphNode", None)
    if node is None or not callable(getattr(node, "check_invariants", None)):
        _missing(tracer, "torch._inductor.cudagraph_trees.CUDAGraphNode.check_invariants",
                 "re-records are recorded without their cause (unknown)")
        return
    status_enum = getattr(trees_module, "CheckInvariantStatus", None)
    success = getattr(status_enum, "SUCCESS", True)

    def make(original: Callable) -> Callable:
        # On every replay of a recorded graph: one comparison when the check passes.
        def check_invariants(self, inputs, *args, **kwargs):
            result = original(self, inputs, *args, **kwargs)
            status = result[0] if type(result) is tuple else result
            if status is not success and status is not True:
                tracer.graph_trees.mismatch = status
            return result
        return check_invariants

    patches.replace(node, "check_invariants", make)


# module imported -> installer; the bootstrap registers these as post-import hooks
GRAPH_TREE_HOOKS = {"torch._inductor.cudagraph_trees": install_graph_tree_hooks}
