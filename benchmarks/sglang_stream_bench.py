"""What the SGLang recipe's write before a finished request's answer costs the scheduler's host
loop: one traced SGLang decode step (``ModelRunner.forward``, a stand-in named like 0.5.17's)
followed by its output (``SchedulerOutputStreamer.stream_output``), with the output hooked against
the same step with the output not hooked, in the same process, alternating blocks of calls. The
events go to a real JSONL file, as ``replayscope trace`` writes them.

    python -m benchmarks.sglang_stream_bench [--blocks 200] [--per-block 32] [--json FILE]

Four outputs: no request finished, or only one answered already (the overlap scheduler's delayed
row): the hook only looks; one finishes (it writes what is ready, without waiting for the GPU);
all finished (it writes everything; on CPU there is no GPU timing to wait for, so this is the
write alone). Figures: host µs added per step+output (median of
the per-block differences), and the ratio of the step+output's time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import types
from pathlib import Path

import torch

from benchmarks.harness import write_json
from replayscope.contract.sinks import JsonlSink
from replayscope.runner.trace import sglang_recipes
from replayscope.runner.trace.hooks import Patches
from replayscope.runner.trace.settings import TraceSettings
from replayscope.runner.trace.tracer import Tracer

STREAMER = "sglang.srt.managers.scheduler_components.output_streamer"


class Mode:
    def is_idle(self):
        return False

    def is_decode(self):
        return True


class ModelRunner:
    server_args = types.SimpleNamespace(disable_cuda_graph=True, model_path="bench")

    def forward(self, forward_batch, skip_attn_backend_init=None, pp_proxy_tensors=None):
        return None


class SchedulerOutputStreamer:
    def stream_output(self, reqs, return_logprob, skip_req=None):
        return len(reqs)


def stand_in(name: str, cls: type) -> types.ModuleType:
    module = types.ModuleType(name)
    cls.__module__ = name
    setattr(module, cls.__name__, cls)
    return module


def measure(blocks: int, per_block: int, folder: Path) -> dict:
    tracer = Tracer(TraceSettings(trace_id="bench", name="bench"),
                    make_sink=lambda run_id: JsonlSink(str(folder / f"{run_id}.jsonl")))
    patches = Patches()
    sglang_recipes.install_runner(tracer, stand_in("sglang.srt.model_executor.model_runner", ModelRunner), patches)
    plain = SchedulerOutputStreamer.stream_output
    sglang_recipes.install_output_streamer(tracer, stand_in(STREAMER, SchedulerOutputStreamer), patches)
    hooked = SchedulerOutputStreamer.stream_output
    runner, streamer = ModelRunner(), SchedulerOutputStreamer()
    batch = types.SimpleNamespace(batch_size=16, forward_mode=Mode(), input_ids=torch.zeros(16, dtype=torch.long))
    def req(finished, answered=False):
        return types.SimpleNamespace(finished=lambda: finished, finished_output=True if answered else None)
    running, done, answered = req(False), req(True), req(True, answered=True)
    cases = {"none finished": [running] * 16, "one answered already (the overlap's delayed row)": [running] * 15 + [answered],
             "one finishes": [running] * 15 + [done], "all finished": [answered] * 15 + [done]}
    result = {}
    for case, reqs in cases.items():
        def block(stream):
            started = time.perf_counter()
            for _ in range(per_block):
                runner.forward(batch)
                stream(streamer, reqs, False)
            return (time.perf_counter() - started) / per_block
        base, cand = [], []
        for i in range(blocks):
            pair = ((base, plain), (cand, hooked)) if i % 2 == 0 else ((cand, hooked), (base, plain))
            for into, stream in pair:
                into.append(block(stream))
        result[case] = {"step_and_output_us": statistics.median(base) * 1e6,
                        "added_us": statistics.median([c - b for b, c in zip(base, cand)]) * 1e6,
                        "ratio": statistics.median([c / b for b, c in zip(base, cand)])}
    tracer.close()
    patches.remove()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=200)
    parser.add_argument("--per-block", type=int, default=32)
    parser.add_argument("--json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        result = measure(args.blocks, args.per_block, Path(folder))
    print("| output | traced step + output (µs) | added by the hook (µs) | ratio |")
    print("| --- | --- | --- | --- |")
    for case, figures in result.items():
        print(f"| {case} | {figures['step_and_output_us']:.1f} | {figures['added_us']:.1f} | {figures['ratio']:.3f} |")
    write_json(args.json, result)


if __name__ == "__main__":
    main()
