"""Step recipes: --step and transformers generate (a real tiny transformers model); vLLM's and
SGLang's layouts are ``test_engine_recipes.py``."""

import types

import pytest
import torch

from replayscope.runner.trace import recipes
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
