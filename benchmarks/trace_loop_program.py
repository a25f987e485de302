"""The program ``benchmarks.trace_loop`` runs traced and untraced: a decode loop replayscope does
not know. ``step(hidden)`` is one step: on CUDA it copies the batch into static buffers and
replays the graph captured for the smallest size that holds it (padding), or runs the layers
eagerly above the largest; on the CPU (no graphs) it runs the layers. Before each step the loop's
own Python: a scheduler's pass over ``--requests`` running requests (``schedule``; outside the
step, as in a serving loop). One synchronise per ``SYNC_EVERY`` steps, as a serving loop's decode runs.

    python -m benchmarks.trace_loop_program [--device cuda] [--width 1024] [--layers 8] [--requests 0]

It reads commands on stdin: ``round N`` runs N steps and answers one JSON line (µs per step: of
the wall clock; of the host's launch loop alone, each block of steps timed up to its synchronise;
and of the process's CPU time; the garbage collector's collections in the round); ``quit`` ends it. It answers ``ready`` once its
graphs are captured and warmed up.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import torch

CAPTURED = (1, 2, 4, 8, 16, 32)
BATCHES = (1, 3, 8, 13, 24, 40)     # graph, padded, graph, padded, padded, eager (above the largest)
SYNC_EVERY = 100

weights: list[torch.Tensor] = []
graphs: dict[int, object] = {}      # captured size -> its graph
static_in: torch.Tensor | None = None
static_out: dict[int, torch.Tensor] = {}
size_for: dict[int, int | None] = {}


def forward(hidden: torch.Tensor) -> torch.Tensor:
    for weight in weights:
        hidden = torch.nn.functional.linear(hidden, weight)
    return hidden


def step(hidden: torch.Tensor) -> torch.Tensor:
    bs = hidden.shape[0]
    size = size_for[bs]
    if size is None:
        return forward(hidden)
    static_in[:bs].copy_(hidden)
    graphs[size].replay()
    return static_out[size][:bs]


def setup(device: str, width: int, layers: int) -> None:
    global static_in
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    weights.extend(torch.randn(width, width, device=device, dtype=dtype) / width ** 0.5 for _ in range(layers))
    if device != "cuda":
        torch.set_num_threads(1)        # no intra-op threads: the loop and the tracer's thread, as on a GPU host
        size_for.update({bs: None for bs in BATCHES})
        return
    static_in = torch.zeros(max(CAPTURED), width, device=device, dtype=dtype)
    pool = torch.cuda.graph_pool_handle()
    for bs in sorted(CAPTURED, reverse=True):      # largest first, one pool, as the engines capture
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            forward(static_in[:bs])
        torch.cuda.current_stream().wait_stream(side)
        graphs[bs] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[bs], pool=pool):
            static_out[bs] = forward(static_in[:bs])
    torch.cuda.synchronize()
    size_for.update({bs: next((s for s in CAPTURED if s >= bs), None) for bs in BATCHES})


class Collections:
    def __init__(self):
        self.counts = [0, 0, 0]

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "stop":
            self.counts[info["generation"]] += 1


def schedule(requests: list[list[int]]) -> None:
    """The serving loop's own Python before each step, as a scheduler's pass over its running requests
    (each one's generated tokens counted, its stop condition checked): what makes a real decode loop
    host-bound while the GPU's part is small."""
    for request in requests:
        request[1] += 1
        if request[1] >= request[0]:
            request[1] = 0


def run_round(inputs: list[torch.Tensor], steps: int, sync, requests: list[list[int]]) -> dict:
    collections = Collections()
    gc.callbacks.append(collections)
    n = len(inputs)
    perf = time.perf_counter
    sync()
    started, cpu_started = perf(), time.process_time()
    host = 0.0                          # the loop's own time: each block of steps up to its synchronise
    block = started
    for i in range(steps):
        schedule(requests)
        step(inputs[i % n])
        if i % SYNC_EVERY == SYNC_EVERY - 1:
            host += perf() - block
            sync()
            block = perf()
    host += perf() - block
    sync()
    seconds, cpu_seconds = perf() - started, time.process_time() - cpu_started
    gc.callbacks.remove(collections)
    # wall: the steps with their synchronises (what the loop delivers); host: the launch loop alone,
    # without the waits for the GPU (what the host spends per step, whichever side is the bottleneck);
    # CPU: the process's CPU time, all its threads (what other processes on a busy machine do not inflate).
    return {"us_per_step": seconds / steps * 1e6, "host_us_per_step": host / steps * 1e6,
            "cpu_us_per_step": cpu_seconds / steps * 1e6, "gc": collections.counts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--requests", type=int, default=0,
                        help="requests the scheduler's pass goes over before each step (0: none)")
    parser.add_argument("--cpu", type=int, default=None,
                        help="run the loop's thread on this CPU alone (its other threads, and any process it "
                             "starts, keep theirs)")
    options = parser.parse_args(argv)
    if options.cpu is not None:
        os.sched_setaffinity(0, {options.cpu})     # this thread only: threads started before keep theirs
    requests = [[64 + k % 7, 0] for k in range(options.requests)]      # [tokens to generate, generated]
    with torch.inference_mode():
        setup(options.device, options.width, options.layers)
        dtype = weights[0].dtype
        inputs = [torch.randn(bs, options.width, device=options.device, dtype=dtype) for bs in BATCHES]
        sync = torch.cuda.synchronize if options.device == "cuda" else (lambda: None)
        run_round(inputs, options.warmup, sync, requests)
        print("ready", flush=True)
        for line in sys.stdin:
            command = line.split()
            if not command or command[0] == "quit":
                break
            print(json.dumps(run_round(inputs, int(command[1]), sync, requests)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
