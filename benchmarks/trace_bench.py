"""Trace benchmark: what ``replayscope trace`` adds to a program's replays and steps.

    python -m benchmarks.trace_bench [--presets 136m,1b] [--sizes 1,8,64] [--iters 200] [--json FILE]

Every figure is against the same program untraced, measured in the same process:

- host cost of one hooked ``CUDAGraph.replay`` inside a step, and of one traced step (the step
  wrapper, the step's mode and cause, ``Emitter.step``, CUDA-event timing when CUDA is in use),
  on any machine (with a stand-in graph object on CPU);
- with CUDA: a decode step of the runner's model presets (copy the batch into static buffers,
  replay the graph captured for its size) traced against untraced. Two ways: the median step
  time host-timed with a synchronise after each step (every host microsecond shows), and the
  mean step time over a run of steps with one synchronise at the end (as a serving loop runs).
  The hooks are put on and taken off between rounds, so both sides share any drift.
  Target: the traced step within 1 % of the untraced one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import types

import torch

from runner.trace.hooks import Patches, install_cuda_graph_hooks
from runner.trace.recipes import step_wrapper, tensor_batch
from runner.trace.settings import TraceSettings
from runner.trace.tracer import Tracer


class NullSink:
    def open(self, run):
        pass

    def write(self, events):
        pass

    def close(self):
        pass


def new_tracer() -> Tracer:
    return Tracer(TraceSettings(trace_id="bench", name="bench"), make_sink=lambda run_id: NullSink())


class StandInGraph:
    """A CUDA graph's methods, doing nothing: what the hooks cost on the host, alone."""

    def capture_begin(self, pool=None, capture_error_mode="global"):
        pass

    def capture_end(self):
        pass

    def replay(self):
        pass

    def pool(self):
        return (0, 1)


def _per_call_us(fn, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls * 1e6


def host_costs(calls: int = 200_000) -> dict[str, float]:
    """µs added per hooked replay (inside a step) and per traced step, host side."""
    graph = StandInGraph()
    tokens = torch.zeros(8, 1, dtype=torch.long)

    def step(tokens):
        graph.replay()
        return tokens

    plain_replay = _per_call_us(graph.replay, calls)
    plain_step = _per_call_us(lambda: step(tokens), calls // 4)
    tracer, patches = new_tracer(), Patches()
    install_cuda_graph_hooks(tracer, types.SimpleNamespace(CUDAGraph=StandInGraph), patches)
    try:
        bs = 8
        graph.capture_begin()          # the tracer reads the size from this frame's ``bs``
        graph.capture_end()
        tracer.step_begin("decode", bs, bs)
        hooked_replay = _per_call_us(graph.replay, calls)
        tracer.step_end()
        traced = step_wrapper(tracer, step, tensor_batch, "bench")
        traced_step = _per_call_us(lambda: traced(tokens), calls // 4)
    finally:
        patches.remove()
        tracer.close()
    return {"replay_us": plain_replay, "hooked_replay_us": hooked_replay,
            "replay_added_us": hooked_replay - plain_replay, "step_us": plain_step,
            "traced_step_us": traced_step, "step_added_us": traced_step - plain_step,
            "cuda_events": torch.cuda.is_initialized()}


def synced_ms(fn, iters: int) -> list[float]:
    times = []
    for _ in range(iters):
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - started) * 1e3)
    return times


def mean_ms(fn, iters: int) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / iters * 1e3


def capture_sizes(model, static: dict[str, torch.Tensor], sizes: list[int]):
    """One graph per size, largest first, one pool (the way the engines capture)."""
    pool = torch.cuda.graph_pool_handle()
    graphs, outputs = {}, {}
    for bs in sorted(sizes, reverse=True):
        views = {name: t[:bs] for name, t in static.items()}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                model(**views)
        torch.cuda.current_stream().wait_stream(side)
        graphs[bs] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[bs], pool=pool):
            outputs[bs] = model(**views)
    torch.cuda.synchronize()
    return graphs, outputs


def bench_preset(preset: str, sizes: list[int], iters: int, seq_len: int, rounds: int = 5) -> list[dict]:
    from runner.model import ModelArgs, Transformer

    args = ModelArgs.from_preset(preset)
    model = Transformer.random(args, seed=0, device="cuda", dtype=torch.bfloat16)
    max_bs = max(sizes)
    model.setup_caches(num_slots=max_bs + 1, max_seq_len=seq_len)

    def forward(tokens, positions, slots):
        return model(tokens, positions, slots).argmax(-1)

    static = {"tokens": torch.zeros(max_bs, 1, dtype=torch.long, device="cuda"),
              "positions": torch.zeros(max_bs, 1, dtype=torch.long, device="cuda"),
              "slots": torch.full((max_bs,), max_bs, dtype=torch.long, device="cuda")}
    tracer, patches = new_tracer(), Patches()
    rows = []
    with torch.inference_mode():
        install_cuda_graph_hooks(tracer, torch.cuda.graphs, patches)   # the captures are traced too
        graphs, outputs = capture_sizes(forward, static, sizes)
        patches.remove()

        def step(tokens, positions, slots):
            bs = tokens.shape[0]
            static["tokens"][:bs].copy_(tokens, non_blocking=True)
            static["positions"][:bs].copy_(positions, non_blocking=True)
            static["slots"][:bs].copy_(slots, non_blocking=True)
            graphs[bs].replay()
            return outputs[bs][:bs]

        traced_step = step_wrapper(tracer, step, tensor_batch, "bench")
        for bs in sizes:
            inputs = {"tokens": torch.randint(1, args.vocab_size, (bs, 1), device="cuda"),
                      "positions": torch.randint(0, seq_len - 1, (bs, 1), device="cuda"),
                      "slots": torch.randperm(max_bs, device="cuda")[:bs]}
            plain, traced = [], []
            plain_mean, traced_mean = [], []
            for _ in range(rounds):
                plain += synced_ms(lambda: step(**inputs), iters // rounds)
                plain_mean.append(mean_ms(lambda: step(**inputs), iters))
                install_cuda_graph_hooks(tracer, torch.cuda.graphs, patches)
                traced += synced_ms(lambda: traced_step(**inputs), iters // rounds)
                traced_mean.append(mean_ms(lambda: traced_step(**inputs), iters))
                patches.remove()
            row = {"preset": preset, "bs": bs, "untraced_ms": statistics.median(plain),
                   "traced_ms": statistics.median(traced),
                   "untraced_mean_ms": statistics.median(plain_mean),
                   "traced_mean_ms": statistics.median(traced_mean)}
            row["ratio_synced"] = row["traced_ms"] / row["untraced_ms"]
            row["ratio_mean"] = row["traced_mean_ms"] / row["untraced_mean_ms"]
            rows.append(row)
    tracer.close()
    steps = tracer.steps
    assert tracer.modes["graph"] == steps, tracer.modes          # every traced step replayed its graph
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="136m,1b")
    parser.add_argument("--sizes", default="1,8,64")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--json", help="also write the figures as JSON to this file")
    options = parser.parse_args(argv)
    if torch.cuda.is_available():
        torch.cuda.init()            # a traced step on a CUDA host times itself with CUDA events
    result = {"host": host_costs(), "torch": torch.__version__}
    h = result["host"]
    print(f"host: hooked replay {h['hooked_replay_us']:.2f} us (+{h['replay_added_us']:.2f} us over "
          f"{h['replay_us']:.2f}); traced step {h['traced_step_us']:.2f} us (+{h['step_added_us']:.2f} us "
          f"over {h['step_us']:.2f}){'; CUDA-event timing' if h['cuda_events'] else ''}")
    if not torch.cuda.is_available():
        print("no CUDA device: traced vs untraced decode steps need a GPU")
    else:
        result["device"] = torch.cuda.get_device_name()
        result["rows"] = []
        sizes = [int(s) for s in options.sizes.split(",")]
        for preset in options.presets.split(","):
            result["rows"] += bench_preset(preset, sizes, options.iters, options.seq_len)
            torch.cuda.empty_cache()
        print(f"\n{result['device']}, torch {torch.__version__}, bf16, KV cache {options.seq_len} positions; "
              f"decode step = copy into static buffers + replay")
        print(f"{'preset':>6} {'bs':>4} {'untraced':>9} {'traced':>9} {'ratio':>7}   "
              f"{'untraced':>9} {'traced':>9} {'ratio':>7}")
        print(f"{'':>11} {'median ms, synchronised each step':>35}   {'mean ms, one synchronise':>27}")
        for r in result["rows"]:
            print(f"{r['preset']:>6} {r['bs']:>4} {r['untraced_ms']:9.3f} {r['traced_ms']:9.3f} "
                  f"{r['ratio_synced']:7.4f}   {r['untraced_mean_ms']:9.3f} {r['traced_mean_ms']:9.3f} "
                  f"{r['ratio_mean']:7.4f}")
        worst = max(max(r["ratio_synced"], r["ratio_mean"]) for r in result["rows"])
        result["worst_ratio"] = worst
        print(f"worst traced/untraced: {worst:.4f} (target <= 1.01)")
    if options.json:
        with open(options.json, "w") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
