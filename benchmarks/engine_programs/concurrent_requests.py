"""What the engines' request clients (``vllm_programs/client.py``, ``sglang_programs/client.py``)
do the same way: JSON POST and text GET, the exact output lengths asked for, requests sent some at
once and some while those run, the report of what was asked and produced, and the files a client
leaves (``metrics.txt``: the engine's ``/metrics`` after its requests; ``client.json``: the
report). Each client keeps its engine's request body and endpoint. Standard library only: the
clients run as plain scripts in the engine's Python and import this by its path
(``engine_programs.concurrent_requests``, their folder's parent appended to ``sys.path``).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.request
from typing import Callable


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


def send_all(send: Callable[[int, int], int], requests: int, later: int) -> tuple[list[int], dict[int, int],
                                                                                  list[str], float]:
    """``send(i, length)`` (the tokens request ``i`` produced) for ``requests`` at once, then
    ``later`` more while they run, each in its own thread: the lengths asked, the tokens each
    request produced, the errors (``request i: ...``) and the seconds from the first to the last."""
    lengths = output_lengths(requests + later)
    produced: dict[int, int] = {}
    errors: list[str] = []

    def one(i: int) -> None:
        try:
            produced[i] = send(i, lengths[i])
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
    return lengths, produced, errors, time.time() - started


def report(lengths: list[int], prompt_tokens: int, produced: dict[int, int], errors: list[str], seconds: float,
           **counted: int) -> dict:
    """What was asked (requests, prompt and output tokens, the engine's own ``counted`` figures,
    the lengths) and produced (output tokens; ``exact``: every request got its length), the errors,
    the seconds and requests per second."""
    total = len(lengths)
    return {"asked": {"requests": total, "prompt_tokens": prompt_tokens * total, "output_tokens": sum(lengths),
                      **counted, "lengths": lengths},
            "produced": {"output_tokens": sum(produced.values()),
                         "exact": [produced.get(i) for i in range(total)] == lengths},
            "errors": errors, "seconds": seconds, "requests_per_s": total / seconds if seconds else None}


def add_round_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--later", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=12)


def write_outputs(url: str, out_dir: str, result: dict) -> None:
    """``/metrics`` into ``metrics.txt``, the report into ``client.json``, and a line saying how it went."""
    with open(f"{out_dir}/metrics.txt", "w") as out:
        out.write(get_text(f"{url}/metrics"))
    with open(f"{out_dir}/client.json", "w") as out:
        json.dump(result, out, indent=1)
    print("client:", json.dumps({k: v for k, v in result.items() if k != "asked"}))
