"""Two ways of running the same GPU step, compared call by call.

The hosts we are lent change speed within a run (other tenants, frequency): a block of
baseline calls followed by a block of candidate calls can differ by more than what the
candidate adds. ``paired`` alternates the two call by call (ABAB…, which goes first
alternating per pair) and reports the medians of the per-pair ratios and differences, so a
change of speed moves both sides alike, and the interquartile range of the differences (how
far apart single pairs land: the noise a median of them sits in). ``pipelined_ms`` runs many calls back to back with
one synchronise at the end: the GPU never waits for the host between steps, as in serving.
``paired_pipelined`` measures the host time of such back-to-back calls: short blocks of
calls, alternated block by block, each block's launch loop timed on the host before its
synchronise. ``rotated`` runs a sequence of items through several sides, the order of the
sides rotating item by item.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence, TypeVar

import torch

T = TypeVar("T")
X = TypeVar("X")


def alternated(baseline: Callable[[], T], candidate: Callable[[], T], pairs: int) -> tuple[list[T], list[T]]:
    """``pairs`` measurements of each side, taken alternately; which goes first alternates per pair."""
    base, cand = [], []
    for i in range(pairs):
        if i % 2:
            b, c = baseline(), candidate()
        else:
            c, b = candidate(), baseline()
        base.append(b)
        cand.append(c)
    return base, cand


def rotated(sides: Sequence[Callable[[X], T]], items: Sequence[X]) -> list[list[T]]:
    """Each item through every side, which side goes first rotating item by item (side ``j``
    first on items ``j``, ``j + n``, ...), as ``alternated`` does for two: results[side][item]."""
    n = len(sides)
    results: list[list[T]] = [[] for _ in sides]
    for i, item in enumerate(items):
        for k in range(n):
            side = (i + k) % n
            results[side].append(sides[side](item))
    return results


def timed_once(fn: Callable[[], object]) -> tuple[float, float]:
    """(step ms, synchronised after the call; host µs of the call alone, the synchronise outside it)."""
    started = time.perf_counter()
    fn()
    launched = time.perf_counter()
    torch.cuda.synchronize()
    ended = time.perf_counter()
    return (ended - started) * 1e3, (launched - started) * 1e6


def paired(baseline: Callable[[], object], candidate: Callable[[], object], pairs: int, *,
           around_candidate: Callable[[], object] | None = None, warmup: int = 10) -> dict[str, float]:
    """Medians over ``pairs`` alternated calls; ``around_candidate()`` (if given) is entered before
    each candidate call and its return value called after it, both outside the timed window
    (e.g. hooks put on and taken off)."""
    def run_candidate() -> tuple[float, float]:
        if around_candidate is None:
            return timed_once(candidate)
        undo = around_candidate()
        try:
            return timed_once(candidate)
        finally:
            undo()

    for _ in range(warmup):
        baseline()
        run_candidate()
    torch.cuda.synchronize()
    base, cand = alternated(lambda: timed_once(baseline), run_candidate, pairs)
    base_ms, base_us = [b[0] for b in base], [b[1] for b in base]
    cand_ms, cand_us = [c[0] for c in cand], [c[1] for c in cand]
    added_us = [c - b for b, c in zip(base_us, cand_us)]
    median = statistics.median
    quartiles = statistics.quantiles(added_us, n=4)
    return {"baseline_ms": median(base_ms), "candidate_ms": median(cand_ms),
            "ratio": median([c / b for b, c in zip(base_ms, cand_ms)]),
            "baseline_host_us": median(base_us), "candidate_host_us": median(cand_us),
            "added_host_us": median(added_us),
            "added_host_iqr_us": quartiles[2] - quartiles[0]}   # the spread of the per-pair differences


def pipelined_ms(fn: Callable[[], object], calls: int) -> float:
    """ms per call over ``calls`` calls with one synchronise at the end."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / calls * 1e3


def paired_pipelined(baseline: Callable[[], object], candidate: Callable[[], object], blocks: int,
                     per_block: int = 16) -> dict[str, float]:
    """Host µs per call when calls go back to back (no synchronise between them), as in serving.

    Blocks of ``per_block`` calls of each side alternate (which goes first alternating per
    pair); a block's figure is its launch loop's host time / ``per_block``, taken before the
    synchronise that ends it, so no call starts on an idle GPU right after a synchronise.
    Medians over ``blocks`` pairs of blocks, as ``paired``.
    """
    def block_us(fn: Callable[[], object]) -> float:
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(per_block):
            fn()
        launched = time.perf_counter()
        torch.cuda.synchronize()
        return (launched - started) / per_block * 1e6

    block_us(baseline)
    block_us(candidate)
    base_us, cand_us = alternated(lambda: block_us(baseline), lambda: block_us(candidate), blocks)
    median = statistics.median
    return {"baseline_host_us": median(base_us), "candidate_host_us": median(cand_us),
            "added_host_us": median([c - b for b, c in zip(base_us, cand_us)])}
