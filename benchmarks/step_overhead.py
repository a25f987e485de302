"""A traced step's own host time, read step by step inside the host-bound loop.

    python -m benchmarks.step_overhead [--rounds 200] [--steps 100] [--json FILE]

``benchmarks.trace_stages`` compares sides: the loop traced against the same loop untraced, which
is what the trace costs the program (its own work, and whatever it slows in the program around
it), resolved to about ±1 µs on a host whose speed moves. This reads the trace's own work alone,
in each step: the traced call's time minus the time of the program's step inside it (both read
with ``perf_counter_ns`` in the same step, the program's step between the inner two reads), less
the same difference through a plain Python wrapper (the ``floor``: a call and two clock reads).
A figure here at or near the side-by-side one says the trace's cost is its own work; well below
it, that the trace slows the program's own code (caches, the GIL).

The loop is ``benchmarks.trace_stages``' host-bound program (``HostBoundProgram``: real CUDA
graphs and bf16 layers on CUDA, a scheduler's Python pass before each step, one synchronise per
``SYNC_EVERY`` steps left out of the time), the sides taking turns every round. Sides:

- ``floor``: the plain wrapper (subtracted from every other side);
- ``step path, untimed``: ``--step`` traced, its steps never timed (but each key's first), its
  emitter's thread stopped (the queue cleared each round): the step's work on the program's thread;
- ``step path``: the same at the default rate, each step's figure put with the ``timed`` or
  ``untimed`` steps (a step is timed when its key's count is a multiple of the rate), and the
  program's own step on its timed steps against its untimed ones (what timing does to the launches
  between its two CUDA events);
- ``traced step``: the whole trace, its emitter's thread handing the events to its writer
  process, which writes them to a file (the thread's hand-overs hold the GIL: they land on the
  steps they interrupt);
- with CUDA: each CUDA event record on its own (``perf_counter_ns`` around the one call), in the
  loop, on 1 step in N for N of ``EVENT_RATES``: torch's ``Event.record`` for an event with
  timing and one without, and the driver's ``cuEventRecord`` through ctypes on the same event:
  what one record costs when it runs every step, and when it runs 1 step in N; and a pair of
  timing events recorded around the step as step timing records them, 1 in 8 and 1 in 32: the
  two calls' own time, and the program's step between them against the same places in the round
  without a pair.

Every figure is µs per step: the median and mean over all the steps of the rounds, and the 90th
percentile (each step's own time, so the spread between steps, not a standard error, is what
the percentile shows).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import statistics
import tempfile
import time
from typing import Any, Callable

import torch

from benchmarks.harness import NullSink, write_json
from benchmarks.pairing import rotated
from benchmarks.trace_stages import SYNC_EVERY, HostBoundProgram
from replayscope.contract.sinks import JsonlSink
from replayscope.runner.timing import CUDA_TIME_EVERY, CudaTiming
from replayscope.runner.trace.hooks import Patches
from replayscope.runner.trace.recipes import step_wrapper, tensor_batch
from replayscope.runner.trace.settings import TraceSettings
from replayscope.runner.trace.tracer import Tracer, tracer_class

EVENT_RATES = (1, 8, CUDA_TIME_EVERY)
clock = time.perf_counter_ns


class TimedProgram(HostBoundProgram):
    """The host-bound program with its step's own time read around it (``marks``)."""

    def __init__(self, tracer: Tracer | None = None, patches: Patches | None = None):
        super().__init__(tracer, patches)
        self.marks = [0, 0]

    def timed_step(self, hidden: torch.Tensor) -> torch.Tensor:
        marks = self.marks
        marks[0] = clock()
        result = self.step(hidden)
        marks[1] = clock()
        return result


def stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "mean": statistics.fmean(ordered),
            "p90": ordered[int(0.9 * (len(ordered) - 1))], "steps": len(ordered)}


def wrapper_side(program: TimedProgram, call: Callable[[Any], Any], steps: int,
                 timed_of: Callable[[Any], bool] | None = None) -> Callable[[int], dict[str, list[float]]]:
    """One round of ``steps`` steps through ``call``: each step's wrapper time minus its program's
    time, in ns, as ``{"all": [...]}`` (and ``timed``/``untimed`` when ``timed_of(x)`` tells,
    before the step, whether it will be timed, with the program's own step time of each kind in
    ``program timed``/``program untimed``: what timing does to the step's own launches)."""
    inputs, marks, between = program.inputs, program.marks, program.between

    def one_round(_round: int) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {"all": [], "timed": [], "untimed": [], "program timed": [],
                                         "program untimed": []}
        for i in range(steps):
            x = inputs[i % len(inputs)]
            between()
            kind = None if timed_of is None else ("timed" if timed_of(x) else "untimed")
            started = clock()
            call(x)
            ended = clock()
            inside = marks[1] - marks[0]
            extra = (ended - started) - inside
            found["all"].append(extra)
            if kind is not None:
                found[kind].append(extra)
                found["program " + kind].append(inside)
            if i % SYNC_EVERY == SYNC_EVERY - 1:
                program.sync()
        program.sync()
        return found
    return one_round


def pair_side(program: TimedProgram, start: Callable[[], Any] | None, end: Callable[[], Any] | None, every: int,
              steps: int) -> Callable[[int], dict[str, list[float]]]:
    """One round of the untraced loop with a pair of records around 1 step in ``every`` (``start()``
    right before the step's launches, ``end()`` right after, as step timing records them; none when
    they are None), in ns: both records' own time (``all``), and the program's step alone (no loop
    Python, between the records where there are) by its place in the round (``steps``)."""
    inputs, step, between = program.inputs, program.step, program.between

    def one_round(_round: int) -> dict[str, list[float]]:
        own: list[float] = []
        times: list[float] = []
        for i in range(steps):
            between()
            x = inputs[i % len(inputs)]
            paired = start is not None and i % every == 0
            started = clock()
            if paired:
                start()
            launched = clock()
            step(x)
            stepped = clock()
            if paired:
                end()
                own.append((launched - started) + (clock() - stepped))
            times.append(stepped - launched)
            if i % SYNC_EVERY == SYNC_EVERY - 1:
                program.sync()
        program.sync()
        return {"all": own, "steps": times}
    return one_round


def record_side(program: TimedProgram, record: Callable[[], Any] | None, every: int,
                steps: int) -> Callable[[int], dict[str, list[float]]]:
    """One round of the untraced loop with ``record()`` after 1 step in ``every`` (none when
    ``record`` is None), in ns: each record's own time (``all``), and the time of each step with
    the loop's Python before it, by its place in the round (``steps``): set against the same
    place without records, what a record costs the steps after it, beside its own time."""
    inputs, step, between = program.inputs, program.step, program.between

    def one_round(_round: int) -> dict[str, list[float]]:
        own: list[float] = []
        times: list[float] = []
        for i in range(steps):
            started = clock()
            between()
            step(inputs[i % len(inputs)])
            times.append(clock() - started)
            if record is not None and i % every == 0:
                started = clock()
                record()
                own.append(clock() - started)
            if i % SYNC_EVERY == SYNC_EVERY - 1:
                program.sync()
        program.sync()
        return {"all": own, "steps": times}
    return one_round


def extra_at(per_round: list[dict[str, list[float]]], base: list[dict[str, list[float]]],
             places: list[int]) -> float:
    """µs a side's step takes more than the base's at the same places of the round, their mean (each
    place's mean over the rounds, less the base's there)."""
    return statistics.fmean((statistics.fmean(r["steps"][i] for r in per_round)
                             - statistics.fmean(r["steps"][i] for r in base)) / 1000.0 for i in places)


def after_records(per_round: list[dict[str, list[float]]], base: list[dict[str, list[float]]], every: int,
                  steps: int) -> tuple[float, float]:
    """(µs the step right after a record takes more, µs every other step takes more), each the
    mean over its places in the round of the side's mean time there less the no-record side's."""
    follows = [i for i in range(1, steps) if (i - 1) % every == 0 and (i - 1) % SYNC_EVERY != SYNC_EVERY - 1]
    rest = [i for i in range(steps) if i not in set(follows)]
    return extra_at(per_round, base, follows), extra_at(per_round, base, rest) if rest else 0.0


def driver_record() -> Callable[[Any, Any], Any] | None:
    """The driver's cuEventRecord (CUevent, CUstream: the runtime's handles are the driver's), or None."""
    try:
        record = ctypes.CDLL("libcuda.so.1").cuEventRecord
    except OSError:
        return None
    record.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
    record.restype = ctypes.c_int
    return record


Side = Callable[[int], dict[str, list[float]]]


def event_sides(steps: int) -> tuple[dict[str, Side], dict[str, tuple[int, Side]], dict[str, tuple[int, Side]]]:
    """With CUDA, on one copy of the program: the sides without records that the others are read
    against (``no record``, ``no pair``); each CUDA event record alone, 1 step in N, three ways; and a
    timing pair around the step (see the module docstring). The last two as ``{name: (N, side)}``."""
    program = TimedProgram()
    stream = torch.cuda.current_stream()
    bases = {"no record": record_side(program, None, 1, steps), "no pair": pair_side(program, None, None, 1, steps)}
    records: dict[str, tuple[int, Side]] = {}
    pairs: dict[str, tuple[int, Side]] = {}
    cu_record = driver_record()
    for every in EVENT_RATES:
        timed, plain = torch.cuda.Event(enable_timing=True), torch.cuda.Event()
        timed.record(stream)
        plain.record(stream)
        records[f"Event.record, timing, 1 in {every}"] = (every, record_side(
            program, lambda e=timed: e.record(stream), every, steps))
        records[f"Event.record, no timing, 1 in {every}"] = (every, record_side(
            program, lambda e=plain: e.record(stream), every, steps))
        if every > 1:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            end.record(stream)
            pairs[f"pair around the step, 1 in {every}"] = (every, pair_side(
                program, lambda e=start: e.record(stream), lambda e=end: e.record(stream), every, steps))
        if cu_record is not None:
            handles = (timed.cuda_event, stream.cuda_stream)
            records[f"cuEventRecord, timing, 1 in {every}"] = (every, record_side(
                program, lambda h=handles: cu_record(*h), every, steps))
    torch.cuda.synchronize()
    return bases, records, pairs


def measure(rounds: int, steps: int, workdir: str, core: str) -> dict[str, Any]:
    Tracer = tracer_class(core)        # noqa: N806 (the class every tracer here is made of)
    patches = Patches()

    def traced(settings: TraceSettings, sink: Callable[[str], Any]) -> tuple[Tracer, TimedProgram, Callable]:
        tracer = Tracer(settings, make_sink=sink)
        program = TimedProgram(tracer, patches)
        call = step_wrapper(tracer, program.timed_step, tensor_batch, "bench")
        call(program.inputs[0])                 # the run opens (its emitter thread starts) outside the rounds
        tracer._starter.join()
        return tracer, program, call

    untimed_tracer, untimed_program, untimed = traced(
        TraceSettings(trace_id="untimed", name="untimed", time_every=10**9), lambda run_id: NullSink())
    path_tracer, path_program, path = traced(TraceSettings(trace_id="path", name="path"), lambda run_id: NullSink())
    full_tracer, full_program, full = traced(TraceSettings(trace_id="full", name="full"),
                                             lambda run_id: JsonlSink(os.path.join(workdir, "events.jsonl")))
    stopped = (untimed_tracer, path_tracer)
    for tracer in stopped:
        tracer.emitter._stop.set()
        tracer.emitter._thread.join()
    floor_program = TimedProgram()
    every, counts = path_tracer.settings.time_every, path_tracer._timing_counts
    cuda = torch.cuda.is_initialized()

    def due(x: torch.Tensor) -> bool:
        cell = counts.get(x.shape[0]) if cuda else None
        return cell is None or cell[0] % every == 0          # on the CPU every step is timed (host clock)

    for x in path_program.inputs:
        path(x)                                   # each key's first step (always timed) outside the rounds
    wrapped = {"floor": wrapper_side(floor_program, lambda x: floor_program.timed_step(x), steps),
               "step path, untimed": wrapper_side(untimed_program, untimed, steps),
               "step path": wrapper_side(path_program, path, steps, due),
               "traced step": wrapper_side(full_program, full, steps)}
    bases, records, pairs = event_sides(steps) if cuda else ({}, {}, {})
    sides = {**wrapped, **bases, **{name: side for name, (_, side) in {**records, **pairs}.items()}}
    names = list(sides)

    def clearing(name: str) -> Callable[[int], dict[str, list[float]]]:
        one_round = sides[name]

        def run(round_index: int) -> dict[str, list[float]]:
            for tracer in stopped:       # its timings back to the pool, as its emitter's thread would
                queue = tracer.emitter._queue
                for value in queue:
                    if isinstance(value, CudaTiming):
                        value.release()
                queue.clear()
            return one_round(round_index)
        return run
    gc.collect()
    per_round = dict(zip(names, rotated([clearing(n) for n in names], range(rounds))))
    full_tracer.emitter.flush()
    samples = {name: {kind: [v / 1000.0 for found in per_round[name] for v in found.get(kind, [])]
                      for kind in ("all", "timed", "untimed", "program timed", "program untimed")}
               for name in names}
    floor = stats(samples["floor"]["all"])
    result: dict[str, Any] = {"core": core, "rounds": rounds, "steps_per_round": steps, "cuda_events": cuda,
                              "time_every": every, "floor_us": floor, "sides": {}, "records": {}}
    for name in list(wrapped)[1:]:
        for kind in ("all", "timed", "untimed"):
            values = samples[name][kind]
            if values:
                figures = stats(values)
                result["sides"][name if kind == "all" else f"{name}, {kind} steps"] = {
                    **figures, "median": figures["median"] - floor["median"],
                    "mean": figures["mean"] - floor["mean"], "p90": figures["p90"] - floor["median"]}
    timed_inside, untimed_inside = samples["step path"]["program timed"], samples["step path"]["program untimed"]
    if timed_inside and untimed_inside:
        result["program_on_timed_steps_us"] = statistics.fmean(timed_inside) - statistics.fmean(untimed_inside)
    result["pairs"] = {name: {"own": stats(samples[name]["all"]), "program_on_timed_steps_us": extra_at(
        per_round[name], per_round["no pair"], [i for i in range(steps) if i % rate == 0])}
        for name, (rate, _) in pairs.items()}
    if cuda:
        base = per_round["no record"]
        result["step_without_records_us"] = statistics.fmean(v for r in base for v in r["steps"]) / 1000.0
        for name, (rate, _) in records.items():
            next_extra, rest_extra = after_records(per_round[name], base, rate, steps)
            own = samples[name]["all"]
            result["records"][name] = {
                "own": stats(own), "next_step_extra_mean": next_extra, "other_steps_extra_mean": rest_extra,
                "per_step_mean": (statistics.fmean(own) + next_extra) / rate + rest_extra * (rate - 1) / rate}
    result["traced_steps"] = full_tracer.steps
    for tracer in stopped:
        tracer.emitter._queue.clear()
    for tracer in (*stopped, full_tracer):
        tracer.close()
    patches.remove()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--steps", type=int, default=100, help="steps per side per round")
    parser.add_argument("--core", choices=("compiled", "python"), default="compiled")
    parser.add_argument("--json", help="also write the figures as JSON to this file")
    options = parser.parse_args(argv)
    if torch.cuda.is_available():
        torch.cuda.init()                 # as a traced GPU program: its steps timed by CUDA events, 1 in N
    with tempfile.TemporaryDirectory() as workdir:
        result = measure(options.rounds, options.steps, workdir, options.core)
    floor = result["floor_us"]
    print(f"host-bound loop, {options.core} core; floor (a wrapper, two clock reads) {floor['median']:.2f} us; "
          f"{options.rounds} rounds of {options.steps} steps; us per step over the floor (a record: its own time)")
    print(f"{'side':<44} {'median':>8} {'mean':>8} {'p90':>8} {'steps':>7}")
    for name, figures in result["sides"].items():
        print(f"{name:<44} {figures['median']:>8.2f} {figures['mean']:>8.2f} {figures['p90']:>8.2f} "
              f"{figures['steps']:>7}")
    if "program_on_timed_steps_us" in result:
        print(f"the program's own step on a timed step of the step path: {result['program_on_timed_steps_us']:+.2f} us "
              f"(mean, against its untimed steps)")
    for name, figures in result["pairs"].items():
        print(f"{name}: the two records {figures['own']['median']:.2f} / {figures['own']['mean']:.2f} us (median / "
              f"mean); the program's step between them {figures['program_on_timed_steps_us']:+.2f} us (mean, "
              f"against the same places without)")
    if result["records"]:
        print(f"CUDA event records alone (the step with its loop's Python: {result['step_without_records_us']:.2f} us "
              f"without any); a record's own time, and what the step after it and the others take more, us:")
        print(f"{'record':<36} {'own median':>10} {'own mean':>9} {'next step':>10} {'others':>8} {'per step':>9}")
        for name, figures in result["records"].items():
            own = figures["own"]
            print(f"{name:<36} {own['median']:>10.2f} {own['mean']:>9.2f} {figures['next_step_extra_mean']:>10.2f} "
                  f"{figures['other_steps_extra_mean']:>8.2f} {figures['per_step_mean']:>9.2f}")
    write_json(options.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
