"""transformers generation with a static cache under torch.compile(mode="reduce-overhead"), on a
small Llama with random weights. It knows nothing of replayscope.

    python hf_generate.py graphs [RECORD.json] [cuda|cpu]
                                    # generate compiles its decode step itself (CompileConfig); the
                                    # prefill runs eager and creates the static cache, whose tensors
                                    # it marks as static addresses: the decode graph replays. With
                                    # RECORD.json the program notes what each forward did itself
                                    # (prefill, or the state Inductor's graph-tree manager is left in
                                    # after the decode forward: warm-up, recording, replay)
    python hf_generate.py user_compiled
                                    # the program compiles model.forward itself (a common recipe):
                                    # the prefill creates the static cache inside the compiled code;
                                    # on torch 2.11 / transformers 5.17 Inductor skips CUDA graphs for
                                    # the decode ("mutated inputs (6 instances)") and generation then
                                    # fails reading a graph output a later run overwrote

The generation API used (transformers 5.x, read in its source): ``generate(ids, max_new_tokens=,
cache_implementation="static", compile_config=CompileConfig(mode="reduce-overhead"))``; each
forward of the loop goes from ``prepare_inputs_for_generation`` to
``_update_model_kwargs_for_generation``. On a CPU, generate compiles only when
``CompileConfig._compile_all_devices`` is set (then Inductor runs without CUDA graphs).
"""

import json
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

NEW_TOKENS = 12


def what_the_decode_did() -> dict:
    if not torch.cuda.is_initialized():
        return {"mode": "eager", "reason": "cpu_device"}
    from torch._inductor import cudagraph_trees

    manager = cudagraph_trees.get_container(torch.cuda.current_device()).tree_manager
    if getattr(manager, "path_state", None) == cudagraph_trees.ExecutionState.EXECUTION:
        return {"mode": "graph", "reason": None}
    return {"mode": "eager", "reason": "graph_warmup"}           # warming up, or recording


def note_each_forward(model, record: list) -> None:
    """The program's own account of each forward: its rows and new tokens from the inputs
    ``prepare_inputs_for_generation`` made, what it did once ``_update_model_kwargs_for_generation``
    runs after it. The class's methods are looked up at each call (whoever wrapped them)."""
    cls, shape = type(model), {}

    def prepare_inputs_for_generation(*args, **kwargs):
        inputs = cls.prepare_inputs_for_generation(model, *args, **kwargs)
        shape["ids"] = tuple(inputs["input_ids"].shape)
        return inputs

    def _update_model_kwargs_for_generation(*args, **kwargs):
        rows, new = shape.pop("ids")
        if new > 1:
            record.append({"stage": "prefill", "raw_bs": rows, "mode": "eager", "reason": "prefill"})
        else:
            record.append({"stage": "decode", "raw_bs": rows, **what_the_decode_did()})
        return cls._update_model_kwargs_for_generation(model, *args, **kwargs)

    model.prepare_inputs_for_generation = prepare_inputs_for_generation
    model._update_model_kwargs_for_generation = _update_model_kwargs_for_generation


def main(variant="graphs", out=None, device="cuda"):
    torch.manual_seed(0)
    small = device == "cpu"          # a CPU compiles slowly: a smaller model there
    config = LlamaConfig(vocab_size=256 if small else 1024, hidden_size=64 if small else 256,
                         intermediate_size=128 if small else 512, num_hidden_layers=1 if small else 2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = LlamaForCausalLM(config).to(device, torch.bfloat16).eval()
    ids = torch.randint(1, config.vocab_size, (2, 8), device=device)
    kwargs = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                  cache_implementation="static", pad_token_id=0)
    record: list = []
    if variant == "graphs":
        from transformers import CompileConfig

        compile_config = CompileConfig(mode="reduce-overhead")
        if device == "cpu":
            compile_config._compile_all_devices = True
        if out:
            note_each_forward(model, record)
        result = model.generate(ids, compile_config=compile_config, **kwargs)
    elif variant == "user_compiled":
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        result = model.generate(ids, **kwargs)
    else:
        raise SystemExit(f"unknown variant {variant!r}: graphs, user_compiled")
    if out:
        with open(out, "w") as f:
            json.dump(record, f)
    print("generated", tuple(result.shape))


if __name__ == "__main__":
    main(*sys.argv[1:4])
