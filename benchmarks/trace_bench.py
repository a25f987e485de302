"""Trace benchmark: what ``replayscope trace`` adds to a program's replays and steps.

    python -m benchmarks.trace_bench [--presets 136m,1b] [--sizes 1,8,64] [--iters 200] [--json FILE]
    python -m benchmarks.trace_bench --compiled [--compiled-sizes 1,16] [--compiled-layers 32] [--iters 200]

Every figure is against the same program untraced, measured in the same process:

- host cost of one hooked ``CUDAGraph.replay`` inside a step, and of one traced step (the step
  wrapper, the step's mode and cause, ``Emitter.step``, CUDA-event timing when CUDA is in use:
  1 step in 8 per batch size by default, and every step), on any machine (with a stand-in
  graph object on CPU);
- with CUDA: a decode step of the runner's model presets (copy the batch into static buffers,
  replay the graph captured for its size) traced against untraced. Two ways: step times
  host-timed with a synchronise after each step (every host microsecond shows), traced and
  untraced alternating call by call, the hooks put on before each traced call and taken off
  after it (``benchmarks.pairing``: medians of the per-pair ratios); and the mean step time
  over a run of steps with one synchronise at the end (as a serving loop runs). The
  synchronised figure is also taken with every traced step timed.
- ``--compiled``: a model compiled with ``torch.compile(mode="reduce-overhead")`` (a stack of
  bf16 linear layers, about a 1B-parameter decode step's weight traffic at 32 layers) called at
  each size, traced with nothing to configure (each call of the CUDA-graph-tree function is a
  step, timed as the tracer does) against untraced, after both have recorded their graphs. The
  graph-tree manager binds a function's ``run`` when the function is first called, so the traced
  side is its own compiled copy of the model, first called with the hooks on; calls alternate.
  On any machine also the host cost of one hooked graph-tree call (stand-in manager).
  Target: the traced step within 1 % of the untraced one.
"""

from __future__ import annotations

import argparse
import time
import types

import torch

from benchmarks.harness import NullSink, StandInGraph, write_json
from benchmarks.pairing import paired, pipelined_ms
from replayscope.runner.trace.graph_trees import install_graph_tree_hooks
from replayscope.runner.trace.hooks import Patches, install_cuda_graph_hooks
from replayscope.runner.trace.recipes import step_wrapper, tensor_batch
from replayscope.runner.trace.settings import TraceSettings
from replayscope.runner.timing import CUDA_TIME_EVERY
from replayscope.runner.trace.tracer import Tracer


def new_tracer(time_every: int = CUDA_TIME_EVERY) -> Tracer:
    return Tracer(TraceSettings(trace_id="bench", name="bench", time_every=time_every),
                  make_sink=lambda run_id: NullSink())


def _per_call_us(fn, calls: int) -> float:
    for _ in range(calls // 10):         # warm up (first calls, the emitter thread starting)
        fn()
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls * 1e6


def host_costs(calls: int = 200_000) -> dict[str, float]:
    """µs added per hooked replay (inside a step) and per traced step, host side: the step timed as
    the tracer does by default (on CUDA: 1 step in 8 with CUDA events) and with every step timed."""
    graph = StandInGraph()
    tokens = torch.zeros(8, 1, dtype=torch.long)

    def step(tokens):
        graph.replay()
        return tokens

    plain_replay = _per_call_us(graph.replay, calls)
    plain_step = _per_call_us(lambda: step(tokens), calls // 4)
    result = {"replay_us": plain_replay, "step_us": plain_step, "cuda_events": torch.cuda.is_initialized()}
    # Each way twice, the best kept: a process's first tracer runs slower (warm-up) whichever it is.
    for label, every in (("", CUDA_TIME_EVERY), ("_all_timed", 1)) * 2:
        tracer, patches = new_tracer(every), Patches()
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
        if not label:
            result["hooked_replay_us"] = min(hooked_replay, result.get("hooked_replay_us", hooked_replay))
            result["replay_added_us"] = result["hooked_replay_us"] - plain_replay
        result[f"traced_step{label}_us"] = min(traced_step, result.get(f"traced_step{label}_us", traced_step))
        result[f"step_added{label}_us"] = result[f"traced_step{label}_us"] - plain_step
    return result


class StandInTreeManager:
    """Inductor's graph-tree manager reduced to what the hooks see: ``run`` replays a graph."""

    ids_to_funcs: dict = {}

    def __init__(self):
        self.graph = StandInGraph()

    def run(self, new_inputs, function_id):
        self.graph.replay()
        return new_inputs

    def record_function(self, new_inputs, function_id):
        return new_inputs


class StandInNode:
    def check_invariants(self, inputs):
        return True


def tree_call_cost(calls: int = 100_000) -> dict[str, float]:
    """µs added per call of a CUDA-graph-tree function traced with no --step (a step each call)."""
    manager, inputs = StandInTreeManager(), [torch.zeros(8, 4)]
    plain = _per_call_us(lambda: manager.run(inputs, 0), calls)
    result = {"tree_call_us": plain}
    for _ in range(2):
        tracer, patches = new_tracer(), Patches()
        install_cuda_graph_hooks(tracer, types.SimpleNamespace(CUDAGraph=StandInGraph), patches)
        install_graph_tree_hooks(tracer, types.SimpleNamespace(CUDAGraphTreeManager=StandInTreeManager,
                                                               CUDAGraphNode=StandInNode), patches)
        try:
            manager.graph._replayscope_bs = 8
            traced = _per_call_us(lambda: manager.run(inputs, 0), calls)
        finally:
            patches.remove()
            tracer.close()
        result["traced_tree_call_us"] = min(traced, result.get("traced_tree_call_us", traced))
    result["tree_call_added_us"] = result["traced_tree_call_us"] - plain
    return result


def bench_compiled(sizes: list[int], iters: int, layers: int, width: int = 8192) -> list[dict]:
    """A reduce-overhead compiled model, traced with no --step against untraced (see the docstring)."""
    import copy

    import torch._inductor.cudagraph_trees as trees

    torch.manual_seed(0)
    plain_model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
    plain_model = plain_model.to("cuda", torch.bfloat16).eval()
    traced_model = copy.deepcopy(plain_model)
    untraced = torch.compile(plain_model, mode="reduce-overhead", dynamic=False)
    traced = torch.compile(traced_model, mode="reduce-overhead", dynamic=False)
    tracer, patches = new_tracer(), Patches()
    rows = []

    def hooks_on():
        install_cuda_graph_hooks(tracer, torch.cuda.graphs, patches)
        install_graph_tree_hooks(tracer, trees, patches)
        return patches.remove

    with torch.inference_mode():
        for bs in sizes:
            x = torch.randn(bs, width, device="cuda", dtype=torch.bfloat16)
            for _ in range(4):                     # warm-up, recording, replays: both sides
                untraced(x)
                undo = hooks_on()
                traced(x)                          # its graph-tree function is bound with the hooks on
                undo()
            torch.cuda.synchronize()
            steps_before = tracer.steps
            sampled = paired(lambda: untraced(x), lambda: traced(x), iters, around_candidate=hooks_on)
            untraced_mean = pipelined_ms(lambda: untraced(x), iters)
            undo = hooks_on()
            traced_mean = pipelined_ms(lambda: traced(x), iters)
            undo()
            graph_steps = tracer.modes["graph"]
            rows.append({"preset": f"mlp{layers}", "bs": bs, "untraced_ms": sampled["baseline_ms"],
                         "traced_ms": sampled["candidate_ms"], "ratio_synced": sampled["ratio"],
                         "added_host_us": sampled["added_host_us"], "untraced_mean_ms": untraced_mean,
                         "traced_mean_ms": traced_mean, "ratio_mean": traced_mean / untraced_mean,
                         "traced_steps": tracer.steps - steps_before})
    tracer.close()
    assert tracer.steps and tracer.modes["graph"] >= tracer.steps - 4 * len(sizes), tracer.modes
    assert graph_steps == tracer.modes["graph"]
    return rows


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


def bench_preset(preset: str, sizes: list[int], iters: int, seq_len: int) -> list[dict]:
    from replayscope.runner.model import ModelArgs, Transformer

    args = ModelArgs.from_preset(preset)
    model = Transformer.random(args, seed=0, device="cuda", dtype=torch.bfloat16)
    max_bs = max(sizes)
    model.setup_caches(num_slots=max_bs + 1, max_seq_len=seq_len)

    def forward(tokens, positions, slots):
        return model(tokens, positions, slots).argmax(-1)

    static = {"tokens": torch.zeros(max_bs, 1, dtype=torch.long, device="cuda"),
              "positions": torch.zeros(max_bs, 1, dtype=torch.long, device="cuda"),
              "slots": torch.full((max_bs,), max_bs, dtype=torch.long, device="cuda")}
    tracer, all_timed, patches = new_tracer(), new_tracer(1), Patches()
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

        def hooked(on):
            """Puts the hooks for tracer ``on`` in place; returns what takes them off."""
            def install():
                install_cuda_graph_hooks(on, torch.cuda.graphs, patches)
                return patches.remove
            return install

        traced_step = step_wrapper(tracer, step, tensor_batch, "bench")
        all_timed_step = step_wrapper(all_timed, step, tensor_batch, "bench")
        for bs in sizes:
            inputs = {"tokens": torch.randint(1, args.vocab_size, (bs, 1), device="cuda"),
                      "positions": torch.randint(0, seq_len - 1, (bs, 1), device="cuda"),
                      "slots": torch.randperm(max_bs, device="cuda")[:bs]}

            def untraced():
                step(**inputs)

            sampled = paired(untraced, lambda: traced_step(**inputs), iters, around_candidate=hooked(tracer))
            every = paired(untraced, lambda: all_timed_step(**inputs), iters // 2, around_candidate=hooked(all_timed))
            untraced_mean = pipelined_ms(untraced, iters)
            undo = hooked(tracer)()
            traced_mean = pipelined_ms(lambda: traced_step(**inputs), iters)
            undo()
            rows.append({"preset": preset, "bs": bs, "untraced_ms": sampled["baseline_ms"],
                         "traced_ms": sampled["candidate_ms"], "ratio_synced": sampled["ratio"],
                         "added_host_us": sampled["added_host_us"],
                         "traced_all_timed_ms": every["candidate_ms"], "ratio_synced_all_timed": every["ratio"],
                         "untraced_mean_ms": untraced_mean, "traced_mean_ms": traced_mean,
                         "ratio_mean": traced_mean / untraced_mean})
    for t in (tracer, all_timed):
        t.close()
        assert t.modes["graph"] == t.steps, t.modes          # every traced step replayed its graph
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="136m,1b")
    parser.add_argument("--sizes", default="1,8,64")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--json", help="also write the figures as JSON to this file")
    parser.add_argument("--compiled", action="store_true",
                        help="measure a torch.compile(mode='reduce-overhead') model instead of the presets")
    parser.add_argument("--compiled-sizes", default="1,16")
    parser.add_argument("--compiled-layers", type=int, default=32)
    options = parser.parse_args(argv)
    if torch.cuda.is_available():
        torch.cuda.init()            # a traced step on a CUDA host times itself with CUDA events
    result = {"host": {**host_costs(), **tree_call_cost()}, "torch": torch.__version__,
              "time_every": CUDA_TIME_EVERY}
    h = result["host"]
    timing = f"CUDA-event timing of 1 step in {CUDA_TIME_EVERY}" if h["cuda_events"] else "host timing"
    print(f"host: hooked replay {h['hooked_replay_us']:.2f} us (+{h['replay_added_us']:.2f} us over "
          f"{h['replay_us']:.2f}); traced step {h['traced_step_us']:.2f} us (+{h['step_added_us']:.2f} us over "
          f"{h['step_us']:.2f}, {timing}); every step timed: +{h['step_added_all_timed_us']:.2f} us; "
          f"graph-tree call traced with no --step {h['traced_tree_call_us']:.2f} us "
          f"(+{h['tree_call_added_us']:.2f} us over {h['tree_call_us']:.2f})")
    if not torch.cuda.is_available():
        print("no CUDA device: traced vs untraced decode steps need a GPU")
    else:
        result["device"] = torch.cuda.get_device_name()
        result["rows"] = []
        if options.compiled:
            result["rows"] = bench_compiled([int(s) for s in options.compiled_sizes.split(",")], options.iters,
                                            options.compiled_layers)
            return _print_compiled(result, options)
        sizes = [int(s) for s in options.sizes.split(",")]
        for preset in options.presets.split(","):
            result["rows"] += bench_preset(preset, sizes, options.iters, options.seq_len)
            torch.cuda.empty_cache()
        print(f"\n{result['device']}, torch {torch.__version__}, bf16, KV cache {options.seq_len} positions; "
              f"decode step = copy into static buffers + replay; traced steps timed with CUDA events: "
              f"1 in {CUDA_TIME_EVERY} per batch size (all timed: every step)")
        print(f"{'preset':>6} {'bs':>4} {'untraced':>9} {'traced':>9} {'ratio':>7} {'all timed':>9} {'ratio':>7}   "
              f"{'untraced':>9} {'traced':>9} {'ratio':>7}")
        print(f"{'':>11} {'median ms, synchronised each step':>53}   {'mean ms, one synchronise':>27}")
        for r in result["rows"]:
            print(f"{r['preset']:>6} {r['bs']:>4} {r['untraced_ms']:9.3f} {r['traced_ms']:9.3f} "
                  f"{r['ratio_synced']:7.4f} {r['traced_all_timed_ms']:9.3f} {r['ratio_synced_all_timed']:7.4f}   "
                  f"{r['untraced_mean_ms']:9.3f} {r['traced_mean_ms']:9.3f} {r['ratio_mean']:7.4f}")
        worst = max(max(r["ratio_synced"], r["ratio_mean"]) for r in result["rows"])
        result["worst_ratio"] = worst
        result["worst_ratio_all_timed"] = max(r["ratio_synced_all_timed"] for r in result["rows"])
        print(f"worst traced/untraced: {worst:.4f} (target <= 1.01); every step timed: "
              f"{result['worst_ratio_all_timed']:.4f}")
    write_json(options.json, result)
    return 0


def _print_compiled(result: dict, options: argparse.Namespace) -> int:
    print(f"\n{result['device']}, torch {torch.__version__}, bf16; a {options.compiled_layers}-layer 8192-wide "
          f"linear stack compiled with mode=reduce-overhead, each call a traced step (no --step)")
    print(f"{'model':>6} {'bs':>4} {'untraced':>9} {'traced':>9} {'ratio':>7} {'added us':>9}   "
          f"{'untraced':>9} {'traced':>9} {'ratio':>7}")
    print(f"{'':>11} {'median ms, synchronised each step':>37}   {'mean ms, one synchronise':>27}")
    for r in result["rows"]:
        print(f"{r['preset']:>6} {r['bs']:>4} {r['untraced_ms']:9.3f} {r['traced_ms']:9.3f} {r['ratio_synced']:7.4f} "
              f"{r['added_host_us']:9.1f}   {r['untraced_mean_ms']:9.3f} {r['traced_mean_ms']:9.3f} "
              f"{r['ratio_mean']:7.4f}")
    result["worst_ratio"] = max(max(r["ratio_synced"], r["ratio_mean"]) for r in result["rows"])
    print(f"worst traced/untraced: {result['worst_ratio']:.4f} (target <= 1.01)")
    write_json(options.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
