"""Runner benchmark: eager vs graph vs padded steps, capture cost, instrumentation overhead.

    python -m benchmarks.runner_bench [--presets 136m,1b,3b] [--sizes 1,8,64,256] [--core both] [--json FILE]

Every ratio is against a baseline measured in the same process on the same model: the
instrumented step (``GraphRunner.step`` with an emitter: input checks, dispatch, copies
into the static buffers, replay, timing, the step event; the events written as a run to a
file writes them, by a writer process, here to /dev/null) against a bare loop that copies
the same inputs into the same static buffers (views made once) and calls ``replay()``.

The two loops alternate call by call (``benchmarks.pairing``), and each call gives two
figures: the step time, host-timed with a device synchronise after the step, and the host
time of the call alone (perf_counter around the call, the synchronise outside it). The
overhead ratio is the median of the per-pair ratios of step times, the host time *added*
the median of the per-pair differences. Next to it, the pipelined ratio: many steps back
to back and one synchronise, as in serving. The runner times 1 step in ``time_every``
(default 32) per (stage, mode, batch size) with CUDA events; the ratio is measured so, and
the host time added is measured for the two kinds of step apart: untimed (no step timed
after each key's first) and timed (``time_every=1``), and their mean over a sampling cycle
(what the runner adds per step on average), with the spread of the untimed step's per-pair
differences (interquartile range) and the bare loop measured against itself (a bias of the
pairing would show there). Every step above starts on an idle GPU right
after a synchronise; in serving the next step is launched while the GPU runs the last one,
so the host time added is also measured with steps back to back (``paired_pipelined``,
steps timed as in a run: the mean per step). ``--breakdown`` splits the added host time
(``host_breakdown``).

On any machine (CPU included) the host cost is also measured on the static backend with
a trivial step, where both loops run the same Python: bare loop vs ``GraphRunner.step``;
plus ``Emitter.step`` alone and the run's progress line per step. Step times, capture and
the overhead ratio need CUDA.

``--core``: the step core(s) ``GraphRunner.step`` runs (``replayscope.runner.runner_core``); ``both``,
the default, measures each this process has (the Python reference and the compiled core), one
runner per core on the same model, the cores taking turns size by size in the same process; every
row names its core.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable

import torch

from benchmarks.harness import NullSink, add_core_option, markdown_table, python_spin, runner_cores, write_folder, write_json
from benchmarks.pairing import paired, paired_pipelined, pipelined_ms, timed_once
from replayscope.contract.sinks import JsonlSink
from replayscope.runner.emitter import Emitter
from replayscope.runner.graphs import GraphRunner, StaticInput
from replayscope.runner.inputs import fits
from replayscope.runner.model import ModelArgs, Transformer
from replayscope.runner.plan import CapturePlan
from replayscope.runner.progress import Progress

RUN = {"run_id": "bench", "name": "bench", "source": "library", "started_at": 0.0, "backend": "cuda",
       "model": "bench", "device": "bench"}


UNTIMED = 10**9     # a CudaClock.every that times no step after each key's first


def decode_inputs(scratch_slot: int) -> list[StaticInput]:
    """The static inputs of a decode step: one token and its position per request, the cache slot."""
    return [StaticInput("tokens", (1,), torch.long), StaticInput("positions", (1,), torch.long),
            StaticInput("slots", (), torch.long, pad_value=scratch_slot)]


def bare_loop(runner: GraphRunner, bs: int, inputs: dict[str, torch.Tensor]):
    """The baseline: copy each input into its static buffer (views made once) and replay."""
    pairs = [(runner._buffers.tensors[s.name].narrow(s.batch_dim, 0, bs), inputs[s.name]) for s in runner.inputs]
    captured = runner._capturer.graphs[bs]
    replay = captured.graph.replay if captured.graph is not None else captured.call

    def bare():
        for buffer, value in pairs:
            buffer.copy_(value, non_blocking=True)
        replay()
    return bare


def decode_model(preset: str, max_bs: int, seq_len: int) -> tuple[ModelArgs, Callable[..., object]]:
    """The preset's model on CUDA (bf16, random weights) with a KV cache of ``max_bs + 1`` slots (the
    last one the pad rows' scratch slot), and its decode step: (tokens, positions, slots) -> (argmax, logits)."""
    args = ModelArgs.from_preset(preset)
    model = Transformer.random(args, seed=0, device="cuda", dtype=torch.bfloat16)
    model.setup_caches(num_slots=max_bs + 1, max_seq_len=seq_len)

    def step(tokens, positions, slots):
        logits = model(tokens, positions, slots)
        return logits.argmax(-1), logits
    return args, step


def decode_batch(args: ModelArgs, bs: int, max_bs: int, seq_len: int) -> dict[str, torch.Tensor]:
    """A decode batch of ``bs`` requests on CUDA: a token and a position each, distinct cache slots."""
    return {"tokens": torch.randint(1, args.vocab_size, (bs, 1), device="cuda"),
            "positions": torch.randint(0, seq_len - 1, (bs, 1), device="cuda"),
            "slots": torch.randperm(max_bs, device="cuda")[:bs]}


def cpu_batch(bs: int) -> dict[str, torch.Tensor]:
    """A decode batch of ``bs`` on the CPU, for the static backend's trivial step."""
    return {"tokens": torch.ones(bs, 1, dtype=torch.long), "positions": torch.ones(bs, 1, dtype=torch.long),
            "slots": torch.arange(bs)}


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


def mean_us(fn, calls: int, repeats: int) -> list[float]:
    """Mean host µs per call of ``fn`` over ``calls`` calls, once per repeat."""
    means = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        means.append((time.perf_counter() - started) / calls * 1e6)
    return means


def host_cost_cpu(sizes: list[int], step_cores: tuple[str, ...] = ("python",), calls: int = 5_000,
                  repeats: int = 15) -> list[dict]:
    """Host µs per step on the CPU static backend with a trivial step: bare loop vs GraphRunner.step,
    a row per size and step core.

    Both loops copy the same inputs into the same static buffers and call the same step,
    so the difference is the instrumentation: input checks, dispatch, timing, the step
    event. Each figure is the best of ``repeats`` means of ``calls`` calls, the loops (the
    bare one, then each core's runner in turn) interleaved: the cost itself, without what
    other processes on the machine take.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    max_bs = max(sizes)

    def step(tokens, positions, slots):
        return tokens, positions

    emitter = Emitter(NullSink(), RUN, flush_interval_s=0.05).start()
    runners = {core: GraphRunner(step, decode_inputs(max_bs), CapturePlan(tuple(sorted(set(sizes)))),
                                 backend="static", device="cpu", emitter=emitter, progress=False, step_core=core)
               for core in step_cores}
    for runner in runners.values():
        runner.capture()
    rows = []
    try:
        for bs in sizes:
            inputs = cpu_batch(bs)
            bare = bare_loop(runners[step_cores[0]], bs, inputs)
            steps = {core: (lambda r=runner: r.step(inputs)) for core, runner in runners.items()}
            bare_us, step_us = [], {core: [] for core in step_cores}
            for _ in range(repeats):
                bare_us += mean_us(bare, calls, 1)
                for core in step_cores:
                    step_us[core] += mean_us(steps[core], calls, 1)
            rows += [{"bs": bs, "core": core, "bare_host_us": min(bare_us), "instrumented_host_us": min(step_us[core]),
                      "added_host_us": min(step_us[core]) - min(bare_us)} for core in step_cores]
    finally:
        emitter.close()
        torch.set_num_threads(threads)
    return rows


def progress_tick_us(calls: int = 200_000) -> float:
    """Host µs per step of the engine's progress line (``update_to`` between redraws), enabled."""
    import io

    progress = Progress("Running mixed workload", None, unit="steps", stream=io.StringIO())
    started = time.perf_counter()
    for step in range(calls):
        progress.update_to(step, str)
    return (time.perf_counter() - started) / calls * 1e6


def host_breakdown(runner: GraphRunner, bare: Callable[[], object], step: Callable[[], object],
                   inputs: dict[str, torch.Tensor], iters: int) -> dict[str, float]:
    """Where the instrumented step's added host time goes, each figure paired against the bare loop.

    ``spin_before`` / ``spin_after``: the bare loop with a few µs of plain Python before or after
    the launch (does host work before a launch slow the launch down?); ``check_before``: with what
    a step does before its launch (its route looked up, its inputs compared) before it; ``record_after``: with a timing-enabled CUDA event recorded
    after the launch (what ends a timed step); ``no_emitter``: ``step`` (``GraphRunner.step`` on
    ``inputs``) with no emitter; ``step``: the whole step. The bare loop against itself is every
    row's ``added_host_floor_us``.
    """
    spin, spin_us = python_spin()

    def spin_before():
        spin()
        bare()

    def spin_after():
        bare()
        spin()

    def check_before():
        route = runner._plain_route(inputs, "decode")    # what a step reads and compares before its launch
        fits(inputs, route.expected, route.cuda_index)
        bare()

    event, stream = torch.cuda.Event(enable_timing=True), torch.cuda.current_stream()

    def record_after():
        bare()
        event.record(stream)

    emitter = runner.emitter

    def no_emitter():
        runner.emitter = None
        return lambda: setattr(runner, "emitter", emitter)

    added = {name: paired(bare, fn, iters)["added_host_us"]
             for name, fn in (("spin_before", spin_before), ("spin_after", spin_after),
                              ("check_before", check_before), ("record_after", record_after), ("step", step))}
    added["no_emitter"] = paired(bare, step, iters, around_candidate=no_emitter)["added_host_us"]
    return {"spin_us": spin_us, **{f"added_{name}_us": value for name, value in added.items()}}


def timed(fn, iters: int, warmup: int = 5) -> tuple[list[float], list[float]]:
    """Per call: (step ms, synchronised after the call; host µs of the call alone, no synchronise inside)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    step_ms, host_us = [], []
    for _ in range(iters):
        ms, us = timed_once(fn)
        step_ms.append(ms)
        host_us.append(us)
    return step_ms, host_us


def over_rounds(rounds: list[dict]) -> dict:
    """One row from a size's rounds: each figure's median over them; the spread (largest minus
    smallest round) of the ratio and of the host time added; each round's row in ``rounds``."""
    row = dict(rounds[0])
    for key, value in rounds[0].items():
        if isinstance(value, float):
            row[key] = statistics.median(r[key] for r in rounds)
    for key in SPREAD_OF:
        row[f"{key}_spread"] = max(r[key] for r in rounds) - min(r[key] for r in rounds)
    row["rounds"] = [{k: v for k, v in r.items() if k != "breakdown"} for r in rounds]
    return row


SPREAD_OF = ("overhead_ratio", "added_host_untimed_us", "added_host_back_to_back_us", "added_host_cycle_us",
             "added_host_floor_us")


def bench_preset(preset: str, sizes: list[int], iters: int, seq_len: int, breakdown: bool = False,
                 rounds: int = 1, step_cores: tuple[str, ...] = ("python",)) -> tuple[list[dict], dict]:
    """A row per size and step core (one runner per core, on one model; within a round the cores
    take turns size by size, their order rotating round by round); the summary (capture, padding)
    is the first core's runner's."""
    max_bs = max(sizes)
    scratch = max_bs
    args, step = decode_model(preset, max_bs, seq_len)
    plan_sizes = sorted(set(sizes) | {8})
    # As `replayscope run --events` writes: a writer process converts and writes the events (here to
    # /dev/null), the emitter's thread hands them over; its default flush interval.
    emitter = Emitter(JsonlSink(os.devnull), RUN).start()
    runners = {core: GraphRunner(step, decode_inputs(scratch), CapturePlan(tuple(plan_sizes)), backend="cuda",
                                 device="cuda", emitter=emitter, progress=False, step_core=core)
               for core in step_cores}
    runner = runners[step_cores[0]]                  # the summary's
    sampled = runner._clock.every                    # steps timed with CUDA events: 1 in this many
    with torch.inference_mode():
        reports = {core: r.capture() for core, r in runners.items()}
        report = reports[step_cores[0]]

        def batch(bs):
            return decode_batch(args, bs, max_bs, seq_len)

        def measure(bs: int, core: str, with_breakdown: bool) -> dict:
            runner = runners[core]
            clock = runner._clock
            inputs = batch(bs)
            bare = bare_loop(runner, bs, inputs)

            def instrumented():
                runner.step(inputs)

            sampled_steps = paired(bare, instrumented, iters)    # as a run steps: 1 in `sampled` timed
            clock.every = UNTIMED                    # the same steps, none timed (each key's first one was)
            untimed = paired(bare, instrumented, iters)
            floor = paired(bare, bare, iters)        # the bare loop against itself: ~0 unless the pairing is biased
            breakdown_row = host_breakdown(runner, bare, instrumented, inputs, iters) if with_breakdown else None
            clock.every = 1                          # the same steps, each one timed with CUDA events
            timed_steps = paired(bare, instrumented, iters // 2)
            clock.every = sampled
            back_to_back = paired_pipelined(bare, instrumented, max(iters // 4, 10))
            bare_pipelined = pipelined_ms(bare, iters)
            pipelined_ratio = pipelined_ms(instrumented, iters) / bare_pipelined
            eager_ms, _ = timed(lambda: step(**inputs), max(iters // 4, 10))
            row = {"preset": preset, "bs": bs, "core": core, "eager_ms": statistics.median(eager_ms),
                   "graph_ms": sampled_steps["baseline_ms"], "instrumented_ms": sampled_steps["candidate_ms"],
                   "overhead_ratio": sampled_steps["ratio"], "pipelined_ratio": pipelined_ratio,
                   "bare_host_us": untimed["baseline_host_us"],
                   "instrumented_host_us": untimed["candidate_host_us"],
                   "added_host_untimed_us": untimed["added_host_us"],
                   "added_host_untimed_iqr_us": untimed["added_host_iqr_us"],
                   "added_host_floor_us": floor["added_host_us"],
                   "added_host_timed_us": timed_steps["added_host_us"],
                   "added_host_sampled_us": sampled_steps["added_host_us"],
                   "added_host_back_to_back_us": back_to_back["added_host_us"],
                   # the mean over a sampling cycle: every - 1 untimed steps and one timed
                   "added_host_cycle_us": ((sampled - 1) * untimed["added_host_us"]
                                           + timed_steps["added_host_us"]) / sampled,
                   "capture_s": reports[core].seconds[bs]}
            if breakdown_row is not None:
                row["breakdown"] = breakdown_row
            return row

        per_size: dict[tuple[int, str], list[dict]] = {(bs, core): [] for bs in sizes for core in step_cores}
        for round_ in range(rounds):                 # the sizes' and the cores' order rotate round by round
            shift, turn = round_ % len(sizes), round_ % len(step_cores)
            for bs in sizes[shift:] + sizes[:shift]:
                for core in step_cores[turn:] + step_cores[:turn]:
                    per_size[(bs, core)].append(measure(bs, core, breakdown and round_ == 0))
        rows = [over_rounds(per_size[(bs, core)]) for bs in sizes for core in step_cores]
        five = batch(5)
        padded_ms, _ = timed(lambda: runner.step(five), iters)
        eager5_ms, _ = timed(lambda: step(**five), max(iters // 4, 10))
    emitter.close()
    summary = {"preset": preset, "core": step_cores[0], "params": args.num_params(), "capture_total_s": report.total_s,
               "step_timing": runner.step_timing,
               "capture_sizes": plan_sizes, "pool_bytes": report.pool_bytes,
               "padded_5_on_8_ms": statistics.median(padded_ms), "eager_5_ms": statistics.median(eager5_ms)}
    summary["padding_speedup"] = summary["eager_5_ms"] / summary["padded_5_on_8_ms"]
    return rows, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="136m,1b,3b")
    parser.add_argument("--sizes", default="1,8,64,256")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--breakdown", action="store_true",
                        help="also split the added host time per step (see host_breakdown)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure each preset's sizes this many times, the sizes' order rotating; each "
                             "figure is the median over the rounds, with the spread of the ratio and host time added")
    add_core_option(parser)
    parser.add_argument("--json", help="also write the figures as JSON to this file")
    parser.add_argument("--out", help="also write runner_bench.json and runner_bench.md (the table) into this folder")
    options = parser.parse_args(argv)
    sizes = [int(s) for s in options.sizes.split(",")]
    step_cores = runner_cores(parser, options.core)
    result = {"emitter": emitter_cost_us(), "progress_tick_us": progress_tick_us(), "torch": torch.__version__,
              "cores": list(step_cores), "host_cpu": host_cost_cpu(sizes, step_cores)}
    print(f"emitter: {result['emitter']['emitter_step_us']:.2f} us per Emitter.step "
          f"(bare list append {result['emitter']['list_append_us']:.2f} us); "
          f"progress line: {result['progress_tick_us']:.2f} us per step")
    print("\nhost us per step on the CPU static backend, trivial step (best of 15 means of 5000 calls):")
    print(f"{'bs':>4} {'core':>8} {'bare':>8} {'step()':>8} {'added':>8}")
    for r in result["host_cpu"]:
        print(f"{r['bs']:>4} {r['core']:>8} {r['bare_host_us']:8.2f} {r['instrumented_host_us']:8.2f} "
              f"{r['added_host_us']:8.2f}")
    if not torch.cuda.is_available():
        print("\nno CUDA device: step times, capture and the overhead ratio need a GPU")
    else:
        result["device"] = torch.cuda.get_device_name()
        result["rows"], result["summaries"] = [], []
        for preset in options.presets.split(","):
            rows, summary = bench_preset(preset, sizes, options.iters, options.seq_len, options.breakdown,
                                         options.rounds, step_cores)
            torch.cuda.empty_cache()             # the preset's model and graphs are gone now
            result["rows"] += rows
            result["summaries"].append(summary)
        timing = result["summaries"][0]["step_timing"]
        print(f"\n{result['device']}, torch {torch.__version__}, bf16, KV cache {options.seq_len} positions; "
              f"ms per step: median, host-timed with a synchronise after the step; host us: the call alone; "
              f"steps timed with CUDA events: 1 in {timing['every']} per (stage, mode, batch size)")
        print(f"instr/bare: median of per-pair ratios, each step synchronised, steps timed as in a run; "
              f"pipelined: one synchronise per {options.iters} steps; host us and added us (median of per-pair "
              f"differences): untimed steps; iqr: the interquartile range of those differences; floor: the "
              f"bare loop against itself (a bias of the pairing would show there); "
              f"timed: every step timed; per step: the mean over a sampling cycle "
              f"({timing['every'] - 1} untimed, 1 timed); b2b: added host us per step with steps back to back "
              f"(blocks of 16, no synchronise between steps), steps timed as in a run")
        print(f"{'preset':>6} {'bs':>4} {'core':>8} {'eager':>8} {'graph':>8} {'instr.':>8} {'instr/bare':>10} {'pipelined':>9} "
              f"{'host bare':>9} {'host instr':>10} {'added us':>8} {'iqr':>6} {'floor':>6} {'timed':>7} {'per step':>8} {'b2b':>6} "
              f"{'capture s':>9}")
        for r in result["rows"]:
            print(f"{r['preset']:>6} {r['bs']:>4} {r['core']:>8} {r['eager_ms']:8.3f} {r['graph_ms']:8.3f} "
                  f"{r['instrumented_ms']:8.3f} {r['overhead_ratio']:10.4f} {r['pipelined_ratio']:9.4f} "
                  f"{r['bare_host_us']:9.1f} {r['instrumented_host_us']:10.1f} {r['added_host_untimed_us']:8.1f} "
                  f"{r['added_host_untimed_iqr_us']:6.1f} {r['added_host_floor_us']:6.1f} "
                  f"{r['added_host_timed_us']:7.1f} {r['added_host_cycle_us']:8.1f} "
                  f"{r['added_host_back_to_back_us']:6.1f} {r['capture_s']:9.3f}")
        worst = max(result["rows"], key=lambda r: r["overhead_ratio"])
        costliest = max(result["rows"], key=lambda r: r["added_host_untimed_us"])
        cycle = max(result["rows"], key=lambda r: r["added_host_cycle_us"])
        serving = max(result["rows"], key=lambda r: r["added_host_back_to_back_us"])
        def where(r):
            return f"{r['preset']} bs {r['bs']}, {r['core']} core"
        print(f"worst instr/bare {worst['overhead_ratio']:.3f} ({where(worst)}); "
              f"most host time added {costliest['added_host_untimed_us']:.1f} us per untimed step "
              f"({where(costliest)}), {cycle['added_host_cycle_us']:.1f} us per step over "
              f"a sampling cycle ({where(cycle)}), {serving['added_host_back_to_back_us']:.1f} us "
              f"per step back to back ({where(serving)}); targets <= 1.01 and <= 10 us")
        if options.breakdown:
            print("\nadded host us per step, each paired against the bare loop (median of per-pair differences): "
                  "floor = bare vs bare; spin = the bare loop with a plain-Python loop of the given us before "
                  "or after the launch; check = with the step's route lookup and input check before it; record = with a "
                  "timing-enabled CUDA event recorded after the launch")
            print(f"{'preset':>6} {'bs':>4} {'core':>8} {'bare us':>8} {'floor':>6} {'spin us':>7} {'before':>7} {'after':>7} "
                  f"{'check':>7} {'record':>7} {'no emit':>7} {'step':>7}")
            for r in result["rows"]:
                b = r["breakdown"]
                print(f"{r['preset']:>6} {r['bs']:>4} {r['core']:>8} {r['bare_host_us']:8.1f} {r['added_host_floor_us']:6.1f} "
                      f"{b['spin_us']:7.1f} {b['added_spin_before_us']:7.1f} {b['added_spin_after_us']:7.1f} "
                      f"{b['added_check_before_us']:7.1f} {b['added_record_after_us']:7.1f} "
                      f"{b['added_no_emitter_us']:7.1f} {b['added_step_us']:7.1f}")
        print(f"\n{'preset':>6} {'core':>8} {'params':>8} {'capture':>9} {'pool MiB':>9} {'pad 5->8':>9} {'eager 5':>8} "
              f"{'speedup':>8}")
        for s in result["summaries"]:
            print(f"{s['preset']:>6} {s['core']:>8} {s['params'] / 1e9:7.2f}B {s['capture_total_s']:8.2f}s "
                  f"{(s['pool_bytes'] or 0) / 2**20:9.1f} {s['padded_5_on_8_ms']:9.3f} {s['eager_5_ms']:8.3f} "
                  f"{s['padding_speedup']:7.1f}x")
    result["rounds"] = options.rounds
    markdown = rounds_markdown(result)
    print("\n" + markdown, end="")
    write_json(options.json, result)
    write_folder(options.out, "runner_bench", result, markdown)
    return 0


def rounds_markdown(result: dict) -> str:
    """The host time added per step and the ratio, medians over the rounds with their spread."""
    cpu = markdown_table(["bs", "step core", "bare host µs", "GraphRunner.step host µs", "added µs"],
                         [[str(r["bs"]), r["core"], f"{r['bare_host_us']:.2f}", f"{r['instrumented_host_us']:.2f}",
                           f"{r['added_host_us']:.2f}"] for r in result["host_cpu"]])
    text = (f"CPU static backend, trivial step (torch {result['torch']}); Emitter.step "
            f"{result['emitter']['emitter_step_us']:.2f} µs, list append {result['emitter']['list_append_us']:.2f} µs\n\n"
            + cpu)
    if "rows" not in result:
        return text
    rounds = result["rounds"]

    def cell(row, key, digits):
        spread = row.get(f"{key}_spread")
        return f"{row[key]:.{digits}f}" + ("" if spread is None or rounds < 2 else f" (spread {spread:.{digits}f})")
    rows = [[r["preset"], str(r["bs"]), r["core"], cell(r, "overhead_ratio", 4), cell(r, "added_host_back_to_back_us", 1),
             cell(r, "added_host_untimed_us", 1), f"{r['added_host_timed_us']:.1f}", cell(r, "added_host_cycle_us", 1),
             cell(r, "added_host_floor_us", 1), f"{r['bare_host_us']:.1f}"] for r in result["rows"]]
    return (text + f"\n{result['device']}, {rounds} round{'s' * (rounds != 1)} (median over the rounds; spread: "
            f"largest minus smallest round); host µs added per step over the bare copy-and-replay loop; targets: back to back ≤ 2, "
            f"untimed after a synchronise ≤ 5, instr./bare ≤ 1.01\n\n"
            + markdown_table(["preset", "bs", "step core", "instr./bare", "back to back µs", "untimed after sync µs",
                              "timed µs", "per step (cycle) µs", "floor µs", "bare host µs"], rows))


if __name__ == "__main__":
    raise SystemExit(main())
