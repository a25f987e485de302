"""An offline SGLang run (``sglang.Engine.generate``, no tokenizer, token-id prompts) of exact
requests, writing what it asked for and what the engine answered (each request's ``output_ids``
and ``meta_info``: prompt, completion and cached tokens) to a JSON file. SGLang's own account of
its steps is its log ("Prefill batch" lines, a "Decode batch" line per decode batch, the capture lines),
read by the harness.

    python offline.py MODEL_DIR OUT.json [--requests N] [--prompt-tokens N] [--max-bs N]
                      [--disable-cuda-graph] [--attention-backend NAME]
"""

from __future__ import annotations

import argparse
import json
import time


def output_lengths(requests: int) -> list[int]:
    """Exact output lengths, all different enough that decode batches shrink one by one."""
    return [6 + (i * 7) % 53 for i in range(requests)]


def prompts(requests: int, prompt_tokens: int) -> list[list[int]]:
    """Token-id prompts that share no prefix (the radix cache finds nothing to reuse)."""
    return [[(7 * i + 13 * j) % 4000 + 10 for j in range(prompt_tokens)] for i in range(requests)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--prompt-tokens", type=int, default=8)
    parser.add_argument("--max-bs", type=int, default=None, help="cuda_graph_max_bs_decode")
    parser.add_argument("--disable-cuda-graph", action="store_true")
    parser.add_argument("--attention-backend", default="fa3")
    args = parser.parse_args()

    import sglang

    options = dict(model_path=args.model, skip_tokenizer_init=True, attention_backend=args.attention_backend,
                   sampling_backend="pytorch", mem_fraction_static=0.3, random_seed=0, log_level="info",
                   disable_cuda_graph=args.disable_cuda_graph,
                   # one "Decode batch" log line per decode batch (its rows): SGLang's own account
                   decode_log_interval=1)
    if args.max_bs:
        options["cuda_graph_max_bs_decode"] = args.max_bs
    started = time.time()
    engine = sglang.Engine(**options)
    ready = time.time()
    lengths = output_lengths(args.requests)
    params = [{"max_new_tokens": n, "ignore_eos": True, "temperature": 0.0} for n in lengths]
    outputs = engine.generate(input_ids=prompts(args.requests, args.prompt_tokens), sampling_params=params)
    done = time.time()
    engine.shutdown()
    produced = [len(o["output_ids"]) for o in outputs]
    meta = [o.get("meta_info", {}) for o in outputs]

    def meta_sum(key: str) -> int | None:
        values = [m.get(key) for m in meta]
        return None if any(v is None for v in values) else sum(values)

    report = {
        "sglang": sglang.__version__,
        "asked": {"requests": args.requests, "prompt_tokens": args.prompt_tokens * args.requests,
                  "output_tokens": sum(lengths), "lengths": lengths,
                  # the first output token comes out of the prefill forward: decode forwards are the rest
                  "decode_tokens": sum(lengths) - args.requests},
        "produced": {"output_tokens": sum(produced), "exact": produced == lengths},
        "engine": {"prompt_tokens": meta_sum("prompt_tokens"), "completion_tokens": meta_sum("completion_tokens"),
                   "cached_tokens": meta_sum("cached_tokens")},
        "seconds": {"start_to_ready": ready - started, "generate": done - ready},
        "options": {k: v for k, v in options.items() if k != "model_path"},
    }
    with open(args.out, "w") as out:
        json.dump(report, out, indent=1)
    print("offline report:", json.dumps(report["engine"]), json.dumps(report["produced"]), flush=True)


if __name__ == "__main__":
    main()
