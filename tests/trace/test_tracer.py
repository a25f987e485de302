"""The tracer against a fake CUDA graph (torch.cuda.CUDAGraph monkeypatched): captures, replays
aggregated into steps, the causes of eager steps, the startup phase, and what it warns about.
Every event it writes passes the wire contract (``Traced.finish`` validates them)."""

import dataclasses
import os
import time
import types

import pytest
import torch

from replayscope.runner.trace.causes import Cause
from replayscope.runner.trace.graph_trees import install_graph_tree_hooks
from replayscope.runner.trace.hooks import Patches, install_cuda_graph_hooks
from replayscope.runner.timing import CUDA_TIME_EVERY
from tests.trace.conftest import FakeCUDAGraph, capture, kinds

MUTATED = "skipping cudagraphs due to mutated inputs (6 instances). Found from : \n File \"model.py\", line 3"


def step(tracer, bs, *, replay=(), stage="decode", hint=None):
    assert tracer.step_begin(stage, bs, bs, hint)
    for graph in replay:
        graph.replay()
    tracer.step_end()


def test_a_capture_is_recorded_with_the_batch_size_the_program_was_capturing(traced):
    capture(8)
    events = traced.finish()
    [event] = kinds(events, "capture")
    assert event["graph_bs"] == 8 and event["status"] == "ok" and event["stage"] == "decode"
    assert event["duration_s"] >= 0 and event["error"] is None
    assert event["variant"].startswith("cudagraph, pool ")


def test_graphs_sharing_a_pool_are_numbered_as_one_pool(traced):
    first = capture(16)
    capture(8, pool=first.pool())
    capture(4)
    variants = [e["variant"] for e in kinds(traced.finish(), "capture")]
    assert variants[0] == variants[1] != variants[2]


def test_a_step_that_replays_its_own_size_is_graph(traced):
    graph = capture(8)
    step(traced.tracer, 8, replay=[graph])
    [event] = kinds(traced.finish(), "step")
    assert (event["mode"], event["raw_bs"], event["graph_bs"], event["reason"]) == ("graph", 8, 8, None)
    assert event["padded_tokens"] == 0


def test_a_step_that_replays_a_larger_graph_is_padded_with_its_pad_rows_counted(traced):
    graph = capture(8)
    step(traced.tracer, 5, replay=[graph])
    [event] = kinds(traced.finish(), "step")
    assert (event["mode"], event["raw_bs"], event["graph_bs"]) == ("padded", 5, 8)
    assert event["num_tokens"] == 5 and event["padded_tokens"] == 3


def test_replays_are_aggregated_into_one_step_not_one_event_each(traced):
    pieces = [capture(8) for _ in range(30)]         # a piecewise model: many graphs per step
    step(traced.tracer, 8, replay=pieces)
    step(traced.tracer, 8, replay=pieces)
    events = traced.finish()
    assert [e["mode"] for e in kinds(events, "step")] == ["graph", "graph"]
    assert all(g.replays == 2 for g in pieces)


def test_a_replay_outside_any_step_is_no_step_and_is_warned_about_at_the_end(traced):
    graph = capture(4)
    for _ in range(3):
        graph.replay()
    events = traced.finish()
    assert kinds(events, "step") == []
    [warning] = kinds(events, "warning")
    assert warning["code"] == "no_step_function" and "3 graph replays" in warning["message"]
    assert "--step" in warning["message"]


def test_a_batch_above_the_largest_graph_is_eager_batch_too_large(traced):
    for bs in (8, 4, 2, 1):
        capture(bs)
    step(traced.tracer, 12)
    [event] = kinds(traced.finish(), "step")
    assert (event["mode"], event["reason"]) == ("eager", "batch_too_large")
    assert event["evidence"] == "batch of 12; largest captured graph holds 8"


def test_an_eager_step_with_no_known_cause_is_unknown_with_what_was_seen(traced):
    capture(8)
    capture(4)
    step(traced.tracer, 3)
    [event] = kinds(traced.finish(), "step")
    assert (event["mode"], event["reason"]) == ("eager", "unknown")
    assert "no graph replayed in the step" in event["evidence"] and "4, 8" in event["evidence"]


def test_on_a_host_without_cuda_an_eager_step_is_cpu_device(traced):
    step(traced.tracer, 2)
    [event] = kinds(traced.finish(), "step")
    assert (event["reason"], event["evidence"]) == ("cpu_device", "CUDA is not available in this process "
                                                                  "(torch.cuda.is_available() is False)")


def test_the_engine_hint_is_the_cause_of_an_eager_step(traced):
    capture(8)
    step(traced.tracer, 8, stage="prefill", hint=Cause("prefill", "64 new tokens per sequence"))
    [event] = kinds(traced.finish(), "step")
    assert (event["stage"], event["reason"], event["evidence"]) == ("prefill", "prefill", "64 new tokens per sequence")


def test_a_failed_capture_is_recorded_with_its_error_and_the_program_sees_the_error(traced):
    graph = FakeCUDAGraph(fail_at_end=RuntimeError("operation failed due to a previous error during capture"))
    with pytest.raises(RuntimeError, match="previous error during capture"):
        capture(16, graph=graph)
    [event] = kinds(traced.finish(), "capture")
    assert (event["graph_bs"], event["status"]) == (16, "failed")
    assert event["error"] == "RuntimeError: operation failed due to a previous error during capture"


def test_an_error_raised_inside_the_captured_code_fails_that_capture(traced):
    def capture_that_syncs(bs):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            raise RuntimeError("operation not permitted when stream is capturing")

    with pytest.raises(RuntimeError):
        capture_that_syncs(4)
    [event] = kinds(traced.finish(), "capture")
    assert event["status"] == "failed" and "not permitted when stream is capturing" in event["error"]


def test_a_failed_size_is_not_a_captured_size(traced):
    capture(8)
    with pytest.raises(RuntimeError):
        capture(16, graph=FakeCUDAGraph(fail_at_end=RuntimeError("out of memory")))
    step(traced.tracer, 12)
    steps = kinds(traced.finish(), "step")
    assert steps[0]["reason"] == "batch_too_large"


def test_the_capture_phase_spans_first_to_last_capture_once_steps_run_without_capturing(traced):
    for bs in (8, 4):
        capture(bs)
    graph = capture(2)
    step(traced.tracer, 2, replay=[graph])
    step(traced.tracer, 2, replay=[graph])
    events = traced.finish()
    [phase] = kinds(events, "phase")
    assert phase["phase"] == "capture" and phase["duration_s"] >= 0
    captures = kinds(events, "capture")
    assert phase["start_ts"] <= captures[0]["ts"] and phase["seq"] > captures[-1]["seq"]


def test_the_capture_phase_holds_each_capture_as_its_event_times_it_warm_up_included(traced):
    """An engine's capture of one size (a recipe's capture context) runs its warm-up before the
    CUDA graph: SGLang 0.5.17's first prefill size spent 55 s there on the H200 (its log's bar and
    the capture event agree), and the phase must not start after it (it said 4.2 s of 60)."""
    with traced.tracer.capture_context(8192, "prefill"):
        time.sleep(0.2)                         # the engine's warm-up runs of this size
        capture(8192)
    with traced.tracer.capture_context(4096, "prefill"):
        capture(4096)
        time.sleep(0.1)                         # and its work after the graph
    events = traced.finish()
    [phase] = kinds(events, "phase")
    captures = kinds(events, "capture")
    assert captures[0]["duration_s"] >= 0.2
    assert phase["start_ts"] <= min(c["ts"] - c["duration_s"] for c in captures) + 1e-3
    assert phase["start_ts"] + phase["duration_s"] >= max(c["ts"] for c in captures) - 1e-3


def test_a_capture_phase_is_recorded_at_the_end_when_no_step_ran(traced):
    capture(4)
    assert [e["phase"] for e in kinds(traced.finish(), "phase")] == ["capture"]


def test_a_graph_of_unknown_size_takes_the_batch_of_the_first_step_that_replays_it(traced):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):       # no batch size in any frame here
        pass
    step(traced.tracer, 6, replay=[graph])
    step(traced.tracer, 4, replay=[graph])
    events = traced.finish()
    [event] = kinds(events, "capture")
    assert event["graph_bs"] == 6 and "size from first replay" in event["variant"]
    assert [(e["mode"], e["graph_bs"]) for e in kinds(events, "step")] == [("graph", 6), ("padded", 6)]


def test_a_graph_never_replayed_whose_size_is_unknown_is_warned_about(traced):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        pass
    events = traced.finish()
    assert kinds(events, "capture") == []
    assert [w["code"] for w in kinds(events, "warning")] == ["graph_size_unknown"]


def test_a_process_with_nothing_to_report_writes_no_run(traced):
    traced.tracer.step_abort()
    assert traced.finish() == [] and traced.sinks == []


def test_the_run_says_which_process_it_is(traced, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    capture(4)
    events = traced.finish()
    run = traced.sinks[0].run
    assert run["source"] == "trace" and run["name"] == "test [rank 3]"
    assert run["run_id"] == f"t0-{traced.tracer.pid}"
    assert run["config"]["trace"]["pid"] == traced.tracer.pid
    assert kinds(events, "capture")[0]["rank"] == "rank 3"


def test_an_uncaught_exception_ends_the_run_failed_with_the_error(traced):
    capture(4)
    traced.tracer.uncaught(RuntimeError, RuntimeError("accessing tensor output of CUDAGraphs that "
                                                      "has been overwritten by a subsequent run"))
    [end] = kinds(traced.finish(), "run_end")
    assert end["status"] == "failed" and "overwritten by a subsequent run" in end["error"]


def test_a_step_that_raises_is_not_recorded(traced):
    traced.tracer.step_begin("decode", 4, 4)
    traced.tracer.step_abort()
    capture(4)
    assert kinds(traced.finish(), "step") == []


def test_removing_the_hooks_restores_the_graph_methods(traced):
    assert FakeCUDAGraph.replay.__name__ == "replay" and hasattr(FakeCUDAGraph.replay, "__replayscope_original__")
    traced.patches.remove()
    assert not hasattr(FakeCUDAGraph.replay, "__replayscope_original__")


def test_a_torch_without_the_graph_class_runs_untraced_with_a_warning(traced):
    # the process `replayscope trace` started gets a run for its warnings even with nothing else
    traced.tracer.settings = dataclasses.replace(traced.tracer.settings, parent_pid=os.getppid())
    assert not install_cuda_graph_hooks(traced.tracer, types.SimpleNamespace(), Patches())
    [missing] = kinds(traced.finish(), "warning")
    assert missing["code"] == "hook_missing"
    assert missing["message"] == (f"torch.cuda.CUDAGraph (capture_begin, capture_end, replay) is not in "
                                  f"PyTorch {torch.__version__}: CUDA graph captures and replays are not traced")


def test_warnings_of_a_child_process_with_nothing_else_to_report_write_no_run(traced):
    assert not install_cuda_graph_hooks(traced.tracer, types.SimpleNamespace(), Patches())
    assert traced.finish() == [] and traced.sinks == []


# -- Inductor -----------------------------------------------------------------------------------
class FakeTreeManager:
    """The shape of Inductor's CUDAGraphTreeManager: an empty capture at start, then run()."""

    def __init__(self, device_index=0):
        self.graph = capture(1)                 # holds the pool alive; not a graph of the program
        self.graphs = {}
        self.mutating = set()
        self.skip_messages = {}                 # function id -> what Inductor logs at its first call

    def run(self, new_inputs, function_id):
        if function_id in self.skip_messages:   # Inductor checks for mutated inputs, logs once, runs eager
            from torch._inductor import cudagraph_utils

            cudagraph_utils.log_cudagraph_skip_and_bump_counter(self.skip_messages.pop(function_id))
            self.mutating.add(function_id)
        if function_id in self.mutating:
            return "eager"
        if function_id not in self.graphs:
            self.graphs[function_id] = None      # warm-up: eager, no graph yet
            return "warm"
        if self.graphs[function_id] is None:
            self.graphs[function_id] = self.record_function(new_inputs, function_id)
            return "recorded"
        self.graphs[function_id].replay()
        return "replayed"

    def record_function(self, new_inputs, function_id):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            pass
        graph.replay()                          # Inductor replays right after recording
        return graph


class FakeNode:
    def check_invariants(self, inputs):
        return True


@pytest.fixture()
def trees(traced):
    install_graph_tree_hooks(traced.tracer, types.SimpleNamespace(CUDAGraphTreeManager=FakeTreeManager,
                                                                  CUDAGraphNode=FakeNode), traced.patches)
    return FakeTreeManager()


def inductor_step(traced, trees, bs, function_id=1):
    traced.tracer.step_begin("decode", bs, bs)
    result = trees.run([], function_id)
    traced.tracer.step_end()
    return result


def test_inductor_warm_up_then_record_then_replay_reads_eager_eager_graph(traced, trees):
    results = [inductor_step(traced, trees, 4) for _ in range(3)]
    assert results == ["warm", "recorded", "replayed"]
    events = traced.finish()
    steps = kinds(events, "step")
    assert [(s["mode"], s["reason"]) for s in steps] == [("eager", "graph_warmup"), ("eager", "graph_warmup"),
                                                          ("graph", None)]
    assert "recorded the CUDA graph" in steps[1]["evidence"] and "replays" not in steps[1]["evidence"]
    [recorded] = kinds(events, "capture")       # the manager's own empty capture is not one
    assert recorded["graph_bs"] == 4 and recorded["variant"].startswith("inductor")


def test_a_function_inductor_skips_runs_eager_with_inductors_reason(traced, trees):
    trees.mutating.add(7)
    traced.tracer.step_begin("decode", 2, 2)
    traced.tracer.inductor_calls.append(7)      # the message comes while the manager runs function 7
    traced.tracer.inductor_skip(MUTATED)
    traced.tracer.inductor_calls.pop()
    trees.run([], 7)
    traced.tracer.step_end()
    inductor_step(traced, trees, 2, function_id=7)
    events = traced.finish()
    steps = kinds(events, "step")
    assert [s["reason"] for s in steps] == ["mutated_inputs", "mutated_inputs"]
    assert steps[1]["evidence"] == "Inductor: skipping cudagraphs due to mutated inputs (6 instances). Found from :"
    [warning] = [w for w in kinds(events, "warning") if w["code"] == "cudagraph_skipped"]
    assert warning["code"] == "cudagraph_skipped" and "mutated inputs (6 instances)" in warning["message"]


def test_a_skipped_function_makes_the_step_eager_even_when_another_graph_replayed(traced, trees):
    for _ in range(2):
        inductor_step(traced, trees, 2, function_id=1)      # function 1 now has a graph
    trees.mutating.add(2)
    traced.tracer.inductor_skipped[2] = Cause("mutated_inputs", "Inductor: mutated inputs")
    traced.tracer.step_begin("decode", 2, 2)
    trees.run([], 1)
    trees.run([], 2)
    traced.tracer.step_end()
    last = kinds(traced.finish(), "step")[-1]
    assert (last["mode"], last["reason"]) == ("eager", "mutated_inputs")
    assert last["evidence"] == "Inductor: mutated inputs; 1 replays of other graphs in the step"


def test_a_skip_decided_at_compile_time_is_the_cause_of_later_eager_steps(traced):
    traced.tracer.inductor_skip("skipping cudagraphs due to cpu device (arg0_1)")
    step(traced.tracer, 3)
    [event] = kinds(traced.finish(), "step")
    assert (event["reason"], event["evidence"]) == ("cpu_device", "Inductor: skipping cudagraphs due to cpu device (arg0_1)")


def test_a_re_recording_is_a_capture_of_its_own(traced, trees):
    for _ in range(3):
        inductor_step(traced, trees, 4)
    trees.graphs[1] = None                       # the manager re-records (a static input moved)
    inductor_step(traced, trees, 4)
    variants = [c["variant"] for c in kinds(traced.finish(), "capture")]
    assert variants[0].startswith("inductor,") and variants[1].startswith("inductor re-record")


def test_a_compile_is_a_compile_phase(traced):
    traced.tracer.compile_done(1000.0, 2.5)
    [phase] = kinds(traced.finish(), "phase")
    assert (phase["phase"], phase["start_ts"], phase["duration_s"]) == ("compile", 1000.0, 2.5)


def test_a_run_that_cannot_be_written_stops_tracing_and_never_the_program(traced, capsys):
    def broken_sink(run_id):
        raise OSError("No space left on device")

    traced.tracer._make_sink = broken_sink
    graph = capture(4)                          # its event opens the run, which fails
    assert traced.tracer.closed and traced.tracer.emitter is None
    assert not traced.tracer.step_begin("decode", 4, 4)       # no more steps are kept
    graph.replay()                                            # the program goes on
    assert "cannot write the run" in capsys.readouterr().err
    assert traced.finish() == []


# What torch 2.11 logged on the H200 for a transformers StaticCache created inside a compiled prefill:
# torch's own "Found from : \n " and the mutating use's stack trace (two layers x keys, values, length).
CACHE_UPDATE_TRACE = ('  File "/opt/torch/.venv/lib/python3.12/site-packages/transformers/cache_utils.py", '
                      'line 478, in update\n    self.cumulative_length.add_(kv_length)\n')


def test_inductors_mutated_inputs_message_as_torch_formats_it_is_a_mutated_inputs_skip(traced, trees):
    from torch._dynamo.utils import counters
    from torch._inductor import cudagraph_utils

    from replayscope.runner.trace.hooks import install_inductor_skip_hook

    assert install_inductor_skip_hook(traced.tracer, cudagraph_utils, traced.patches)
    placeholders = [cudagraph_utils.PlaceholderInfo(name=f"arg{i}", stack_trace=None, users=[],
                                                    mutating_use_stack_trace=CACHE_UPDATE_TRACE) for i in range(6)]
    message = cudagraph_utils.get_mutation_stack_trace(placeholders, list(range(6)))   # torch's own words
    assert message == ("skipping cudagraphs due to mutated inputs (6 instances). Found from : \n "
                       + CACHE_UPDATE_TRACE)
    skips_before = counters["inductor"]["cudagraph_skips"]
    trees.skip_messages[3] = message
    assert [inductor_step(traced, trees, 2, function_id=3) for _ in range(3)] == ["eager"] * 3
    assert counters["inductor"]["cudagraph_skips"] == skips_before + 1      # torch's own function still ran
    events = traced.finish()
    [warning] = [w for w in kinds(events, "warning") if w["code"] == "cudagraph_skipped"]
    assert (warning["code"], warning["message"]) == \
        ("cudagraph_skipped", "Inductor: skipping cudagraphs due to mutated inputs (6 instances). Found from :")
    steps = kinds(events, "step")
    assert [(s["mode"], s["reason"], s["evidence"]) for s in steps] == [("eager", "mutated_inputs", warning["message"])] * 3


def test_a_skip_logged_through_a_name_the_hook_never_replaced_is_still_recorded_once(traced, trees):
    """A module that bound Inductor's function before the hook (or in a way the hook cannot see)
    calls the original: the message is still heard from Inductor's cudagraphs logger. Through the
    replaced name it is taken once, not again from the log."""
    from torch._inductor import cudagraph_utils

    from replayscope.runner.trace.hooks import install_inductor_skip_hook

    stale = cudagraph_utils.log_cudagraph_skip_and_bump_counter        # bound before the hook
    assert install_inductor_skip_hook(traced.tracer, cudagraph_utils, traced.patches)
    assert cudagraph_utils.log_cudagraph_skip_and_bump_counter is not stale
    heard = []
    original_skip = traced.tracer.inductor_skip
    traced.tracer.inductor_skip = lambda message: (heard.append(message), original_skip(message))
    stale("skipping cudagraphs due to cpu device (arg3_1)")
    cudagraph_utils.log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to mutated inputs (2 instances)")
    assert heard == ["skipping cudagraphs due to cpu device (arg3_1)",
                     "skipping cudagraphs due to mutated inputs (2 instances)"]
    traced.patches.remove()
    stale("skipping cudagraphs due to non-tensor inputs")              # off: nothing is heard any more
    assert len(heard) == 2


# -- step timing ---------------------------------------------------------------------------------
class FakeEvent:
    """torch.cuda.Event's surface; each step takes 2.5 ms on this GPU."""

    recorded = 0

    def __init__(self, enable_timing=False):
        pass

    def record(self, stream=None):
        FakeEvent.recorded += 1

    def query(self):
        return True

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return 2.5


@pytest.fixture()
def cuda_in_use(monkeypatch):
    """The process uses CUDA (stand-in events and streams); ``state["capturing"]`` says whether the
    current stream is capturing."""
    from replayscope.runner.trace import device

    state = {"capturing": False}
    monkeypatch.setattr(device, "cuda_in_use", lambda: True)
    monkeypatch.setattr(device, "capturing", lambda: state["capturing"])
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0, raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda index=None: "stream")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    FakeEvent.recorded = 0
    return state


def test_with_cuda_the_first_step_of_each_batch_size_and_every_nth_after_it_is_timed(traced, cuda_in_use):
    every = CUDA_TIME_EVERY
    graphs = {bs: capture(bs) for bs in (2, 4)}
    sizes = [4] * (every + 2) + [2] * 3
    for bs in sizes:
        step(traced.tracer, bs, replay=[graphs[bs]])
    events = traced.finish()
    durations = [(s["raw_bs"], s["duration_s"]) for s in kinds(events, "step")]
    assert durations == [(4, 0.0025)] + [(4, None)] * (every - 1) + [(4, 0.0025), (4, None), (2, 0.0025), (2, None),
                                                                      (2, None)]
    assert FakeEvent.recorded == 2 * 3                  # a start and an end event per timed step, none else
    assert traced.sinks[0].run["config"]["trace"]["step_timing"] == {"clock": "cuda_events", "every": CUDA_TIME_EVERY}


def test_a_step_while_the_stream_is_capturing_records_no_event(traced, cuda_in_use):
    graph = capture(4)
    cuda_in_use["capturing"] = True
    step(traced.tracer, 4, replay=[graph])
    cuda_in_use["capturing"] = False
    [event] = kinds(traced.finish(), "step")
    assert event["duration_s"] is None and FakeEvent.recorded == 0


def test_without_cuda_every_step_is_timed_on_the_host(traced):
    for bs in (4, 4, 4):
        step(traced.tracer, bs)
    assert all(s["duration_s"] is not None and s["duration_s"] >= 0 for s in kinds(traced.finish(), "step"))


def test_the_sampling_reaches_every_traced_process_through_its_environment():
    from replayscope.runner.trace.settings import ENV_TIME_EVERY, TraceSettings

    environment = TraceSettings(trace_id="t1", name="n", time_every=3).environment()
    assert TraceSettings.from_environment(environment).time_every == 3
    assert TraceSettings.from_environment({**environment, ENV_TIME_EVERY: "0"}).time_every == CUDA_TIME_EVERY
