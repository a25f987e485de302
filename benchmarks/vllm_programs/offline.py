"""An offline vLLM run (``LLM.generate``) of exact requests, writing what it asked for and what the
engine says about itself (its ``vllm:iteration_tokens_total`` histogram: one observation per engine
step) to a JSON file.

    python offline.py MODEL_DIR OUT.json [--max-num-seqs N] [--max-capture-size N] [--enforce-eager]
                      [--requests N] [--prompt-tokens N]
"""

from __future__ import annotations

import argparse
import json
import time


def output_lengths(requests: int) -> list[int]:
    """Exact output lengths, all different enough that decode batches shrink one by one."""
    return [6 + (i * 7) % 53 for i in range(requests)]


def engine_metrics(llm) -> dict:
    figures: dict = {}
    for metric in llm.get_metrics():
        name = metric.name
        if name == "vllm:iteration_tokens_total":
            figures["iteration_steps"] = int(metric.count)
            figures["iteration_tokens"] = int(metric.sum)
        elif name in ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:prompt_tokens_total",
                      "vllm:generation_tokens_total", "vllm:request_success", "vllm:request_success_total"):
            figures[name.removeprefix("vllm:").removesuffix("_total")] = \
                figures.get(name.removeprefix("vllm:").removesuffix("_total"), 0) + int(getattr(metric, "value", 0))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--max-capture-size", type=int, default=None)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--prompt-tokens", type=int, default=8)
    args = parser.parse_args()

    from vllm import LLM, SamplingParams

    started = time.time()
    options = dict(model=args.model, skip_tokenizer_init=True, max_num_seqs=args.max_num_seqs,
                   gpu_memory_utilization=0.25, disable_log_stats=False, enforce_eager=args.enforce_eager,
                   max_model_len=1024, seed=0)
    if args.max_capture_size:
        options["max_cudagraph_capture_size"] = args.max_capture_size
    llm = LLM(**options)
    ready = time.time()
    lengths = output_lengths(args.requests)
    prompts = [{"prompt_token_ids": [(7 * i + j) % 1000 + 1 for j in range(args.prompt_tokens)]}
               for i in range(args.requests)]
    params = [SamplingParams(max_tokens=n, min_tokens=n, ignore_eos=True, detokenize=False, temperature=0.0)
              for n in lengths]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    done = time.time()
    produced = [len(o.outputs[0].token_ids) for o in outputs]
    report = {
        "asked": {"requests": args.requests, "prompt_tokens": args.prompt_tokens * args.requests,
                  "output_tokens": sum(lengths), "lengths": lengths,
                  # the first output token comes out of the prefill forward: decode forwards are the rest
                  "forward_tokens": args.prompt_tokens * args.requests + sum(lengths) - args.requests},
        "produced": {"output_tokens": sum(produced), "exact": produced == lengths},
        "engine": engine_metrics(llm),
        "seconds": {"start_to_ready": ready - started, "generate": done - ready},
        "options": {k: v for k, v in options.items() if k != "model"},
    }
    with open(args.out, "w") as out:
        json.dump(report, out, indent=1)
    print("offline report:", json.dumps(report["engine"]), json.dumps(report["asked"]["forward_tokens"]))


if __name__ == "__main__":
    main()
