"""Requests of exact lengths to a running ``python -m sglang.launch_server`` (started with
--skip-tokenizer-init and --enable-metrics), some at once and some while others run, through its
native ``/generate`` (token ids in, ``output_ids`` out); ``/metrics`` before and after, so the
engine's counters can be read for these requests alone (the server's own warm-up request is in
the first). Standard library only.

    python client.py URL OUT_DIR [--requests N] [--later N] [--prompt-tokens N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))      # engine_programs/, beside this folder
from engine_programs.concurrent_requests import (add_round_options, get_text, output_lengths, post,  # noqa: E402
                                                 report, send_all, write_outputs)

__all__ = ["output_lengths", "run", "main"]


def run(url: str, requests: int, later: int, prompt_tokens: int) -> dict:
    def send(i: int, length: int) -> int:
        body = {"input_ids": [(13 * i + 7 * j) % 4000 + 10 for j in range(prompt_tokens)],
                "sampling_params": {"max_new_tokens": length,
                                    "ignore_eos": True, "temperature": 0.0}}
        answer = post(f"{url}/generate", body)
        return len(answer["output_ids"])

    lengths, produced, errors, seconds = send_all(send, requests, later)
    return report(lengths, prompt_tokens, produced, errors, seconds, decode_tokens=sum(lengths) - requests - later)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("out_dir")
    add_round_options(parser)
    args = parser.parse_args()
    with open(f"{args.out_dir}/metrics-before.txt", "w") as out:
        out.write(get_text(f"{args.url}/metrics"))
    result = run(args.url, args.requests, args.later, args.prompt_tokens)
    time.sleep(1.0)                 # the scheduler's counters are pushed to /metrics asynchronously
    write_outputs(args.url, args.out_dir, result)


if __name__ == "__main__":
    main()
