"""Runner benchmark: eager vs graph vs padded steps, capture cost, instrumentation overhead.

    python -m benchmarks.runner_bench [--presets 136m,1b,3b] [--sizes 1,8,64,256] [--json FILE]

Every ratio is against a baseline measured in the same process on the same model:
the instrumented graph step (GraphRunner.run with an emitter) against a bare loop that
copies the same inputs into the same static buffers and calls ``replay()``.
Step times are host-timed around each step with a device synchronise, median of many.
On a machine without CUDA only the emitter's host cost is measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from runner.dispatch import Decision
from runner.emitter import Emitter
from runner.graphs import GraphRunner, StaticInput
from runner.model import ModelArgs, Transformer
from runner.plan import CapturePlan

RUN = {"run_id": "bench", "name": "bench", "source": "library", "started_at": 0.0, "backend": "cuda",
       "model": "bench", "device": "bench"}


class NullSink:
    def open(self, run):
        pass

    def write(self, events):
        pass

    def close(self):
        pass


def emitter_cost_us(calls: int = 200_000) -> dict[str, float]:
    """Host time of one Emitter.step call (flush thread running), and of a bare list append."""
    emitter = Emitter(NullSink(), RUN, flush_interval_s=0.05).start()
    started = time.perf_counter()
    for i in range(calls):
        emitter.step("decode", "padded", 5, 8, 5, 3, None, 0.001)
    per_step = (time.perf_counter() - started) / calls * 1e6
    emitter.close()
    sink: list = []
    started = time.perf_counter()
    for i in range(calls):
        sink.append((i, 0.0, "step", ("decode", "padded", 5, 8, 5, 3, None), 0.001))
    per_append = (time.perf_counter() - started) / calls * 1e6
    return {"emitter_step_us": per_step, "list_append_us": per_append}


def timed_ms(fn, iters: int, warmup: int = 5) -> list[float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - started) * 1e3)
    return times


def bench_preset(preset: str, sizes: list[int], iters: int, seq_len: int) -> list[dict]:
    args = ModelArgs.from_preset(preset)
    model = Transformer.random(args, seed=0, device="cuda", dtype=torch.bfloat16)
    max_bs = max(sizes)
    scratch = max_bs
    model.setup_caches(num_slots=max_bs + 1, max_seq_len=seq_len)

    def step(tokens, positions, slots):
        logits = model(tokens, positions, slots)
        return logits.argmax(-1), logits

    inputs_spec = [StaticInput("tokens", (1,), torch.long), StaticInput("positions", (1,), torch.long),
                   StaticInput("slots", (), torch.long, pad_value=scratch)]
    plan_sizes = sorted(set(sizes) | {8})
    emitter = Emitter(NullSink(), RUN, flush_interval_s=0.05).start()
    runner = GraphRunner(step, inputs_spec, CapturePlan(tuple(plan_sizes)), backend="cuda", device="cuda",
                         emitter=emitter, progress=False)
    with torch.inference_mode():
        report = runner.capture()

        def batch(bs):
            return {"tokens": torch.randint(1, args.vocab_size, (bs, 1), device="cuda"),
                    "positions": torch.randint(0, seq_len - 1, (bs, 1), device="cuda"),
                    "slots": torch.randperm(max_bs, device="cuda")[:bs]}

        rows = []
        for bs in sizes:
            inputs = batch(bs)
            captured = runner._graphs[bs]
            buffers = [runner._buffers[s.name] for s in inputs_spec]
            values = [inputs[s.name] for s in inputs_spec]

            def bare():
                for buffer, value in zip(buffers, values):
                    buffer[:bs].copy_(value, non_blocking=True)
                captured.graph.replay()

            def instrumented():
                runner.run(Decision("graph", bs, None), inputs)

            bare_t, inst_t = [], []
            for _ in range(5):                       # interleave to share any drift
                bare_t += timed_ms(bare, iters // 5)
                inst_t += timed_ms(instrumented, iters // 5)
            eager_t = timed_ms(lambda: step(**inputs), max(iters // 4, 10))
            rows.append({"preset": preset, "bs": bs, "eager_ms": statistics.median(eager_t),
                         "graph_ms": statistics.median(bare_t), "instrumented_ms": statistics.median(inst_t),
                         "overhead_ratio": statistics.median(inst_t) / statistics.median(bare_t),
                         "capture_s": report.seconds[bs]})
        five = batch(5)
        padded_t = timed_ms(lambda: runner.run(Decision("padded", 8, None), five), iters)
        eager5_t = timed_ms(lambda: step(**five), max(iters // 4, 10))
    emitter.close()
    summary = {"preset": preset, "params": args.num_params(), "capture_total_s": report.total_s,
               "capture_sizes": plan_sizes, "pool_bytes": report.pool_bytes,
               "padded_5_on_8_ms": statistics.median(padded_t), "eager_5_ms": statistics.median(eager5_t)}
    summary["padding_speedup"] = summary["eager_5_ms"] / summary["padded_5_on_8_ms"]
    return rows, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="136m,1b,3b")
    parser.add_argument("--sizes", default="1,8,64,256")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--json", help="also write the figures as JSON to this file")
    options = parser.parse_args(argv)
    result = {"emitter": emitter_cost_us(), "torch": torch.__version__}
    print(f"emitter: {result['emitter']['emitter_step_us']:.2f} us per Emitter.step "
          f"(bare list append {result['emitter']['list_append_us']:.2f} us)")
    if not torch.cuda.is_available():
        print("no CUDA device: step and capture figures need a GPU")
    else:
        result["device"] = torch.cuda.get_device_name()
        result["rows"], result["summaries"] = [], []
        sizes = [int(s) for s in options.sizes.split(",")]
        for preset in options.presets.split(","):
            rows, summary = bench_preset(preset, sizes, options.iters, options.seq_len)
            torch.cuda.empty_cache()             # the preset's model and graphs are gone now
            result["rows"] += rows
            result["summaries"].append(summary)
        print(f"\n{result['device']}, torch {torch.__version__}, bf16, KV cache {options.seq_len} positions; "
              f"median ms per step (host-timed, synchronised)")
        print(f"{'preset':>6} {'bs':>4} {'eager':>8} {'graph':>8} {'instr.':>8} {'instr/bare':>10} {'capture s':>9}")
        for r in result["rows"]:
            print(f"{r['preset']:>6} {r['bs']:>4} {r['eager_ms']:8.3f} {r['graph_ms']:8.3f} "
                  f"{r['instrumented_ms']:8.3f} {r['overhead_ratio']:10.3f} {r['capture_s']:9.3f}")
        print(f"\n{'preset':>6} {'params':>8} {'capture':>9} {'pool MiB':>9} {'pad 5->8':>9} {'eager 5':>8} {'speedup':>8}")
        for s in result["summaries"]:
            print(f"{s['preset']:>6} {s['params'] / 1e9:7.2f}B {s['capture_total_s']:8.2f}s "
                  f"{(s['pool_bytes'] or 0) / 2**20:9.1f} {s['padded_5_on_8_ms']:9.3f} {s['eager_5_ms']:8.3f} "
                  f"{s['padding_speedup']:7.1f}x")
    if options.json:
        with open(options.json, "w") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
