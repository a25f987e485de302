"""Advisor benchmark: do the advisor's capture sizes make decode steps faster on the GPU?

    python -m benchmarks.advisor_bench [--preset 1b] [--steps 2000] [--budgets 4,8,11] [--json FILE]
                                       [--shape requests | tokens [--max-num-batched-tokens 512]
                                        [--max-num-seqs 64]]

1. Record, by ``--shape``:
   ``requests`` (SGLang's shape, the default): the ``mixed`` workload runs through
   ``replayscope.runner.engine.DecodeEngine`` on CUDA graphs with the runner's default capture list,
   batches counted in requests;
   ``tokens`` (vLLM's shape): a chunked-prefill scheduler's steps (``benchmarks.token_batches``:
   a decode token per running request plus prompt chunks up to ``--max-num-batched-tokens``,
   ``mixed`` steps where a chunk is in) run as rows of the engine's decode step (a token a row,
   each at its own cache position) on CUDA graphs with vLLM's default list up to
   ``min(2 x --max-num-seqs, 512)``, batches counted in tokens, the run recorded as a vLLM one
   (``cudagraph_mode`` FULL: this runner's graphs are full ones), so vLLM's rules apply.
   Either way every step is timed (``time_every=1``) and its events kept in memory.
2. Advise: the advisor (``replayscope.collector.analysis.advisor``, pure: no store; the facts from the
   events by ``benchmarks.advisor_facts``) takes the recorded run's
   decode steps, chooses K sizes on the first 70% of them in time order with the run's
   measured step times, for each K of ``--budgets``.
3. Replay: the held-back decode steps' batch sizes, in their order, through a
   ``replayscope.runner.graphs.GraphRunner`` of the engine's own decode step per list:
   (a) ``default``: the runner's default pattern (1, 2, 4, 8, then every 8: vLLM's default
       below 256 too) cut to its K smallest sizes, what lowering ``--max-bs`` /
       ``--max-cudagraph-capture-size`` / ``--cuda-graph-max-bs`` gives;
   (b) ``advisor``: the advisor's sizes for K (at most K);
   (c) ``run``: the recorded run's own list.
   Each held-back step runs once under each list, which goes first rotating step by step
   (``benchmarks.pairing.rotated``), each step timed with a synchronise after it.

Per list: mean, median and p99 step time, the advisor's predicted mean (its objective on the
same steps), padding waste and eager share of the replayed steps, capture time and
graph-pool memory; per K the advisor against the default list: the ratio of mean step
times and the median of the per-step ratios (steps run back to back, so a change of the
host's speed moves both). ``not_slower`` allows 1% for noise.

It runs on the CPU too (``BACKEND``/``DEVICE`` set to the static stand-in by the test in
tests/benchmarks), where its figures mean nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import fields
from typing import Any

import torch

from benchmarks.advisor_facts import facts_from_events
from benchmarks.harness import ListSink, write_json
from benchmarks.pairing import rotated, timed_once
from benchmarks.token_batches import token_steps
from replayscope.collector.analysis.advisor import choice, engines, steps as stepping
from replayscope.collector.analysis.advisor.objective import Objective
from replayscope.collector.analysis.advisor.report import advise, current_sizes
from replayscope.runner.dispatch import BatchShape
from replayscope.runner.emitter import Emitter
from replayscope.runner.engine import DecodeEngine, RunConfig
from replayscope.runner.graphs import GraphRunner
from replayscope.runner.plan import CapturePlan
from replayscope.contract.capture_sizes import default_capture_sizes
from replayscope.collector.analysis.advisor.engines import vllm_default_sizes

BACKEND, DEVICE = "cuda", "cuda"      # the CPU stand-in test sets the static backend on the CPU
NOISE = 0.01                          # the advisor's list is "not slower" within 1% of the default's mean
WARMUP_STEPS = 20


def record(preset: str, steps: int, seed: int) -> tuple[DecodeEngine, dict[str, Any], list[dict[str, Any]]]:
    """Run the mixed workload and keep every event (every step timed)."""
    config = RunConfig(backend=BACKEND, device=DEVICE, preset=preset, workload="mixed", steps=steps, seed=seed,
                       time_every=1, progress=False, name="advisor-bench")
    engine = DecodeEngine(config)
    run = engine.run_record()
    sink = ListSink()
    engine.emitter = Emitter(sink, run, flush_interval_s=0.5)
    with engine.emitter:
        engine.setup()
        engine.run()
    return engine, run, sink.events


def record_tokens(preset: str, steps: int, seed: int, max_num_batched_tokens: int, max_num_seqs: int
                  ) -> tuple[DecodeEngine, dict[str, Any], list[dict[str, Any]]]:
    """Run a vLLM-shaped step sequence (``token_steps``) as token rows, keep every event (every
    step timed), recorded as a vLLM run with its default list."""
    config = RunConfig(backend=BACKEND, device=DEVICE, preset=preset, workload="mixed", steps=1, seed=seed,
                       time_every=1, progress=False, name="advisor-bench-tokens")
    engine = DecodeEngine(config)
    engine.setup()
    sizes = [s for s in vllm_default_sizes(min(2 * max_num_seqs, 512)) if s <= max_num_batched_tokens]
    sequence = token_steps(steps, seed, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs)
    run = engine.run_record()
    run["config"].update({"engine": "vllm", "capture_sizes": sizes, "cudagraph_mode": "FULL",
                          "max_num_batched_tokens": max_num_batched_tokens, "max_num_seqs": max_num_seqs})
    inputs = batches(engine, {t.tokens for t in sequence})
    sink = ListSink()
    with Emitter(sink, run, flush_interval_s=0.5) as emitter, torch.inference_mode():
        runner = GraphRunner(engine._graph_step, engine._static_inputs(1), CapturePlan(tuple(sizes)),
                             backend=BACKEND, device=engine.device, emitter=emitter, time_every=1, progress=False)
        runner.capture()
        for step in sequence:
            decision = runner.decide(BatchShape("decode", step.tokens))    # graphs keyed by the token count
            runner.run(decision, inputs[step.tokens], stage=step.stage)
    return engine, run, sink.events


def default_cut(k: int) -> list[int]:
    """The default pattern's K smallest sizes."""
    return list(default_capture_sizes(8 * k)[:k])


def replay_sizes(facts, current: list[int], padding: bool) -> list[int]:
    """The batch sizes of the held-back decode steps, in time order (the advisor's own split)."""
    kept, _, _ = stepping.select(facts.rows, current, padding)
    _, held, _ = stepping.split(kept)
    return [r.raw_bs for r in held for _ in range(r.steps)]


def batches(engine: DecodeEngine, sizes: set[int]) -> dict[int, dict[str, torch.Tensor]]:
    """One batch of decode inputs per size, made once (positions within the KV cache)."""
    device, args = engine.device, engine.model.args
    longest = engine.spec.max_tokens_per_request
    out = {}
    for bs in sorted(sizes):
        slots = (torch.randperm(engine.num_slots - 1, device=device)[:bs] if bs < engine.num_slots
                 else torch.randint(0, engine.num_slots - 1, (bs,), device=device))   # token rows share slots
        out[bs] = {"tokens": torch.randint(1, args.vocab_size, (bs, 1), device=device),
                   "positions": torch.randint(0, longest - 1, (bs, 1), device=device),
                   "slots": slots,
                   "lora_rows": torch.zeros(bs, dtype=torch.long, device=device)}
    return out


def runner_for(engine: DecodeEngine, sizes: list[int]) -> GraphRunner:
    runner = GraphRunner(engine._graph_step, engine._static_inputs(1), CapturePlan(tuple(sizes)),
                         backend=BACKEND, device=engine.device, progress=False)
    runner.capture()
    return runner


def served(runner: GraphRunner, sequence: list[int]) -> dict[str, float]:
    """Padding waste and eager share of the sequence under the runner's plan (its dispatch)."""
    padded = computed = eager = 0
    for bs in sequence:
        decision = runner.decide(BatchShape("decode", bs))
        if decision.graph_bs is None:
            eager += 1
            computed += bs
        else:
            padded += decision.graph_bs - bs
            computed += decision.graph_bs
    return {"padding_waste": padded / computed if computed else 0.0,
            "eager_share": eager / len(sequence) if sequence else 0.0}


def bench(preset: str, steps: int, budgets: list[int], seed: int = 0, shape: str = "requests",
          max_num_batched_tokens: int = 512, max_num_seqs: int = 64) -> dict[str, Any]:
    started = time.perf_counter()
    if shape == "tokens":
        engine, run, events = record_tokens(preset, steps, seed, max_num_batched_tokens, max_num_seqs)
    else:
        engine, run, events = record(preset, steps, seed)
    recorded_s = time.perf_counter() - started
    facts = facts_from_events(run, events)
    rules = engines.rules_for(run)
    current = current_sizes(facts, rules)
    sequence = replay_sizes(facts, current, rules.padding)
    if not sequence:
        raise SystemExit("the recorded run has no held-back decode steps to replay: give more --steps")
    advices = {k: advise(facts, budget=k) for k in budgets}
    first = advices[budgets[0]]
    held = {}
    for bs in sequence:
        held[bs] = held.get(bs, 0) + 1
    objective = Objective(**{f.name: first["objective"][f.name] for f in fields(Objective)})
    inputs = batches(engine, set(sequence))
    runners: dict[tuple[int, ...], GraphRunner] = {}
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu", "torch": torch.__version__,
        "preset": preset, "steps": steps, "seed": seed, "record_s": recorded_s, "shape": shape,
        "engine": rules.engine, **({"max_num_batched_tokens": max_num_batched_tokens, "max_num_seqs": max_num_seqs}
                                   if shape == "tokens" else {}),
        "recorded": {"decode_steps": first["decode_steps"], "held_back_steps": len(sequence),
                     "fit_steps": first["split"]["fit_steps"], "left_out": first["left_out"],
                     "objective": first["objective"], "run_list": current,
                     "stages": {stage: sum(1 for e in events if e["kind"] == "step" and e["stage"] == stage)
                                for stage in ("decode", "mixed")}},
        "budgets": []}
    with torch.inference_mode():
        for k in budgets:
            lists = [("default", default_cut(k)), ("advisor", advices[k]["sizes"]), ("run", current)]
            for _, sizes in lists:
                if tuple(sizes) not in runners:
                    runners[tuple(sizes)] = runner_for(engine, sizes)
            sides = []
            for _, sizes in lists:
                runner = runners[tuple(sizes)]
                for bs in sequence[:WARMUP_STEPS]:
                    runner.step(inputs[bs])
                sides.append(lambda bs, r=runner: timed_once(lambda: r.step(inputs[bs]))[0])
            if DEVICE == "cuda":
                torch.cuda.synchronize()
            times = rotated(sides, sequence)
            rows = []
            for (name, sizes), ms in zip(lists, times):
                runner = runners[tuple(sizes)]
                predicted = choice.score(held, sizes, objective, rules.padding).cost_per_step
                rows.append({"name": name, "sizes": sizes, "mean_ms": statistics.fmean(ms),
                             "median_ms": statistics.median(ms),
                             "p99_ms": statistics.quantiles(ms, n=100)[98] if len(ms) >= 2 else ms[0],
                             "predicted_ms": None if objective.kind != "time" else predicted * 1e3,
                             **served(runner, sequence), "capture_s": runner.report.total_s,
                             "pool_bytes": runner.report.pool_bytes})
            default, advisor = times[0], times[1]
            mean_ratio = statistics.fmean(advisor) / statistics.fmean(default)
            result["budgets"].append({
                "k": k, "lists": rows,
                "advisor_vs_default": {"mean_ratio": mean_ratio,
                                       "median_pair_ratio": statistics.median(b / a for a, b in zip(default, advisor)),
                                       "not_slower": mean_ratio <= 1 + NOISE}})
    result["total_s"] = time.perf_counter() - started
    return result


def print_table(result: dict[str, Any]) -> None:
    rec = result["recorded"]
    shape = ("mixed workload, batches in requests" if result["shape"] == "requests" else
             f"vLLM-shaped token batches (max_num_batched_tokens {result['max_num_batched_tokens']}, max_num_seqs "
             f"{result['max_num_seqs']}; {rec['stages']['mixed']} mixed, {rec['stages']['decode']} decode steps)")
    print(f"{result['device']}, torch {result['torch']}, preset {result['preset']}, {shape}, "
          f"{result['steps']} steps recorded in {result['record_s']:.1f} s (every step timed); run list "
          f"{','.join(map(str, rec['run_list']))}")
    print(f"advisor: chosen on the first {rec['fit_steps']} decode steps, replayed: the {rec['held_back_steps']} "
          f"held-back steps, each under every list (order rotating, synchronised per step); objective: "
          f"{rec['objective']['basis']}")
    if rec["left_out"]:
        print("left out (eager whatever the list, not replayed): "
              + ", ".join(f"{k} {v}" for k, v in sorted(rec["left_out"].items())))
    print(f"\n{'K':>3} {'list':<8} {'sizes':<34} {'mean ms':>8} {'median':>8} {'p99 ms':>8} {'pred ms':>8} "
          f"{'padding':>8} {'eager':>7} {'capture s':>9} {'pool MiB':>9}")
    for b in result["budgets"]:
        for r in b["lists"]:
            sizes = ",".join(map(str, r["sizes"]))
            sizes = sizes if len(sizes) <= 34 else sizes[:31] + "..."
            pred = "n/a" if r["predicted_ms"] is None else f"{r['predicted_ms']:.3f}"
            pool = "n/a" if r["pool_bytes"] is None else f"{r['pool_bytes'] / 2**20:.1f}"
            print(f"{b['k']:>3} {r['name']:<8} {sizes:<34} {r['mean_ms']:8.3f} {r['median_ms']:8.3f} "
                  f"{r['p99_ms']:8.3f} {pred:>8} {r['padding_waste']:8.1%} {r['eager_share']:7.1%} "
                  f"{r['capture_s']:9.3f} {pool:>9}")
    print()
    for b in result["budgets"]:
        v = b["advisor_vs_default"]
        verdict = "not slower" if v["not_slower"] else "SLOWER"
        print(f"K={b['k']}: advisor / default mean step time {v['mean_ratio']:.3f} (median per-step ratio "
              f"{v['median_pair_ratio']:.3f}): {verdict}")
    print(f"total {result['total_s']:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="1b")
    parser.add_argument("--steps", type=int, default=2000, help="steps of the recorded mixed run (default 2000)")
    parser.add_argument("--budgets", default="4,8,11", help="K values, comma separated (default 4,8,11)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the figures as JSON to this file")
    parser.add_argument("--shape", choices=("requests", "tokens"), default="requests",
                        help="requests: the runner's mixed workload (batches in requests, the default); tokens: "
                             "vLLM-shaped token batches, decode tokens and prefill chunks mixed")
    parser.add_argument("--max-num-batched-tokens", type=int, default=512, help="--shape tokens: tokens per step "
                        "at most (default 512)")
    parser.add_argument("--max-num-seqs", type=int, default=64, help="--shape tokens: running requests at most "
                        "(default 64)")
    options = parser.parse_args(argv)
    budgets = [int(k) for k in options.budgets.split(",")]
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: the advisor benchmark replays on CUDA graphs")
        return 1
    if options.shape == "tokens" and options.max_num_batched_tokens < options.max_num_seqs:
        parser.error("--max-num-batched-tokens must be at least --max-num-seqs")
    result = bench(options.preset, options.steps, budgets, options.seed, options.shape,
                   options.max_num_batched_tokens, options.max_num_seqs)
    print_table(result)
    write_json(options.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
