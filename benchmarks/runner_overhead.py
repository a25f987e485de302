"""The graph runner's own host time per step, read step by step against the bare loop.

    python -m benchmarks.runner_overhead [--presets 136m,1b] [--sizes 1,8,64] [--blocks 300] [--block-steps 12]
                                         [--evict-mib N] [--json FILE]

``benchmarks.runner_bench`` pairs whole calls, a few hundred of them, and reads the host time a
step adds to about ±1–2 µs on a host whose speed moves between calls. This reads it in one loop,
step by step: in each block the bare copy-and-replay loop (``runner_bench.bare_loop``) and
``GraphRunner.step`` take turns call by call (``perf_counter_ns`` around each call; which of the
two goes first alternates block by block), then one synchronise, left out of the time. Both sides
see the same host speed, the same GPU queue and the same caches. A block is short (12 calls of
each by default): the host runs ahead of the GPU without filling its queue, else each launch would
wait for room and the reading be the GPU's step time (blocks of 100 read 1.4–3.7 ms a call on the
H200). Each side's figures:

- ``after a synchronise``: the first call of a block (from the blocks where that side went first);
  with ``--evict-mib N``, N MiB of host memory are written between the synchronise and that call, so
  that it finds the host's caches cold (what a step after a long wait, or after other work of the
  program, finds: the runner's code and objects read from memory);
- ``back to back``: every later call, the runner's ``untimed`` and ``timed`` steps apart (a step is
  timed when its route's count is a multiple of the clock's ``every``: 1 in 32 by default on CUDA;
  on the CPU every step is timed, on the host), and over a timing ``cycle`` (``every - 1`` untimed
  steps and a timed one: what a step adds on average).

``added`` is the runner's median less the bare loop's median, each kind of step apart; ``paired``
reads the same back-to-back untimed steps (on the CPU, where every step is timed, the timed ones)
call by call: each of the runner's calls less the bare
call beside it in its pair, the median of those differences in the blocks where the runner went
first and in those where it went second, averaged (which of the two goes first costs or saves
something of its own; the average cancels it), with ``paired spread`` the half-distance between
the 25th and 75th percentiles of the differences. A drift of the host's speed between calls far
apart moves both sides' medians; the pair's two calls are a few µs apart. Three sides take turns block by block: the runner as it runs (a route's fit
check decides whether inputs fit: ``replayscope.runner.fit_checks``), the same runner matching
every step's inputs in full (no fit checks: what the fit check saves), and the bare loop against
itself (``floor``: what the reading gives for no difference). On CUDA the preset's model, as
``runner_bench`` builds it, its events written by a writer process to /dev/null; without CUDA
the static backend with a trivial step (no synchronise).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable

import torch

from benchmarks.harness import NullSink, write_json
from benchmarks.runner_bench import RUN, bare_loop, cpu_batch, decode_batch, decode_inputs, decode_model
from replayscope.contract.sinks import JsonlSink
from replayscope.runner import runner_core
from replayscope.runner.emitter import Emitter
from replayscope.runner.fit_checks import fit_check_maker
from replayscope.runner.graphs import GraphRunner
from replayscope.runner.plan import CapturePlan

SIDES = ("fit checks", "full match", "floor")
clock = time.perf_counter_ns


def use_fit_checks(runner: GraphRunner, on: bool) -> None:
    """The compiled core with its fit checks (as loaded) or without (every step matched in full)."""
    if runner_core.COMPILED is None:
        return
    runner_core.configure(runner_core.COMPILED, fit_checks=on)
    if not on:
        for route in runner._routes.plain.values():
            route.fit_check = None


def read_block(first: Callable[[], object], second: Callable[[], object], steps: int,
               timed_next: Callable[[], bool]) -> tuple[list[int], list[int], list[bool]]:
    """``steps`` calls of each, taking turns (first, second, first...), each timed in ns; whether
    each of the runner's steps was timed (``timed_next`` read before the pair)."""
    a, b, timed = [], [], []
    for _ in range(steps):
        timed.append(timed_next())
        t0 = clock()
        first()
        t1 = clock()
        second()
        t2 = clock()
        a.append(t1 - t0)
        b.append(t2 - t1)
    return a, b, timed


def paired(differences: dict[bool, list[int]]) -> tuple[float, float]:
    """µs: the mean of the two orders' medians of the runner's call less the bare call beside it,
    and half the interquartile range of all the differences (nan without both orders)."""
    if not differences[True] or not differences[False]:
        return float("nan"), float("nan")
    quartiles = statistics.quantiles(differences[True] + differences[False], n=4)
    middle = (statistics.median(differences[True]) + statistics.median(differences[False])) / 2
    return middle / 1000, (quartiles[2] - quartiles[0]) / 2000


def summary(bare: dict[str, list[int]], runner: dict[str, list[int]], every: int,
            differences: dict[bool, list[int]]) -> dict[str, float]:
    """µs added per step (median less median), each kind of step apart, and over a timing cycle
    (``every - 1`` untimed steps and a timed one); the untimed steps read in pairs; the sides' medians."""
    def med(values):
        return statistics.median(values) / 1000 if values else float("nan")

    paired_us, spread_us = paired(differences)

    untimed = med(runner["untimed"]) - med(bare["back_to_back"])
    timed = med(runner["timed"]) - med(bare["back_to_back"])
    return {"added_after_sync_us": med(runner["after_sync"]) - med(bare["after_sync"]),
            "added_untimed_us": untimed, "added_timed_us": timed,
            "added_cycle_us": (untimed if not runner["timed"] else timed if not runner["untimed"]
                               else ((every - 1) * untimed + timed) / every),
            "added_untimed_paired_us": paired_us, "paired_spread_us": spread_us,
            "bare_us": med(bare["back_to_back"]), "runner_untimed_us": med(runner["untimed"]),
            "timed_steps": len(runner["timed"]), "steps": len(runner["untimed"]) + len(runner["timed"])}


def evictor(mib: int) -> Callable[[], None] | None:
    """Writes ``mib`` MiB of host memory (the caches then hold that, not the loops' code and data); None for 0."""
    if mib <= 0:
        return None
    junk = torch.zeros(mib * 2**20 // 4, dtype=torch.float32)
    return lambda: junk.add_(1.0)


def measure(runner: GraphRunner, bare: Callable[[], object], inputs: dict[str, torch.Tensor], stage: str,
            blocks: int, block_steps: int, sync: Callable[[], None],
            evict: Callable[[], object] | None = None) -> dict[str, dict[str, float]]:
    """The three sides, block by block, for one runner and batch: a summary per side (``evict``:
    called after each block's synchronise, before its first call)."""
    step = (lambda: runner.step(inputs))
    route_count = None

    def timed_next() -> bool:
        return route_count is not None and route_count[0] % runner._clock.every == 0

    kinds = ("after_sync", "back_to_back", "untimed", "timed")
    readings = {side: ({k: [] for k in kinds}, {k: [] for k in kinds}) for side in SIDES}
    # the runner's call less the bare call beside it, by kind of step and whether the runner went first
    differences = {side: {kind: {True: [], False: []} for kind in ("untimed", "timed")} for side in SIDES}
    try:
        for block in range(blocks):
            side = SIDES[block % len(SIDES)]
            use_fit_checks(runner, side != "full match")
            candidate = bare if side == "floor" else step
            candidate()                                  # a step to make the route (and its check) before timing
            bare()
            if route_count is None and side != "floor":
                route_count = runner._routes.plain[(stage, len(inputs["slots"]))].count
            sync()
            if evict is not None:
                evict()
            runner_first = (block // len(SIDES)) % 2 == 1
            first, second = (candidate, bare) if runner_first else (bare, candidate)
            a, b, timed = read_block(first, second, block_steps, timed_next if side != "floor" else (lambda: False))
            cand, base = (a, b) if runner_first else (b, a)
            bare_side, runner_side = readings[side]
            (runner_side if runner_first else bare_side)["after_sync"].append(a[0])
            bare_side["back_to_back"] += base[1:]
            for value, beside, was_timed in zip(cand[1:], base[1:], timed[1:]):
                kind = "timed" if was_timed else "untimed"
                runner_side[kind].append(value)
                differences[side][kind][runner_first].append(value - beside)
            sync()
    finally:
        use_fit_checks(runner, True)
    return {side: summary(*readings[side], runner._clock.every,
                          differences[side]["untimed" if readings[side][1]["untimed"] else "timed"])
            for side in SIDES}


def cuda_rows(presets: list[str], sizes: list[int], blocks: int, block_steps: int, seq_len: int,
              evict_mib: int = 0) -> list[dict]:
    rows = []
    for preset in presets:
        max_bs = max(sizes)
        args, step = decode_model(preset, max_bs, seq_len)
        emitter = Emitter(JsonlSink(os.devnull), RUN).start()
        runner = GraphRunner(step, decode_inputs(max_bs), CapturePlan(tuple(sorted(set(sizes)))), backend="cuda",
                             device="cuda", emitter=emitter, progress=False)
        with torch.inference_mode():
            runner.capture()
            for bs in sizes:
                inputs = decode_batch(args, bs, max_bs, seq_len)
                sides = measure(runner, bare_loop(runner, bs, inputs), inputs, runner.stage, blocks, block_steps,
                                torch.cuda.synchronize, evictor(evict_mib))
                rows += [{"preset": preset, "bs": bs, "side": side, **figures} for side, figures in sides.items()]
        emitter.close()
        del runner, step
        torch.cuda.empty_cache()
    return rows


def cpu_rows(sizes: list[int], blocks: int, block_steps: int, evict_mib: int = 0) -> list[dict]:
    """The static backend with a trivial step: both loops copy into the same buffers and call it."""
    def step(tokens, positions, slots):
        return tokens, positions

    emitter = Emitter(NullSink(), RUN, flush_interval_s=0.05).start()
    runner = GraphRunner(step, decode_inputs(max(sizes)), CapturePlan(tuple(sorted(set(sizes)))), backend="static",
                         device="cpu", emitter=emitter, progress=False)
    runner.capture()
    rows = []
    try:
        for bs in sizes:
            inputs = cpu_batch(bs)
            sides = measure(runner, bare_loop(runner, bs, inputs), inputs, runner.stage, blocks, block_steps,
                            lambda: None, evictor(evict_mib))
            rows += [{"preset": "static", "bs": bs, "side": side, **figures} for side, figures in sides.items()]
    finally:
        emitter.close()
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| preset | bs | side | added untimed µs | paired (± spread) µs, untimed (CPU: timed) | added timed µs | added per step (cycle) µs | "
             "added after a sync µs | bare µs | steps (timed) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['preset']} | {r['bs']} | {r['side']} | {r['added_untimed_us']:.2f} | "
                     f"{r['added_untimed_paired_us']:.2f} (± {r['paired_spread_us']:.2f}) | "
                     f"{r['added_timed_us']:.2f} | {r['added_cycle_us']:.2f} | {r['added_after_sync_us']:.2f} | "
                     f"{r['bare_us']:.2f} | {r['steps']} ({r['timed_steps']}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="136m,1b")
    parser.add_argument("--sizes", default="1,8,64")
    parser.add_argument("--blocks", type=int, default=300, help="blocks per size, the three sides taking turns")
    parser.add_argument("--block-steps", type=int, default=12,
                        help="calls of each side per block: few enough that the GPU's queue never fills (the host "
                             "would wait on it in each launch, and read the GPU's time)")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--evict-mib", type=int, default=0,
                        help="MiB of host memory written after each block's synchronise: its first calls find the "
                             "caches cold")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    options = parser.parse_args(argv)
    sizes = [int(s) for s in options.sizes.split(",")]
    if torch.cuda.is_available():
        rows = cuda_rows(options.presets.split(","), sizes, options.blocks, options.block_steps, options.seq_len,
                         options.evict_mib)
        where = f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
    else:
        rows = cpu_rows(sizes, options.blocks, options.block_steps, options.evict_mib)
        where = f"CPU (static backend, trivial step), torch {torch.__version__}"
    if options.evict_mib:
        where += f"; {options.evict_mib} MiB written before each block's first call"
    print(f"{where}; step core {runner_core.CORE}; fit checks: {'on' if fit_check_maker() else 'not available'}")
    print(table(rows))
    if options.json:
        write_json(options.json, {"where": where, "core": runner_core.CORE, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
