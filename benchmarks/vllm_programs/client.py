"""Requests of exact lengths to a running ``vllm serve`` (started with --skip-tokenizer-init),
some at once and some while others run; then its ``/metrics``. Standard library only.

    python client.py URL MODEL OUT_DIR [--requests N] [--later N] [--prompt-tokens N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))      # engine_programs/, beside this folder
from engine_programs.concurrent_requests import (add_round_options, output_lengths, post, report,  # noqa: E402
                                                 send_all, write_outputs)

__all__ = ["output_lengths", "run", "main"]


def run(url: str, model: str, requests: int, later: int, prompt_tokens: int) -> dict:
    def send(i: int, length: int) -> int:
        body = {"model": model, "prompt": [(13 * i + j) % 1000 + 1 for j in range(prompt_tokens)],
                "max_tokens": length, "min_tokens": length, "ignore_eos": True, "temperature": 0.0}
        answer = post(f"{url}/v1/completions", body)
        return int(answer["usage"]["completion_tokens"])

    lengths, produced, errors, seconds = send_all(send, requests, later)
    total = requests + later
    return report(lengths, prompt_tokens, produced, errors, seconds,
                  forward_tokens=prompt_tokens * total + sum(lengths) - total)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("model")
    parser.add_argument("out_dir")
    add_round_options(parser)
    args = parser.parse_args()
    result = run(args.url, args.model, args.requests, args.later, args.prompt_tokens)
    write_outputs(args.url, args.out_dir, result)


if __name__ == "__main__":
    main()
