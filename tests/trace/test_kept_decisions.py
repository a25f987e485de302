"""A traced step's batch and outcome are kept (per shape, per batch and graph size, per what an
eager step's cause depends on) so that a step reads dictionaries, not the tracer's whole state:
these tests hold the kept answers to the ones worked out afresh when that state changes."""

import torch

from replayscope.runner.trace import recipes
from replayscope.runner.trace.causes import Cause
from tests.trace.conftest import capture, kinds


def step(tracer, bs, *, replay=(), stage="decode", hint=None):
    assert tracer.step_begin(stage, bs, bs, hint)
    for graph in replay:
        graph.replay()
    tracer.step_end()


def outcomes(events):
    return [(e["raw_bs"], e["mode"], e["graph_bs"], e["reason"], e.get("evidence")) for e in kinds(events, "step")]


def test_an_eager_batch_is_decided_again_once_a_graph_that_holds_it_is_captured(traced):
    tracer = traced.tracer
    capture(8)
    step(tracer, 12)
    step(tracer, 12)
    capture(16)
    step(tracer, 12)                  # graphs now hold 12, but none replayed: unknown, not too large
    step(tracer, 24)
    assert outcomes(traced.finish()) == [
        (12, "eager", None, "batch_too_large", "batch of 12; largest captured graph holds 8"),
        (12, "eager", None, "batch_too_large", "batch of 12; largest captured graph holds 8"),
        (12, "eager", None, "unknown", "no graph replayed in the step; graphs captured in this process for "
                                       "batch sizes 8, 16"),
        (24, "eager", None, "batch_too_large", "batch of 24; largest captured graph holds 16")]


def test_an_eager_batch_follows_the_hint_and_the_compile_time_skip_of_its_own_step(traced):
    tracer = traced.tracer
    capture(8)
    step(tracer, 4, stage="prefill", hint=Cause("prefill", "16 new tokens per sequence"))
    step(tracer, 4, stage="prefill", hint=Cause("prefill", "32 new tokens per sequence"))
    step(tracer, 4)
    tracer.inductor_skip("skipping cudagraphs due to mutated inputs (1 instances)")
    step(tracer, 4)
    rows = outcomes(traced.finish())
    assert [r[3:] for r in rows] == [
        ("prefill", "16 new tokens per sequence"), ("prefill", "32 new tokens per sequence"),
        ("unknown", "no graph replayed in the step; graphs captured in this process for batch sizes 8"),
        ("mutated_inputs", "Inductor: skipping cudagraphs due to mutated inputs (1 instances)")]


def test_a_process_without_graphs_says_what_it_compiled_since_the_last_step(traced):
    tracer = traced.tracer
    step(tracer, 2)
    tracer.inductor_compiled(False)
    step(tracer, 2)
    first, second = outcomes(traced.finish())
    assert first[3:] == ("cpu_device", "CUDA is not available in this process (torch.cuda.is_available() is False)")
    assert second[3] == "cpu_device" and "torch.compile(mode=\"reduce-overhead\") runs without CUDA graphs" \
        in second[4]


def test_replayed_steps_keep_graph_padded_and_a_graph_of_unknown_size_bound_at_its_first_step(traced):
    tracer = traced.tracer
    small, large = capture(4), capture(8)
    unsized = capture(None)
    for bs, graph in ((4, small), (3, small), (8, large), (5, large), (3, small), (6, unsized), (6, unsized)):
        step(tracer, bs, replay=[graph])
    rows = outcomes(traced.finish())
    assert [r[:4] for r in rows] == [(4, "graph", 4, None), (3, "padded", 4, None), (8, "graph", 8, None),
                                     (5, "padded", 8, None), (3, "padded", 4, None), (6, "graph", 6, None),
                                     (6, "graph", 6, None)]


def test_the_batch_read_from_a_tensor_is_kept_per_shape_and_dtype():
    ids = torch.zeros(3, 4, dtype=torch.long)
    hidden = torch.zeros(3, 4)
    for _ in range(2):                # the second read is the kept one
        assert recipes.tensor_batch((ids,), {}) == recipes.StepBatch("decode", 3, 12)
        assert recipes.tensor_batch((hidden,), {}) == recipes.StepBatch("decode", 3, 3)
        assert recipes.tensor_batch((torch.zeros(0, 4),), {}).raw_bs is None
        assert recipes.tensor_batch((torch.zeros(3, 1, dtype=torch.long),), {}) == recipes.StepBatch("decode", 3, 3)
        assert recipes.tensor_batch(("x", [ids]), {"y": hidden}) == recipes.StepBatch("decode", 3, 3)


def test_the_same_batch_reads_inductors_word_on_each_step_warm_up_recording_skip(traced):
    from tests.trace.test_tracer import FakeNode, FakeTreeManager, inductor_step
    import types

    from replayscope.runner.trace.graph_trees import install_graph_tree_hooks

    install_graph_tree_hooks(traced.tracer, types.SimpleNamespace(CUDAGraphTreeManager=FakeTreeManager,
                                                                  CUDAGraphNode=FakeNode), traced.patches)
    trees = FakeTreeManager()
    for function_id in (1, 1, 1):
        inductor_step(traced, trees, 4, function_id)
    trees.mutating.add(2)
    traced.tracer.inductor_calls.append(2)      # Inductor's message while the manager runs function 2
    traced.tracer.inductor_skip("skipping cudagraphs due to mutated inputs (1 instances)")
    traced.tracer.inductor_calls.pop()
    for function_id in (2, 2, 1):
        inductor_step(traced, trees, 4, function_id)
    rows = outcomes(traced.finish())
    assert [(mode, reason) for _bs, mode, _g, reason, _e in rows] == [
        ("eager", "graph_warmup"), ("eager", "graph_warmup"), ("graph", None),
        ("eager", "mutated_inputs"), ("eager", "mutated_inputs"), ("graph", None)]
    assert "ran compiled function 1 without a graph" in rows[0][4]
    assert "recorded the CUDA graph of compiled function 1" in rows[1][4]


def test_a_vllm_step_batch_kept_per_stage_tokens_and_requests_says_its_own_numbers(traced):
    from replayscope.runner.trace import vllm_recipes
    from tests.trace.test_engine_recipes import install, scheduled, v1_layout

    module, GPUModelRunner = v1_layout()
    install(traced, vllm_recipes, module)
    runner = GPUModelRunner()
    runner.capture_model()
    for batch in (scheduled(7, 1), scheduled(7, 1), scheduled(5, 3), scheduled(2, 2, 2, 2),
                  scheduled(1, 1, 1), scheduled(1, 1, 1), scheduled(3, spec={"r0": [1, 2]})):
        runner.execute_model(batch)
    rows = [(e["stage"], e["mode"], e["raw_bs"], e["reason"], e.get("evidence")) for e in kinds(traced.finish(), "step")]
    prompt = "requests with 8 tokens: a batch with prompt tokens"
    assert rows == [("mixed", "eager", 8, "prefill", f"2 {prompt}"), ("mixed", "eager", 8, "prefill", f"2 {prompt}"),
                    ("mixed", "eager", 8, "prefill", f"2 {prompt}"), ("mixed", "eager", 8, "prefill", f"4 {prompt}"),
                    rows[4], rows[4], ("verify", "eager", 3, "unknown", rows[6][4])]
    assert rows[4][:3] == ("decode", "padded", 3)


def test_an_sglang_step_batch_kept_per_stage_rows_and_tokens_says_its_own_numbers(traced):
    from replayscope.runner.trace import sglang_recipes
    from tests.trace.test_engine_recipes import forward_batch, install, old_sglang_layout

    runner_module, graphs_module, ModelRunner = old_sglang_layout()
    install(traced, sglang_recipes, graphs_module)
    install(traced, sglang_recipes, runner_module)
    runner = ModelRunner()
    for batch in (forward_batch(2, "EXTEND", 40), forward_batch(2, "EXTEND", 40), forward_batch(2, "EXTEND", 41),
                  forward_batch(3, "EXTEND", 40), forward_batch(3), forward_batch(3)):
        runner.forward(batch)
    steps = kinds(traced.finish(), "step")
    assert [(s["stage"], s["raw_bs"], s["reason"], s.get("evidence")) for s in steps[:4]] == [
        ("prefill", 40, "prefill", "prefill batch of 2 requests, 40 tokens"),
        ("prefill", 40, "prefill", "prefill batch of 2 requests, 40 tokens"),
        ("prefill", 41, "prefill", "prefill batch of 2 requests, 41 tokens"),
        ("prefill", 40, "prefill", "prefill batch of 3 requests, 40 tokens")]
    assert [(s["stage"], s["mode"], s["raw_bs"], s["graph_bs"]) for s in steps[4:]] == [("decode", "padded", 3, 4)] * 2
