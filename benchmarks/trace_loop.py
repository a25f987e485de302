"""What ``replayscope trace --step`` adds to a host-bound decode loop it does not know.

    python -m benchmarks.trace_loop OUT_DIR                 # CUDA: the host-bound loop and the engine-scale one
    python -m benchmarks.trace_loop OUT_DIR --device cpu    # the same loop on the CPU (a trivial step, no graphs)

Each program (``benchmarks.trace_loop_program``) runs as two processes side by side, started once:
untraced, and under ``replayscope trace --events ... --step benchmarks.trace_loop_program:step``
(every step an event, its mode, cause, batch and sizes; on CUDA 1 step in ``--time-every`` timed
with CUDA events, as the trace does by default). Once both have captured and warmed up, rounds
alternate between them (which goes first alternating round by round): each round is ``--steps``
steps with one synchronise per 100, timed inside the process. Both loops run on one CPU
(``loop_cpu``: they take turns; where the machine has more than two), so that neither side gets a
faster or a shared core of its own; the tracer's thread and writer process run elsewhere. Short
rounds (``--steps 100`` and many ``--rounds``) pair the sides closely in time: the host's speed,
which can move 2× within a minute, then cancels out of each difference, and the mean with its
standard error says what the trace adds to the host's time per step, flushes included. Per program: µs per step of each
side, traced/untraced and the µs added per step, each the median over the rounds with its spread
(max - min); the host's µs per step (the launch loop alone, each block of 100 steps timed up to
its synchronise: what the trace costs the host, also where the GPU is the bottleneck and the
wall clock hides it; the wall clock's spread beside a small host spread is the GPU's, or the
synchronise's, not the trace's) and what the trace adds to it; the µs of the process's CPU time added per step (all its threads, the emitter's
too: on a GPU host it also counts the synchronise's spinning, on a busy CPU-only machine it is
the figure other processes do not inflate); and the garbage collector's collections in each side's rounds. The traced side's
events file is read afterwards: every step it ran is there, with its mode.

Programs (``--programs``; ``host`` and ``engine`` by default): ``host`` — a host-bound decode
loop: before each step a scheduler's Python pass over 96 running requests, then the step on 8 bf16
layers 512 wide, graphs for batch sizes 1, 2, 4, 8, 16, 32 and batches 1, 3, 8, 13, 24, 40 (graph,
padded, eager above the largest): on an H200 the host's time per step is the wall clock's (the
table's host and wall columns say whether a program is host-bound); ``gpu-paced`` — the same
without the scheduler at 1024 wide (the host program of earlier runs: on an H200 its GPU sets the
pace, its host waits about a third of each step); ``engine`` — the same loop at 32 layers 8192
wide (about 1 ms a step on an H200). On the CPU: ``host`` is 8 float32 layers 64 wide, every step eager. Writes ``trace_loop.json`` and
``trace_loop.md`` into OUT_DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

PROGRAMS = {"cuda": {"host": ["--width", "512", "--layers", "8", "--requests", "96"],
                     "gpu-paced": ["--width", "1024", "--layers", "8"],
                     "engine": ["--width", "8192", "--layers", "32"]},
            "cpu": {"host": ["--width", "64", "--layers", "8"]}}
DEFAULT_PROGRAMS = {"cuda": ["host", "engine"], "cpu": ["host"]}
STEPS = {"host": 20000, "gpu-paced": 20000, "engine": 2000}
STEP_SPEC = "benchmarks.trace_loop_program:step"
WARMUP = 500          # steps each process runs before its first round (graphs warmed up, the run opened)


class Side:
    """One process of the program, answering rounds on its stdout."""

    def __init__(self, command: list[str], env: dict[str, str]):
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.rounds: list[dict[str, Any]] = []

    def expect_ready(self) -> None:
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"the program did not start: {line!r} (exit {self.process.poll()})")

    def round(self, steps: int) -> None:
        self.process.stdin.write(f"round {steps}\n")
        self.process.stdin.flush()
        self.rounds.append(json.loads(self.process.stdout.readline()))

    def finish(self) -> None:
        self.process.stdin.write("quit\n")
        self.process.stdin.close()
        self.process.stdout.read()
        if self.process.wait(timeout=120):
            raise RuntimeError(f"the program exited {self.process.returncode}")


def spread(values: list[float]) -> dict[str, float]:
    """The median and the spread (max - min) over the rounds; with them the mean (every round's
    share of what happens now and then: a flush, a collection) and its standard error."""
    return {"median": statistics.median(values), "spread": max(values) - min(values),
            "mean": statistics.fmean(values),
            "sem": statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0}


def loop_cpu() -> int | None:
    """The CPU both sides' loops run on (they take turns, never both at once): the last this process
    may use, where there are more than two (the tracer's thread and writer process keep the rest);
    None (no pinning) on a machine of two CPUs or fewer."""
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[-1] if len(cpus) > 2 else None


def measure(device: str, name: str, args: list[str], rounds: int, steps: int, out: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    cpu = loop_cpu()
    program = [sys.executable, "-m", "benchmarks.trace_loop_program", "--device", device, "--warmup", str(WARMUP),
               *args, *(["--cpu", str(cpu)] if cpu is not None else [])]
    events = out / f"events-{device}-{name}.jsonl"
    if events.exists():
        events.unlink()
    untraced = Side(program, env)
    traced = Side([sys.executable, "-m", "replayscope.runner.trace", "--events", str(events), "--step", STEP_SPEC,
                   "--", *program], env)
    for side in (untraced, traced):
        side.expect_ready()
    for index in range(rounds):
        for side in ((untraced, traced) if index % 2 else (traced, untraced)):
            side.round(steps)
    for side in (untraced, traced):
        side.finish()
    base = [r["us_per_step"] for r in untraced.rounds]
    cand = [r["us_per_step"] for r in traced.rounds]
    modes: dict[str, int] = {}
    with open(events) as lines:
        next(lines)                                   # the run record
        for line in lines:
            event = json.loads(line)
            if event["kind"] == "step":
                modes[event["mode"]] = modes.get(event["mode"], 0) + 1
    return {"program": name, "device": device, "args": args, "steps_per_round": steps, "loop_cpu": cpu,
            "untraced_us": spread(base), "traced_us": spread(cand),
            "ratio": spread([c / b for b, c in zip(base, cand)]),
            "added_us": spread([c - b for b, c in zip(base, cand)]),
            "untraced_host_us": spread([r["host_us_per_step"] for r in untraced.rounds]),
            "traced_host_us": spread([r["host_us_per_step"] for r in traced.rounds]),
            "host_added_us": spread([c["host_us_per_step"] - b["host_us_per_step"]
                                     for b, c in zip(untraced.rounds, traced.rounds)]),
            "cpu_added_us": spread([c["cpu_us_per_step"] - b["cpu_us_per_step"]
                                    for b, c in zip(untraced.rounds, traced.rounds)]),
            "rounds": {"untraced": untraced.rounds, "traced": traced.rounds},
            "gc_untraced": [sum(r["gc"][g] for r in untraced.rounds) for g in range(3)],
            "gc_traced": [sum(r["gc"][g] for r in traced.rounds) for g in range(3)],
            "steps_run": WARMUP + rounds * steps, "step_events": sum(modes.values()), "modes": modes}


def table(rows: list[dict[str, Any]], rounds: int) -> str:
    lines = [f"Medians over {rounds} alternating rounds, spread = max - min over the rounds (the mean and its "
             f"standard error beside the host's figure); gc = the collections "
             f"(generations 0/1/2) in all the rounds of each side.", "",
             "| program | steps/round | untraced µs/step | traced µs/step | traced/untraced (spread) "
             "| added µs/step (spread) | untraced host µs/step (spread) | added host µs/step (spread) "
             "| added host µs/step, mean ± s.e. | added CPU µs/step (spread) | gc untraced | gc traced | steps run "
             "| step events (modes) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        modes = ", ".join(f"{k} {v}" for k, v in sorted(r["modes"].items()))
        lines.append(f"| {r['device']} {r['program']} | {r['steps_per_round']} | {r['untraced_us']['median']:.2f} "
                     f"| {r['traced_us']['median']:.2f} | {r['ratio']['median']:.4f} ({r['ratio']['spread']:.4f}) "
                     f"| {r['added_us']['median']:.2f} ({r['added_us']['spread']:.2f}) "
                     f"| {r['untraced_host_us']['median']:.2f} ({r['untraced_host_us']['spread']:.2f}) "
                     f"| {r['host_added_us']['median']:.2f} ({r['host_added_us']['spread']:.2f}) "
                     f"| {r['host_added_us']['mean']:.2f} ± {r['host_added_us']['sem']:.2f} "
                     f"| {r['cpu_added_us']['median']:.2f} ({r['cpu_added_us']['spread']:.2f}) "
                     f"| {'/'.join(map(str, r['gc_untraced']))} | {'/'.join(map(str, r['gc_traced']))} "
                     f"| {r['steps_run']} | {r['step_events']} ({modes}) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="directory for trace_loop.json, trace_loop.md and the traced runs' events")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--programs", default=None, help="comma-separated: host, gpu-paced, engine (the last two CUDA only)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=None, help="steps per round (default: 20000 host, 2000 engine)")
    options = parser.parse_args(argv)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    names = options.programs.split(",") if options.programs else DEFAULT_PROGRAMS[options.device]
    unknown = [n for n in names if n not in PROGRAMS[options.device]]
    if unknown:
        parser.error(f"no program {', '.join(unknown)} on {options.device} (there: {', '.join(PROGRAMS[options.device])})")
    rows = [measure(options.device, name, PROGRAMS[options.device][name], options.rounds,
                    options.steps or STEPS[name], out) for name in names]
    (out / "trace_loop.json").write_text(json.dumps({"rows": rows, "rounds": options.rounds}, indent=2))
    markdown = table(rows, options.rounds)
    (out / "trace_loop.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
