"""transformers generation with a static cache under torch.compile(mode="reduce-overhead"), on a
small Llama with random weights. It knows nothing of replayscope.

    python hf_generate.py graphs    # generate compiles its decode step itself (CompileConfig); the
                                    # prefill runs eager and creates the static cache, whose tensors
                                    # it marks as static addresses: the decode graph replays
    python hf_generate.py mutated   # the whole forward compiled by hand: the prefill through Inductor
                                    # without CUDA graphs, the decode steps with mode="reduce-overhead".
                                    # The static cache is created inside the compiled prefill, where
                                    # transformers cannot mark its tensors static, so for the decode
                                    # graph they are plain inputs that it mutates (each layer's keys,
                                    # values and length): Inductor skips CUDA graphs "due to mutated
                                    # inputs (6 instances)" and the decode steps run without a graph
"""

import functools
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

NEW_TOKENS = 12


def compile_prefill_and_decode(model):
    """Prefill and decode compiled separately, CUDA graphs for decode only (prompt lengths vary)."""
    forward = model.forward
    prefill = torch.compile(forward, dynamic=False)
    decode = torch.compile(forward, mode="reduce-overhead", dynamic=False)

    @functools.wraps(forward)
    def compiled_forward(*args, **kwargs):
        ids = kwargs.get("input_ids")
        one_token = ids is not None and ids.shape[-1] == 1
        return (decode if one_token else prefill)(*args, **kwargs)

    model.forward = compiled_forward


def main(variant, device="cuda"):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = LlamaForCausalLM(config).to(device, torch.bfloat16).eval()
    ids = torch.randint(1, config.vocab_size, (2, 8), device=device)
    kwargs = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                  cache_implementation="static", pad_token_id=0)
    if variant == "graphs":
        from transformers import CompileConfig

        out = model.generate(ids, compile_config=CompileConfig(mode="reduce-overhead"), **kwargs)
    elif variant == "mutated":
        compile_prefill_and_decode(model)
        out = model.generate(ids, disable_compile=True, **kwargs)
    else:
        raise SystemExit(f"unknown variant {variant!r}: graphs or mutated")
    print("generated", tuple(out.shape))


if __name__ == "__main__":
    main(sys.argv[1])
