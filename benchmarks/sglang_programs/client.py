"""Requests of exact lengths to a running ``python -m sglang.launch_server`` (started with
--skip-tokenizer-init and --enable-metrics), some at once and some while others run, through its
native ``/generate`` (token ids in, ``output_ids`` out); ``/metrics`` before and after, so the
engine's counters can be read for these requests alone (the server's own warm-up request is in
the first). Standard library only.

    python client.py URL OUT_DIR [--requests N] [--later N] [--prompt-tokens N]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.request


def post(url: str, body: dict, timeout: float = 300) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read())


def get_text(url: str, timeout: float = 30) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return answer.read().decode()


def output_lengths(requests: int) -> list[int]:
    return [4 + (i * 11) % 47 for i in range(requests)]


def run(url: str, requests: int, later: int, prompt_tokens: int) -> dict:
    lengths = output_lengths(requests + later)
    produced: dict[int, int] = {}
    errors: list[str] = []

    def one(i: int) -> None:
        body = {"input_ids": [(13 * i + 7 * j) % 4000 + 10 for j in range(prompt_tokens)],
                "sampling_params": {"max_new_tokens": lengths[i],
                                    "ignore_eos": True, "temperature": 0.0}}
        try:
            answer = post(f"{url}/generate", body)
            produced[i] = len(answer["output_ids"])
        except Exception as error:  # noqa: BLE001
            errors.append(f"request {i}: {error}")

    started = time.time()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(requests)]
    for thread in threads:
        thread.start()
    time.sleep(0.05)
    for i in range(requests, requests + later):          # these arrive while the others run
        thread = threading.Thread(target=one, args=(i,))
        thread.start()
        threads.append(thread)
        time.sleep(0.01)
    for thread in threads:
        thread.join()
    seconds = time.time() - started
    total = requests + later
    return {"asked": {"requests": total, "prompt_tokens": prompt_tokens * total, "output_tokens": sum(lengths),
                      "decode_tokens": sum(lengths) - total, "lengths": lengths},
            "produced": {"output_tokens": sum(produced.values()),
                         "exact": [produced.get(i) for i in range(total)] == lengths},
            "errors": errors, "seconds": seconds, "requests_per_s": total / seconds if seconds else None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("out_dir")
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--later", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=12)
    args = parser.parse_args()
    with open(f"{args.out_dir}/metrics-before.txt", "w") as out:
        out.write(get_text(f"{args.url}/metrics"))
    report = run(args.url, args.requests, args.later, args.prompt_tokens)
    time.sleep(1.0)                 # the scheduler's counters are pushed to /metrics asynchronously
    with open(f"{args.out_dir}/metrics.txt", "w") as out:
        out.write(get_text(f"{args.url}/metrics"))
    with open(f"{args.out_dir}/client.json", "w") as out:
        json.dump(report, out, indent=1)
    print("client:", json.dumps({k: v for k, v in report.items() if k != "asked"}))


if __name__ == "__main__":
    main()
