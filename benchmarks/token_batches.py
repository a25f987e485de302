"""A vLLM-shaped step sequence: token-batched steps, decode tokens and prefill chunks mixed.

vLLM V1's scheduler (chunked prefill) fills each step with one token per running request,
then prompt chunks of the waiting requests up to ``max_num_batched_tokens``; its graphs are
keyed by the step's token count. A step holding any prompt tokens is a ``mixed`` one, a step
of decode tokens only a ``decode`` one (vLLM's uniform decode batch). Requests arrive at
random (Poisson, at a rate that swings over ``burst_period`` steps as the runner's ``mixed``
workload does), with prompt and output lengths drawn uniformly.

Pure and seeded: the advisor benchmark runs each step's token count as rows of this runner's
decode step (a token a row, each at its own cache position), timed, and advises on it.
"""

from __future__ import annotations

import math
import random
from typing import NamedTuple


class TokenStep(NamedTuple):
    stage: str              # decode | mixed
    tokens: int             # decode tokens + prompt tokens in the step


def token_steps(steps: int, seed: int = 0, *, max_num_batched_tokens: int = 512, max_num_seqs: int = 64,
                arrivals_per_step: float = 0.25, burst_period: int = 400, prompt_len: tuple[int, int] = (32, 600),
                output_len: tuple[int, int] = (16, 160)) -> list[TokenStep]:
    """``steps`` steps of a chunked-prefill scheduler (see the module's docstring)."""
    if max_num_batched_tokens < max_num_seqs:
        raise ValueError("max_num_batched_tokens must hold a decode token of every running request")
    rng = random.Random(seed)
    running: list[int] = []         # output tokens left per running request
    waiting: list[list[int]] = []   # [prompt tokens left, output tokens] per request being prefilled
    out: list[TokenStep] = []
    for i in range(steps):
        rate = arrivals_per_step * (1 + 0.8 * math.sin(2 * math.pi * i / burst_period))
        for _ in range(_poisson(rng, rate)):
            waiting.append([rng.randint(*prompt_len), rng.randint(*output_len)])
        decode = len(running)
        budget = max_num_batched_tokens - decode
        prefill, admitted = 0, 0
        for request in waiting:
            if budget <= 0 or decode + admitted >= max_num_seqs:
                break
            chunk = min(request[0], budget)
            request[0] -= chunk
            prefill += chunk
            budget -= chunk
            admitted += 1
        running = [left - 1 for left in running if left > 1]
        finished = [r for r in waiting if r[0] == 0]
        waiting = [r for r in waiting if r[0] > 0]
        running += [r[1] for r in finished]          # the prompt's last chunk gives the first output token
        if decode + prefill:
            out.append(TokenStep("mixed" if prefill else "decode", decode + prefill))
    return out


def _poisson(rng: random.Random, rate: float) -> int:
    """Knuth's method: fine for the small rates of one step."""
    limit, k, p = math.exp(-rate), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k
