"""Step recipes: --step, vLLM, SGLang and transformers generate, each on objects shaped like the
engine's (and a real tiny transformers model), with captures of one size per engine call."""

import sys
import types

import pytest
import torch

from runner.trace import recipes
from tests.trace.conftest import capture, kinds


def graph_of(bs):
    return capture(bs)


# -- --step -------------------------------------------------------------------------------------
def test_the_batch_of_a_step_is_the_leading_dimension_of_its_first_tensor():
    tokens = torch.zeros(5, 1, dtype=torch.long)
    assert recipes.tensor_batch((object(), {"tokens": tokens, "x": torch.zeros(9)}), {}) == \
        recipes.StepBatch("decode", 5, 5)
    assert recipes.tensor_batch((), {"ids": torch.zeros(3, 4, dtype=torch.long)}).raw_bs == 3
    assert recipes.tensor_batch((), {"ids": torch.zeros(3, 4, dtype=torch.long)}).num_tokens == 12
    assert recipes.tensor_batch(([torch.zeros(2, 8)],), {}) == recipes.StepBatch("decode", 2, 2)
    assert recipes.tensor_batch(("no tensor",), {}).raw_bs is None


class Engine:
    def __init__(self):
        self.graphs = {bs: graph_of(bs) for bs in (8, 4)}

    def step(self, tokens):
        size = next((bs for bs in sorted(self.graphs) if bs >= tokens.shape[0]), None)
        if size is not None:
            self.graphs[size].replay()
        return tokens

    @staticmethod
    def helper(tokens):
        return tokens


def test_a_step_named_with_module_and_qualname_records_one_step_per_call(traced):
    module = types.SimpleNamespace(__name__="engine_mod", Engine=Engine)
    recipes.wrap_step_function(traced.tracer, module, "Engine.step", traced.patches, "engine_mod:Engine.step")
    engine = Engine()
    for bs in (4, 3, 8, 12):
        engine.step(torch.zeros(bs, 1, dtype=torch.long))
    steps = kinds(traced.finish(), "step")
    assert [(s["raw_bs"], s["mode"], s["graph_bs"], s["reason"]) for s in steps] == [
        (4, "graph", 4, None), (3, "padded", 4, None), (8, "graph", 8, None), (12, "eager", None, "batch_too_large")]


def test_a_static_method_can_be_the_step(traced):
    module = types.SimpleNamespace(__name__="engine_mod", Engine=Engine)
    recipes.wrap_step_function(traced.tracer, module, "Engine.helper", traced.patches, "engine_mod:Engine.helper")
    Engine.helper(torch.zeros(2, 1, dtype=torch.long))
    assert [s["raw_bs"] for s in kinds(traced.finish(), "step")] == [2]


def test_a_step_name_the_module_does_not_have_is_a_warning_not_an_error(traced):
    module = types.SimpleNamespace(__name__="engine_mod")
    recipes.wrap_step_function(traced.tracer, module, "decode", traced.patches, "engine_mod:decode")
    capture(4)
    [warning] = kinds(traced.finish(), "warning")
    assert warning["code"] == "step_missing" and "engine_mod has no decode" in warning["message"]


def test_a_nested_call_of_the_step_function_is_part_of_the_outer_step(traced):
    module = types.SimpleNamespace(__name__="m")

    def step(tokens, depth=0):
        return module.step(tokens, depth + 1) if depth < 2 else tokens

    module.step = step
    recipes.wrap_step_function(traced.tracer, module, "step", traced.patches, "m:step")
    module.step(torch.zeros(3, 1))
    assert [s["raw_bs"] for s in kinds(traced.finish(), "step")] == [3]


# -- vLLM -----------------------------------------------------------------------------------------
class GPUModelRunner:
    """The parts of vLLM's V1 runner the recipe reads: execute_model and _dummy_run."""

    def __init__(self, enforce_eager=False):
        self.model_config = types.SimpleNamespace(model="meta-llama/Llama-3.1-8B", enforce_eager=enforce_eager)
        self.graphs = {}

    def _dummy_run(self, num_tokens, cudagraph_runtime_mode=None, uniform_decode=False):
        if cudagraph_runtime_mode is not None:
            self.graphs[num_tokens] = [graph_of(num_tokens) for _ in range(3)]   # piecewise: 3 pieces

    def capture_model(self):
        for num_tokens in (8, 4, 2, 1):
            self._dummy_run(num_tokens, cudagraph_runtime_mode=types.SimpleNamespace(name="PIECEWISE"))

    def execute_model(self, scheduler_output, intermediate_tensors=None, dummy_run=False, is_profile=False):
        tokens = scheduler_output.total_num_scheduled_tokens
        size = next((s for s in sorted(self.graphs) if s >= tokens), None)
        if size is not None and len(scheduler_output.num_scheduled_tokens) == tokens:
            for piece in self.graphs[size]:
                piece.replay()


def scheduled(*per_request, spec=None):
    return types.SimpleNamespace(total_num_scheduled_tokens=sum(per_request),
                                 num_scheduled_tokens={f"r{i}": n for i, n in enumerate(per_request)},
                                 scheduled_spec_decode_tokens=spec or {})


@pytest.fixture()
def vllm(traced):
    module = types.SimpleNamespace(GPUModelRunner=GPUModelRunner)
    recipes.install_vllm(traced.tracer, module, traced.patches)
    return module


def test_vllm_captures_are_one_event_per_size_and_steps_are_execute_model_calls(traced, vllm):
    runner = GPUModelRunner()
    runner._dummy_run(8)                         # a profile run: no capture, no event
    runner.capture_model()
    runner.execute_model(scheduled(1, 1, 1))     # 3 decode requests: the 4-token graph, padded
    runner.execute_model(scheduled(1, 1, 1, 1))
    runner.execute_model(scheduled(7, 1))        # a prompt chunk: eager
    runner.execute_model(scheduled())            # nothing scheduled: no forward, no step
    events = traced.finish()
    captures = kinds(events, "capture")
    assert [c["graph_bs"] for c in captures] == [8, 4, 2, 1]
    assert all(c["variant"].startswith("vllm PIECEWISE, 3 graphs") for c in captures)
    steps = kinds(events, "step")
    assert [(s["stage"], s["mode"], s["raw_bs"], s["graph_bs"], s["reason"]) for s in steps] == [
        ("decode", "padded", 3, 4, None), ("decode", "graph", 4, 4, None), ("mixed", "eager", 8, None, "prefill")]
    assert traced.sinks[0].run["model"] == "meta-llama/Llama-3.1-8B"


def test_vllm_v2_dummy_runs_through_execute_model_are_not_steps(traced, vllm):
    runner = GPUModelRunner()
    runner.execute_model(scheduled(1, 1), dummy_run=True)
    runner.execute_model(scheduled(1, 1), is_profile=True)
    runner.execute_model(scheduled(1, 1))
    assert len(kinds(traced.finish(), "step")) == 1


def test_vllm_with_enforce_eager_steps_are_graphs_disabled(traced, vllm):
    runner = GPUModelRunner(enforce_eager=True)
    runner.execute_model(scheduled(1, 1))
    [step] = kinds(traced.finish(), "step")
    assert step["reason"] == "graphs_disabled"


def test_a_vllm_without_the_runner_method_is_a_warning_and_runs_on(traced):
    recipes.install_vllm(traced.tracer, types.SimpleNamespace(GPUModelRunner=object), traced.patches)
    capture(4)
    [warning] = kinds(traced.finish(), "warning")
    assert warning["code"] == "recipe_incomplete" and "GPUModelRunner.execute_model" in warning["message"]


# -- SGLang ---------------------------------------------------------------------------------------
class ForwardMode:
    def __init__(self, name):
        self.name = name

    def is_idle(self):
        return self.name == "IDLE"

    def is_decode(self):
        return self.name == "DECODE"

    def is_target_verify(self):
        return self.name == "TARGET_VERIFY"

    def is_mixed(self):
        return self.name == "MIXED"


class CudaGraphRunner:
    def __init__(self, runner):
        self.model_runner = runner
        self.graphs = {}
        for bs in (4, 2, 1):
            self.graphs[bs] = self.capture_one_batch_size(bs, None)

    def capture_one_batch_size(self, bs, forward, stream_idx=None):
        return [graph_of(bs) for _ in range(2)]


class ModelRunner:
    def __init__(self, disable_cuda_graph=False):
        self.server_args = types.SimpleNamespace(disable_cuda_graph=disable_cuda_graph, model_path="Qwen/Qwen2-7B")
        self.graph_runner = None if disable_cuda_graph else CudaGraphRunner(self)

    def forward(self, forward_batch, skip_attn_backend_init=False, pp_proxy_tensors=None):
        bs = forward_batch.batch_size
        if self.graph_runner and forward_batch.forward_mode.is_decode() and bs <= 4:
            size = next(s for s in sorted(self.graph_runner.graphs) if s >= bs)
            self.graph_runner.graphs[size][0].replay()


def forward_batch(bs, mode="DECODE", tokens=None):
    return types.SimpleNamespace(batch_size=bs, forward_mode=ForwardMode(mode),
                                 input_ids=torch.zeros(tokens or bs, dtype=torch.long))


@pytest.fixture()
def sglang(traced):
    recipes.install_sglang_capture(traced.tracer, sys.modules[__name__], traced.patches)
    recipes.install_sglang_runner(traced.tracer, types.SimpleNamespace(ModelRunner=ModelRunner), traced.patches)


def test_sglang_captures_each_batch_size_once_and_steps_are_forward_calls(traced, sglang):
    runner = ModelRunner()
    for batch in (forward_batch(3), forward_batch(2), forward_batch(9), forward_batch(2, "EXTEND", 40),
                  forward_batch(2, "IDLE")):
        runner.forward(batch)
    events = traced.finish()
    assert [(c["graph_bs"], c["variant"].split(",")[0]) for c in kinds(events, "capture")] == \
        [(4, "sglang"), (2, "sglang"), (1, "sglang")]
    assert traced.sinks[0].run["model"] == "Qwen/Qwen2-7B"
    assert [(s["stage"], s["mode"], s["raw_bs"], s["graph_bs"], s["reason"], s["num_tokens"])
            for s in kinds(events, "step")] == [
        ("decode", "padded", 3, 4, None, 3), ("decode", "graph", 2, 2, None, 2),
        ("decode", "eager", 9, None, "batch_too_large", 9), ("prefill", "eager", 2, None, "prefill", 40)]


def test_sglang_with_cuda_graphs_disabled_steps_say_so(traced, sglang):
    ModelRunner(disable_cuda_graph=True).forward(forward_batch(2))
    [step] = kinds(traced.finish(), "step")
    assert step["reason"] == "graphs_disabled" and "--disable-cuda-graph" in step["evidence"]


# -- transformers generate -----------------------------------------------------------------------
@pytest.fixture()
def generation(traced):
    import transformers.generation.utils as generation_utils

    recipes.install_transformers(traced.tracer, generation_utils, traced.patches)
    return generation_utils


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


def test_transformers_generate_records_one_step_per_forward(traced, generation):
    model = tiny_llama()
    ids = torch.randint(1, 128, (2, 5))
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
    assert out.shape == (2, 9)
    steps = kinds(traced.finish(), "step")
    assert [(s["stage"], s["raw_bs"], s["num_tokens"]) for s in steps] == \
        [("prefill", 2, 10)] + [("decode", 2, 2)] * 3
    assert steps[0]["reason"] == "prefill" and steps[0]["evidence"] == "5 new tokens per sequence"
    assert {s["reason"] for s in steps[1:]} == {"cpu_device"}
    assert traced.sinks[0].run["model"] == "LlamaForCausalLM"


def test_wrapped_generation_methods_keep_their_signatures_for_transformers_own_introspection(traced):
    import inspect

    import transformers.generation.utils as generation_utils

    mixin = generation_utils.GenerationMixin
    before = {n: inspect.signature(getattr(mixin, n)) for n in
              ("generate", "prepare_inputs_for_generation", "_update_model_kwargs_for_generation")}
    recipes.install_transformers(traced.tracer, generation_utils, traced.patches)
    assert {n: inspect.signature(getattr(mixin, n)) for n in before} == before
    traced.patches.remove()
    assert not hasattr(mixin.generate, "__replayscope_original__")


def test_a_transformers_without_the_generation_loop_methods_is_a_warning(traced):
    recipes.install_transformers(traced.tracer, types.SimpleNamespace(GenerationMixin=object), traced.patches)
    capture(2)
    [warning] = kinds(traced.finish(), "warning")
    assert warning["code"] == "recipe_incomplete" and "GenerationMixin.generate" in warning["message"]
