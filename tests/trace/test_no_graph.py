"""No CUDA graph, said why: the device, Inductor's config, a skip Inductor counted silently —
from ``replayscope.runner.trace.no_graph`` and as a traced run carries it (a warning, and the cause of its
eager steps), with PyTorch's real compile entry point on the CPU."""

import pytest
import torch

from replayscope.runner.trace.causes import Cause
from replayscope.runner.trace.hooks import install_compile_fx_hook
from replayscope.runner.trace.no_graph import GraphIntent, asked_for_graphs, no_graph_cause
from tests.trace.conftest import kinds


def intent(compiles=0, with_graphs=0, silent=0):
    i = GraphIntent()
    i.compiles, i.with_graphs, i.silent_skips = compiles, with_graphs, silent
    return i


def test_no_cuda_is_cpu_device_with_the_silent_skips_counted():
    c = no_graph_cause(intent(2, 2, silent=2), "unavailable")
    assert c.reason == "cpu_device"
    assert c.evidence == ("CUDA is not available in this process (torch.cuda.is_available() is False): "
                          "torch.compile(mode=\"reduce-overhead\") runs without CUDA graphs on the CPU and PyTorch "
                          "says nothing of it; Inductor counted 2 CUDA-graph skips without a message")
    assert no_graph_cause(intent(), "uninitialized").reason == "cpu_device"


def test_graphs_compiled_with_cudagraphs_off_are_graphs_disabled_and_name_the_variable(monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CUDAGRAPHS", "0")
    c = no_graph_cause(intent(3, 0), "ok")
    assert c.reason == "graphs_disabled"
    assert c.evidence == ("torch.compile compiled 3 graphs with Inductor's CUDA graphs off (triton.cudagraphs "
                          "False: the mode is not reduce-overhead or max-autotune, or options or "
                          "torch._inductor.config turned it off; TORCHINDUCTOR_CUDAGRAPHS=0 is set)")


def test_graphs_asked_for_and_skipped_silently_are_unknown_and_say_so():
    c = no_graph_cause(intent(1, 1, silent=1), "ok")
    assert c.reason == "unknown" and "1 CUDA-graph skip without a message" in c.evidence
    assert no_graph_cause(intent(1, 1), "ok") is None


def test_whether_a_compile_asks_for_graphs_follows_its_patches_then_inductors_config():
    assert asked_for_graphs({"triton.cudagraphs": True}) is True        # mode="reduce-overhead"
    assert asked_for_graphs({}) is False                                  # the default mode
    with torch._inductor.config.patch({"triton.cudagraphs": True}):
        assert asked_for_graphs(None) is True


def test_inductors_compile_entry_point_says_whether_graphs_were_asked_for(traced):
    import torch._inductor.compile_fx as compile_fx_module

    assert install_compile_fx_hook(traced.tracer, compile_fx_module, traced.patches)
    model = torch.nn.Linear(4, 4)
    for mode in ("reduce-overhead", "default"):
        torch._dynamo.reset()
        torch.compile(model, mode=mode)(torch.zeros(2, 4))
    assert (traced.tracer.graph_intent.compiles, traced.tracer.graph_intent.with_graphs) == (2, 1)
    torch._dynamo.reset()


def test_a_run_without_any_graph_carries_why_and_its_eager_steps_read_it(traced):
    traced.tracer.inductor_compiled(False)
    traced.tracer.step_begin("decode", 2, 2)
    traced.tracer.step_end()
    events = traced.finish()
    [step] = kinds(events, "step")
    assert step["reason"] == "cpu_device" and step["evidence"].startswith("CUDA is not available")
    [warning] = [w for w in kinds(events, "warning") if w["code"] == "no_cuda_graphs"]
    assert warning["message"].startswith("no CUDA graph was captured in this process: CUDA is not available")


def test_a_process_that_captured_graphs_gets_no_such_warning(traced):
    from tests.trace.conftest import capture

    traced.tracer.inductor_compiled(True)
    capture(4)
    assert not [w for w in kinds(traced.finish(), "warning") if w["code"] == "no_cuda_graphs"]
