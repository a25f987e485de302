"""What timing a step with CUDA events costs, on the host and on the GPU, part by part (CUDA only).

    python -m benchmarks.step_timing_bench [--rounds 9] [--launches 5000] [--out DIR]
    python -m benchmarks.step_timing_bench --width 2048 --layers 128 --sync-every 12    # the GPU behind

A graph of 8 bf16 1024-wide layers (batch 8, the step of a host-bound decode loop) is replayed
back to back, one synchronise per 100 launches, as a serving loop runs it. With a larger graph
(``--width``, ``--layers``: 128 layers of 2048 took the GPU 0.77 ms a launch on an H200) and a
synchronise every few launches (``--sync-every``), the GPU runs behind the host within each block,
as in a serving loop whose step the GPU sets the pace of: what a record costs the host then. Each side below is
that loop with one more thing per launch; every side runs once per round, the order rotating
round by round (``benchmarks.pairing.rotated``). Two figures per side, each the median over the
rounds with its spread (largest minus smallest round) and what it adds to the bare loop:

- ``host µs``: the launch loop alone, each block of 100 launches timed up to its synchronise:
  what the side costs the step's thread (the figure a host-bound loop pays);
- ``wall µs``: the loop with its synchronises, per launch: what the GPU pays too (a timing event
  makes the GPU write a timestamp once the work before it is done).

On the step's thread (what a timed step adds before and after its launch):
- ``host clock``: ``time.perf_counter()`` before and after (a CPU step's timing);
- ``torch events, timing``: two timing-enabled ``torch.cuda.Event`` recorded around the launch;
  ``..., start only`` / ``..., end only``: one of the two; ``torch events, no timing``: the same
  pair made without timing;
- ``CudaClock pair``: ``replayscope.runner.timing.CudaClock``'s ``record_start`` / ``stop`` (what
  the runner and the trace call on a timed step), the pair back to its pool at once; ``..., pool
  empty``: a new pair per launch, as ``record_start`` makes one while every pooled pair waits to be
  read by the emitter's thread (CUDA makes an event at its first record);
- ``driver records``: the same two records as direct ``cuEventRecord`` calls through ctypes
  (the driver's own cost, plus ctypes'), and ``ctypes floor``: two ctypes calls that do nothing
  on the GPU (``cuCtxGetCurrent``), to take ctypes' own cost out.

On the emitter's thread (what reading a timed step costs, under the GIL the step loop needs):
- ``query + elapsed_time per timing``: ``CudaTiming.ready()``, ``seconds()`` and ``release()`` on
  a pair the GPU has passed, µs per timing (the flush thread does this once per timed step).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from typing import Callable

import torch

from benchmarks.harness import markdown_table, write_folder
from benchmarks.pairing import rotated
from replayscope.runner.timing import CudaClock, CudaTiming

SYNC_EVERY = 100        # launches between two synchronises, by default


def make_graph(width: int = 1024, layers: int = 8, batch: int = 8) -> torch.cuda.CUDAGraph:
    weights = [torch.randn(width, width, device="cuda", dtype=torch.bfloat16) / width ** 0.5 for _ in range(layers)]
    static = torch.randn(batch, width, device="cuda", dtype=torch.bfloat16)

    def forward():
        hidden = static
        for weight in weights:
            hidden = torch.nn.functional.linear(hidden, weight)
        return hidden

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            forward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward()
    torch.cuda.synchronize()
    return graph


def driver() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.cuCtxGetCurrent.argtypes = [ctypes.c_void_p]
    return lib


def sides(graph: torch.cuda.CUDAGraph, sync_every: int = SYNC_EVERY) -> dict[str, Callable[[int], tuple[float, float]]]:
    """Each side: ``launches`` launches back to back with its extra work, a synchronise every
    ``sync_every``; (host, wall) µs per launch."""
    replay = graph.replay
    stream = torch.cuda.current_stream()
    timed = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    untimed = [torch.cuda.Event() for _ in range(2)]
    for event in timed + untimed:
        event.record(stream)                     # made (CUDA creates an event on its first record)
    torch.cuda.synchronize()
    clock = CudaClock(torch.cuda.current_device(), every=1)
    lib = driver()
    raw_stream = ctypes.c_void_p(stream.cuda_stream)
    raw = [ctypes.c_void_p(e.cuda_event) for e in timed]
    context = ctypes.c_void_p()
    context_ref = ctypes.byref(context)
    perf = time.perf_counter

    sync = torch.cuda.synchronize

    def timed_blocks(launch: Callable[[], object], launches: int) -> tuple[float, float]:
        """(host µs, wall µs) per launch: the blocks between synchronises alone, and everything."""
        sync()
        started = block = perf()
        host = 0.0
        for i in range(launches):
            launch()
            if i % sync_every == sync_every - 1:
                host += perf() - block
                sync()
                block = perf()
        host += perf() - block
        sync()
        return host / launches * 1e6, (perf() - started) / launches * 1e6

    def loop(before: Callable[[], object] | None, after: Callable[[], object] | None) -> Callable[[int], tuple]:
        def launch():
            if before is not None:
                before()
            replay()
            if after is not None:
                after()
        return lambda launches: timed_blocks(launch, launches)

    def clock_launch():
        timing = clock.record_start()
        replay()
        clock.stop(timing)
        timing.release()

    def clock_pair(launches: int) -> tuple[float, float]:
        return timed_blocks(clock_launch, launches)

    def fresh_launch():
        timing = CudaTiming([])                  # what record_start makes when its pool is empty
        timing.stream = stream
        timing.start.record(stream)
        replay()
        timing.end.record(stream)

    return {
        "bare replay": loop(None, None),
        "host clock": loop(perf, perf),
        "torch events, timing": loop(lambda: timed[0].record(stream), lambda: timed[1].record(stream)),
        "torch events, timing, start only": loop(lambda: timed[0].record(stream), None),
        "torch events, timing, end only": loop(None, lambda: timed[1].record(stream)),
        "torch events, no timing": loop(lambda: untimed[0].record(stream), lambda: untimed[1].record(stream)),
        "CudaClock pair": clock_pair,
        "CudaClock pair, pool empty": lambda launches: timed_blocks(fresh_launch, launches),
        "driver records (ctypes)": loop(lambda: lib.cuEventRecord(raw[0], raw_stream),
                                        lambda: lib.cuEventRecord(raw[1], raw_stream)),
        "ctypes floor": loop(lambda: lib.cuCtxGetCurrent(context_ref), lambda: lib.cuCtxGetCurrent(context_ref)),
    }


def reading_cost_us(timings: int = 2000, repeats: int = 5) -> list[float]:
    """µs per timing of what the flush thread does for one timed step the GPU has passed."""
    results = []
    for _ in range(repeats):
        pool: list = []
        pairs = [CudaTiming(pool) for _ in range(timings)]
        stream = torch.cuda.current_stream()
        for pair in pairs:
            pair.start.record(stream)
            pair.end.record(stream)
        torch.cuda.synchronize()
        started = time.perf_counter()
        for pair in pairs:
            if pair.ready():
                pair.seconds()
            pair.release()
        results.append((time.perf_counter() - started) / timings * 1e6)
    return results


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "spread": max(values) - min(values), "rounds": values}


def measure(rounds: int, launches: int, width: int = 1024, layers: int = 8, sync_every: int = SYNC_EVERY) -> dict:
    graph = make_graph(width, layers)
    named = sides(graph, sync_every)
    for run in named.values():                   # warm every path once
        run(200)
    samples = rotated(list(named.values()), [launches] * rounds)
    rows = {name: {"host": summary([host for host, _ in values]), "wall": summary([wall for _, wall in values])}
            for name, values in zip(named, samples)}
    for clock in ("host", "wall"):
        base = rows["bare replay"][clock]["median"]
        for row in rows.values():
            row[clock]["added"] = row[clock]["median"] - base
    reading = summary(reading_cost_us())
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rounds": rounds,
            "launches": launches, "width": width, "layers": layers, "sync_every": sync_every,
            "sides": rows, "reading_per_timing_us": reading}


def markdown(result: dict) -> str:
    caption = (f"{result['device']}, torch {result['torch']}: a graph of {result['layers']} layers "
               f"{result['width']} wide; µs per launch, {result['launches']} launches back to "
               f"back per round (a synchronise per {result['sync_every']}); host: the launch loop alone, wall: with the "
               f"synchronises; median of {result['rounds']} rounds, order rotating; spread: largest minus smallest "
               f"round; added: less the bare replay\n\n")

    def cells(row: dict, base: bool) -> list[str]:
        return [f"{row['median']:.2f}", f"{row['spread']:.2f}", "" if base else f"{row['added']:+.2f}"]
    rows = [[name, *cells(row["host"], name == "bare replay"), *cells(row["wall"], name == "bare replay")]
            for name, row in result["sides"].items()]
    reading = result["reading_per_timing_us"]
    rows.append(["query + elapsed_time + release, per timing (flush thread)", f"{reading['median']:.2f}",
                 f"{reading['spread']:.2f}", "", "", "", ""])
    return caption + markdown_table(["side", "host µs", "spread", "added", "wall µs", "spread", "added"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--launches", type=int, default=5000)
    parser.add_argument("--width", type=int, default=1024, help="the graph's layers' width")
    parser.add_argument("--layers", type=int, default=8, help="the graph's layers (one GEMM each)")
    parser.add_argument("--sync-every", type=int, default=SYNC_EVERY,
                        help="launches between two synchronises (a few, with a large graph: the GPU behind the host)")
    parser.add_argument("--out", default=None, help="folder for step_timing_bench.json and .md")
    options = parser.parse_args(argv)
    if min(options.width, options.layers, options.sync_every, options.rounds, options.launches) < 1:
        parser.error("--width, --layers, --sync-every, --rounds and --launches must be at least 1")
    if not torch.cuda.is_available():
        parser.error("needs CUDA: it measures CUDA events")
    result = measure(options.rounds, options.launches, options.width, options.layers, options.sync_every)
    text = markdown(result)
    print(text)
    write_folder(options.out, "step_timing_bench", result, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
