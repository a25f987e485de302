"""transformers generation with a static cache under torch.compile(mode="reduce-overhead"), on a
small Llama with random weights. It knows nothing of replayscope.

    python hf_generate.py graphs    # generate compiles its decode step itself (CompileConfig); the
                                    # prefill runs eager and creates the static cache, whose tensors
                                    # it marks as static addresses: the decode graph replays
    python hf_generate.py user_compiled
                                    # the program compiles model.forward itself (a common recipe):
                                    # the prefill creates the static cache inside the compiled code;
                                    # on torch 2.11 / transformers 5.17 Inductor skips CUDA graphs for
                                    # the decode ("mutated inputs (6 instances)") and generation then
                                    # fails reading a graph output a later run overwrote
"""

import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

NEW_TOKENS = 12


def main(variant="graphs", device="cuda"):
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
    elif variant == "user_compiled":
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        out = model.generate(ids, **kwargs)
    else:
        raise SystemExit(f"unknown variant {variant!r}: graphs, user_compiled")
    print("generated", tuple(out.shape))


if __name__ == "__main__":
    main(sys.argv[1])
