"""torch.compile(mode="reduce-overhead") traced with nothing to configure: each call of a
CUDA-graph-tree function is a step (graph when it replayed, graph_warmup while it warms up and
records, Inductor's reason when it runs eager), and each recording is a ``recording`` event with
its cause and PyTorch's count against its re-record limit. Driven through PyTorch's own
``CUDAGraphTreeManager.run`` decisions on a CPU (``graph_trees_stand_in``)."""

import dataclasses
import os

import pytest
import torch
from torch._inductor import cudagraph_trees, cudagraph_utils

from replayscope.runner.trace.graph_trees import install_graph_tree_hooks
from replayscope.runner.trace.hooks import install_inductor_skip_hook
from replayscope.runner.trace.tree_state import GraphTrees
from replayscope.runner.trace.step_core import cores
from tests.trace.conftest import Traced, capture, kinds
from tests.trace.graph_trees_stand_in import Status, StandInManager, module


@pytest.fixture(params=cores())
def traced(request, monkeypatch):
    """Each test with each step core this process has: the compiled graph-tree call (TreeRun) and
    its Python reference make the same events."""
    t = Traced(monkeypatch, request.param)
    yield t
    t.patches.remove()


@pytest.fixture()
def manager(traced):
    assert install_graph_tree_hooks(traced.tracer, module(), traced.patches)
    assert install_inductor_skip_hook(traced.tracer, cudagraph_utils, traced.patches)
    return StandInManager()


def x(bs):
    return torch.zeros(bs, 8)


def modes(steps):
    return [(s["raw_bs"], s["mode"], s["reason"]) for s in steps]


def test_the_hooks_find_their_entry_points_in_the_installed_pytorch(traced):
    traced.tracer.settings = dataclasses.replace(traced.tracer.settings, parent_pid=os.getppid())
    assert install_graph_tree_hooks(traced.tracer, cudagraph_trees, traced.patches)
    events = traced.finish()             # the process trace started: its warnings would make a run
    assert kinds(events, "warning") == []


def test_without_step_each_call_is_a_step_warm_up_and_recording_eager_then_graph(traced, manager):
    forward = manager.add(static_input_idxs=(0,), frame_id=0)
    weight = torch.zeros(8, 8)
    results = [manager.call(forward, weight, x(4)) for _ in range(4)]
    assert results == [["eager"], ["recorded"], ["replayed"], ["replayed"]]
    events = traced.finish()
    assert modes(kinds(events, "step")) == [(4, "eager", "graph_warmup"), (4, "eager", "graph_warmup"),
                                            (4, "graph", None), (4, "graph", None)]
    [capture] = kinds(events, "capture")                 # the manager's start-up capture is not one
    assert capture["graph_bs"] == 4 and capture["variant"].startswith("inductor, pool")
    [recording] = kinds(events, "recording")
    assert (recording["cause"], recording["recordings"], recording["graph_bs"]) == ("first", 1, 4)
    assert recording["function"] == "compiled function (frame 0)"
    assert recording["rerecords"] == 0 and recording["rerecord_limit"] == (128 if ENFORCES_LIMIT else None)
    assert "auto_steps" in traced.sinks[0].run["config"]["trace"]


def test_the_batch_of_a_dynamic_shape_call_is_its_symbolic_size(traced, manager):
    forward = manager.add(static_input_idxs=(0,))
    for bs in (2, 2, 2, 6):
        manager.call(forward, torch.zeros(8, 8), bs, x(bs))       # Inductor passes the size s0 first
    assert [s["raw_bs"] for s in kinds(traced.finish(), "step")] == [2, 2, 2, 6]


def test_a_compiled_function_called_inside_a_named_step_counts_once(traced, manager):
    forward = manager.add()
    for _ in range(3):
        traced.tracer.step_begin("decode", 4, 4)
        manager.call(forward, x(4))
        manager.call(forward, x(4))
        traced.tracer.step_end()
    steps = kinds(traced.finish(), "step")
    assert len(steps) == 3
    assert modes(steps)[-1] == (4, "graph", None)


def test_with_step_named_calls_outside_it_are_not_steps(traced):
    traced.tracer.settings = dataclasses.replace(traced.tracer.settings, step="prog:decode_step")
    install_graph_tree_hooks(traced.tracer, module(), traced.patches)
    manager = StandInManager()
    forward = manager.add()
    for _ in range(3):
        manager.call(forward, x(2))
    capture(4)
    events = traced.finish()
    assert kinds(events, "step") == []
    assert traced.sinks[0].run["config"]["trace"]["auto_steps"] is None


def test_a_static_input_at_another_address_is_a_re_record_with_that_cause(traced, manager):
    forward = manager.add(static_input_idxs=(0,), frame_id=3)
    for _ in range(3):
        manager.call(forward, torch.zeros(8, 8), x(4))
    manager.check_status[forward] = Status.StaticInputIdxMismatch       # the weight moved
    assert manager.call(forward, torch.zeros(8, 8), x(4)) == ["recorded"]
    events = traced.finish()
    first, again = kinds(events, "recording")
    assert (again["cause"], again["recordings"]) == ("static_input_moved", 2)
    assert again["evidence"].endswith("is at another address (PyTorch: static input data pointer changed)")
    assert modes(kinds(events, "step"))[-1] == (4, "eager", "graph_warmup")
    variants = [c["variant"] for c in kinds(events, "capture")]
    assert variants[0].startswith("inductor,") and variants[1].startswith("inductor re-record")


ENFORCES_LIMIT = GraphTrees().enforced_limit(StandInManager.__new__(StandInManager)) is not None


@pytest.mark.skipif(not ENFORCES_LIMIT, reason="this PyTorch applies no re-record limit (2.6-2.11 with "
                                               "inline_inbuilt_nn_modules on; 2.4 has none)")
def test_past_the_re_record_limit_the_function_runs_eager_for_good_with_a_warning(traced, manager):
    forward = manager.add(frame_id=0)
    with torch._inductor.config.patch({"triton.cudagraph_unexpected_rerecord_limit": 2}):
        manager.call(forward, x(4))
        manager.call(forward, x(4))                            # recorded
        manager.check_status[forward] = Status.CudagraphManagedIdxMismatch
        results = [manager.call(forward, x(4)) for _ in range(4)]
    assert results == [["recorded"], ["recorded"], ["eager"], ["eager"]]
    events = traced.finish()
    recordings = kinds(events, "recording")
    assert [(r["cause"], r["recordings"], r["rerecords"], r["rerecord_limit"]) for r in recordings] == [
        ("first", 1, 0, 2), ("managed_input_moved", 2, 1, 2), ("managed_input_moved", 3, 2, 2)]
    [warning] = [w for w in kinds(events, "warning") if w["code"] == "rerecord_limit"]
    assert warning["message"] == (
        "Inductor re-recorded compiled function (frame 0) past PyTorch's re-record limit of 2 "
        "(torch._inductor.config.triton.cudagraph_unexpected_rerecord_limit) after 3 recordings (the last: "
        "managed input moved): it runs without CUDA graphs from now on")
    assert modes(kinds(events, "step"))[-2:] == [(4, "eager", "rerecord_limit")] * 2


def test_a_new_shape_is_a_recording_of_its_own(traced, manager):
    small, large = manager.add(frame_id=1), manager.add(frame_id=1)     # one frame, recompiled per shape
    for _ in range(2):
        manager.call(small, x(2))
    for _ in range(2):
        manager.call(large, x(8))
    recordings = kinds(traced.finish(), "recording")
    assert [(r["cause"], r["recordings"], r["graph_bs"]) for r in recordings] == [("first", 1, 2), ("new_shape", 2, 8)]
    assert "(8, 8)" in recordings[1]["evidence"] and "(2, 8)" in recordings[1]["evidence"]


def test_a_function_that_mutates_an_input_runs_eager_with_inductors_words(traced, manager):
    placeholder = cudagraph_utils.PlaceholderInfo(name="cache", stack_trace=None, users=[],
                                                  mutating_use_stack_trace="  File \"model.py\", line 9\n")
    forward = manager.add(mutated_input_idxs=(0,), placeholders=(placeholder,))
    assert [manager.call(forward, x(2)) for _ in range(3)] == [["eager"]] * 3
    events = traced.finish()
    assert modes(kinds(events, "step")) == [(2, "eager", "mutated_inputs")] * 3
    assert kinds(events, "recording") == []


def test_a_call_that_raises_is_no_step_and_the_next_call_is_one_again(traced, manager, monkeypatch):
    forward = manager.add(static_input_idxs=(0,))
    weight = torch.zeros(8, 8)
    for _ in range(3):                                  # warm-up, recording, replay
        manager.call(forward, weight, x(4))

    def broken(self, new_inputs, function_id):
        raise RuntimeError("the compiled function failed")
    with monkeypatch.context() as patched:
        patched.setattr(StandInManager, "_run", broken)
        with pytest.raises(RuntimeError, match="the compiled function failed"):
            manager.call(forward, weight, x(4))
    assert traced.tracer.inductor_calls == [] and not traced.tracer.in_step
    assert manager.call(forward, weight, x(4)) == ["replayed"]
    assert modes(kinds(traced.finish(), "step"))[3:] == [(4, "graph", None)]


@pytest.mark.skipif("compiled" not in cores(), reason="the compiled step core is not built here")
def test_the_compiled_call_reads_a_known_batch_position_itself(monkeypatch):
    traced = Traced(monkeypatch, "compiled")
    assert install_graph_tree_hooks(traced.tracer, module(), traced.patches)
    manager = StandInManager()
    assert type(vars(StandInManager)["run"]).__name__ == "TreeRun"
    forward = manager.add(static_input_idxs=(0,))
    weight = torch.zeros(8, 8)
    for _ in range(2):                                  # the first call finds the batch's position
        manager.call(forward, weight, x(4))
    asked = []
    monkeypatch.setattr(traced.tracer.graph_trees, "batch", lambda *args: asked.append(args))
    for bs in (4, 4, 2):
        manager.call(forward, weight, x(bs))
    assert asked == []                                  # read in C, as the Python would read it
    steps = kinds(traced.finish(), "step")
    assert [s["raw_bs"] for s in steps] == [4, 4, 4, 4, 2]
    assert [s["mode"] for s in steps[2:4]] == ["graph", "graph"]


@pytest.mark.skipif("compiled" not in cores(), reason="the compiled step core is not built here")
def test_the_compiled_call_holds_no_reference_and_no_memory_it_should_not(monkeypatch):
    import gc
    import sys

    from tests.compiled_checks import memory_growth

    traced = Traced(monkeypatch, "compiled")
    assert install_graph_tree_hooks(traced.tracer, module(), traced.patches)
    manager = StandInManager()
    forward = manager.add(static_input_idxs=(0,))
    weight, inputs = torch.zeros(8, 8), [x(4), x(2)]
    tracer = traced.tracer

    def calls(n):
        for i in range(n):
            manager.call(forward, weight, inputs[i % 2])
            tracer.emitter._queue.clear()
    calls(300)                                          # warm-up, recordings, replays of both shapes
    tracer._starter.join()
    tracer.emitter._stop.set()                          # no other thread holds anything while counting
    tracer.emitter._thread.join()
    held = (manager, weight, *inputs, forward, tracer, tracer.inductor_calls, tracer.graph_trees, tracer._modes)

    def refs():
        gc.collect()
        return [sys.getrefcount(obj) for obj in held]
    before = refs()
    growth = memory_growth(calls, count=5_000)
    assert refs() == before and growth < 4096
    assert tracer.inductor_calls == [] and tracer.steps == 10_300
    traced.finish()


def test_a_tracer_failing_to_start_the_step_warns_and_the_call_runs_as_a_non_step(traced, manager):
    forward = manager.add(static_input_idxs=(0,))
    weight = torch.zeros(8, 8)
    manager.call(forward, weight, x(4))                 # the batch's position found, the run open
    del traced.tracer.closed                            # the tracer's own state broken: step_begin raises
    assert manager.call(forward, weight, x(4)) == ["recorded"]
    traced.tracer.closed = False
    events = traced.finish()
    assert len(kinds(events, "step")) == 1
    assert any(w["code"] == "hook_failed" and "Inductor step" in w["message"] for w in kinds(events, "warning"))
