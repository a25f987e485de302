"""Where an instrumented step's host time goes, stage by stage, on any machine (CPU included).

    python -m benchmarks.host_path_bench [--sizes 1,8,64] [--rounds 5] [--calls 20000] [--core both]
                                         [--json FILE] [--out DIR]

Static backend, a trivial step (returns its inputs), the emitter's sink dropping every event:
what is left is the host path itself. Every figure is the mean host µs of one call of a
zero-argument function, measured in the same process; all of them are measured once per
round, the order of the functions rotating round by round (``benchmarks.pairing.rotated``), so
a change of the machine's speed moves every figure alike; the table gives each one's median
over the rounds and its spread (the largest minus the smallest round).

- ``empty call``: a call of a function that does nothing (the loop and the call themselves);
- ``floor``: a call and a list append of the step's tuple: the least a recorded step costs;
- ``bare step``: the baseline, the static rows copied from the inputs and the step called;
- the stages of ``GraphRunner.step`` on its own: ``route`` (the plain route looked up by stage
  and batch size), ``input check`` (the fast match, ``replayscope.runner.inputs.fits``), ``dispatch``
  (``dispatch``: only the first step of a stage, size and decision runs it, later ones read its
  route), ``timing`` (the host clock's start and stop: every CPU step; on CUDA 1 step in
  ``time_every``), ``event`` (the emitter's hand-off of the step, its flush thread not running:
  ``Emitter.step`` with its eight arguments, as the trace calls it, and ``Emitter.step_fields``
  with the route's tuple, as the runner does), ``flush`` (per event: the flush thread turning
  queued steps into wire events and handing them to a sink that drops them) and ``events file``
  (per event: a flush to the events file's sink, each step's line made from its queued values
  and written: what the flush thread did for a run to a file before the writer process, and still
  does where no writer is used), ``handed over`` (per event: the flush thread's work for a run to a
  file now: the queued values taken and handed to the writer process,
  ``replayscope.runner.event_writer``, as one marshal frame; the writer converts and writes them on
  a core of its own); these run on the emitter's thread, but under the GIL the step loop needs too;
- the whole step: ``step, no emitter`` (``GraphRunner.step`` recording nothing), ``step,
  untimed`` (recording, no clock: what a CUDA step that is not sampled does on the host),
  ``step`` (recording, host-timed: a CPU run's step) and ``step, gc off`` (the same with the
  garbage collector off: the collections the queued events bring); the emitter's flush thread
  runs meanwhile, handing the events to a writer process that writes them to /dev/null. These
  rows are measured for each step core (``replayscope.runner.runner_core``) that ``--core`` names:
  ``python`` (``GraphRunner.step``, the reference) and ``compiled`` (``_runcore``: its rows end in
  "(compiled)"); ``both``, the default, measures each this process has in the same rounds, on two
  runners of the same step and plan.

``added`` is a figure less the bare step's, from the medians. ``--clock thread`` reads the main
thread's CPU time instead of the wall clock: on a shared machine other processes move it less. On a GPU host the same Python
costs more after a synchronise (cold caches): ``runner_bench`` measures that; this benchmark
says which part of the Python costs what.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
from typing import Callable

import torch

from benchmarks.harness import NullSink, add_core_option, markdown_table, runner_cores, write_folder, write_json
from benchmarks.pairing import rotated
from replayscope.runner.dispatch import BatchShape
from replayscope.runner.emitter import Emitter
from replayscope.runner.graphs import GraphRunner, StaticInput
from replayscope.runner.inputs import fits
from replayscope.runner.plan import CapturePlan
from replayscope.contract.sinks import JsonlSink
from replayscope.runner.timing import HostClock

RUN = {"run_id": "host-path", "name": "host-path", "source": "library", "started_at": 0.0, "backend": "static",
       "model": "bench", "device": "cpu"}
UNTIMED = 10**9         # a clock's ``every`` that times no step after each key's first
CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}
CLOCK = [time.perf_counter]    # what every figure is read on (--clock)


def decode_inputs(scratch_slot: int) -> list[StaticInput]:
    return [StaticInput("tokens", (1,), torch.long), StaticInput("positions", (1,), torch.long),
            StaticInput("slots", (), torch.long, pad_value=scratch_slot)]


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    """Mean host µs of one call of ``fn`` over ``calls`` calls."""
    loop = range(calls)
    started = CLOCK[0]()
    for _ in loop:
        fn()
    return (CLOCK[0]() - started) / calls * 1e6


def flush_per_event_us(emitter: Emitter, fill: Callable[[], object], events: int) -> float:
    """Host µs per event of the flush thread's work (conversion and hand-off), run inline."""
    for _ in range(events):
        fill()
    started = CLOCK[0]()
    emitter._flush()
    return (CLOCK[0]() - started) / events * 1e6


def untimed_clock() -> HostClock:
    clock = HostClock()
    clock.every = UNTIMED
    clock.counter = lambda key: [1]          # every route's count starts past its first (timed) step
    return clock


def batch(bs: int) -> dict[str, torch.Tensor]:
    return {"tokens": torch.ones(bs, 1, dtype=torch.long), "positions": torch.ones(bs, 1, dtype=torch.long),
            "slots": torch.arange(bs)}


def probes(bs: int, runner: GraphRunner, emitter: Emitter, idle: Emitter) -> dict[str, Callable[[], float]]:
    """Each probe: () -> mean µs per call over the probe's own calls. ``emitter`` hands its events to
    a writer process (as in a run to a file or a collector); ``idle`` is never started."""
    inputs = batch(bs)
    runner.step(inputs)                                          # the route of this size is made
    route = runner._plain_route(inputs, "decode")
    pairs = [(runner._buffers.tensors[s.name].narrow(s.batch_dim, 0, bs), inputs[s.name]) for s in runner.inputs]
    step_fn = runner._capturer.graphs[bs].call
    shape = BatchShape("decode", bs, 1)
    clock = HostClock()
    sink: list = []
    event = ("decode", "graph", bs, bs, bs, 0, None, None)

    def empty():
        pass

    def floor():
        sink.append(event)

    def bare():
        for rows, value in pairs:
            rows.copy_(value, non_blocking=True)
        step_fn()

    def route_lookup():
        runner._plain_route(inputs, "decode")

    def input_check():
        fits(inputs, route.expected, route.cuda_index)

    def dispatch():
        runner.decide(shape)

    def timing():
        clock.stop(clock.record_start())

    def record():
        idle.step("decode", "graph", bs, bs, bs, 0, None, None)

    fields = getattr(route, "event", None) or ("decode", "graph", bs, bs, bs, 0, None, None)
    hand_off = getattr(idle, "step_fields", None) or (lambda f, t: idle.step(*f[:7], t, f[7]))  # code before 37

    def record_fields():
        hand_off(fields, None)

    def cleared(fn, calls):
        def measure():
            sink.clear()
            idle._queue.clear()
            return per_call_us(fn, calls)
        return measure

    def without(fn, calls, swap):
        def measure():
            undo = swap()
            try:
                return per_call_us(fn, calls)
            finally:
                undo()
        return measure

    def flush():
        idle._queue.clear()
        return flush_per_event_us(idle, record_fields, 20000)

    def events_file():
        """Per event: a flush to the events file's sink, the way a run's flush thread does it (each
        step's line made from its queued values, then written)."""
        with tempfile.TemporaryDirectory() as folder:
            to_file = Emitter(JsonlSink(os.path.join(folder, "events.jsonl")), RUN)
            to_file.sink.open(to_file.run)
            for _ in range(5000):
                to_file.step_fields(fields, None)      # as record_fields queues them
            started = CLOCK[0]()
            to_file._flush()
            elapsed = CLOCK[0]() - started
            to_file.sink.close()
        return elapsed / 5000 * 1e6

    def handed_over():
        """Per event: the flush thread's hand-over of queued steps to the writer process."""
        emitter.flush()
        for _ in range(5000):
            emitter.step_fields(fields, None)
        started = CLOCK[0]()
        emitter._flush()
        return (CLOCK[0]() - started) / 5000 * 1e6

    return {"empty": empty, "floor": floor, "bare": bare, "route": route_lookup, "input_check": input_check,
            "dispatch": dispatch, "timing": timing, "event": record, "event_fields": record_fields,
            "flush": flush, "events_file": events_file, "handed_over": handed_over,
            "cleared": cleared, "without": without}


def step_sides(bs: int, runner: GraphRunner, emitter: Emitter, calls: int, cleared, without,
               suffix: str = "") -> dict[str, Callable[[], float]]:
    """The whole step of ``runner`` (one core's), measured four ways (module docstring)."""
    inputs = batch(bs)
    runner.step(inputs)                                          # the route of this size is made

    def step():
        runner.step(inputs)

    def no_emitter():
        runner.emitter = None
        return lambda: setattr(runner, "emitter", emitter)

    def no_clock():
        kept, runner._clock = runner._clock, untimed_clock()
        runner._routes.forget()                                  # routes hold the clock's counter cells
        runner.step(inputs)

        def undo():
            runner._clock = kept
            runner._routes.forget()
            runner.step(inputs)
        return undo

    def gc_off():
        gc.disable()
        return gc.enable

    return {f"step_no_emitter{suffix}": without(step, calls, no_emitter),
            f"step_untimed{suffix}": without(step, calls, no_clock),
            f"step{suffix}": cleared(step, calls), f"step_gc_off{suffix}": without(step, calls, gc_off)}


PARTS = (("empty", "empty call"), ("floor", "floor: call + list append"), ("bare", "bare step (copies + call)"),
         ("route", "route lookup"), ("input_check", "input check (fast match)"),
         ("dispatch", "dispatch (first step of a key only)"), ("timing", "timing (host clock start + stop)"),
         ("event", "event (Emitter.step, 8 arguments)"), ("event_fields", "event (Emitter.step_fields, route's tuple)"),
         ("flush", "flush thread, per event (to a sink)"), ("events_file", "events file sink, per event (JSON)"),
         ("handed_over", "handed to the writer process, per event"))
STEPS = (("step_no_emitter", "step, no emitter"), ("step_untimed", "step, untimed"), ("step", "step"),
         ("step_gc_off", "step, gc off"))
CORE_SUFFIX = {"python": "", "compiled": "_compiled"}      # the compiled core's rows: key + suffix


def stages(step_cores: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(key, label) of every row, the whole step's once per core (the compiled core's labelled so)."""
    return PARTS + tuple((key + CORE_SUFFIX[core], label + (" (compiled)" if core == "compiled" else ""))
                         for core in step_cores for key, label in STEPS)


STAGES = stages(("python",))          # the rows of the Python core alone


def measure_size(bs: int, runners: dict[str, GraphRunner], emitter: Emitter, idle: Emitter, rounds: int,
                 calls: int) -> dict[str, list[float]]:
    p = probes(bs, runners["python"] if "python" in runners else runners["compiled"], emitter, idle)
    cleared, without = p["cleared"], p["without"]
    sides = {"empty": cleared(p["empty"], calls), "floor": cleared(p["floor"], calls),
             "bare": cleared(p["bare"], calls), "route": cleared(p["route"], calls),
             "input_check": cleared(p["input_check"], calls), "dispatch": cleared(p["dispatch"], calls),
             "timing": cleared(p["timing"], calls), "event": cleared(p["event"], calls),
             "event_fields": cleared(p["event_fields"], calls), "flush": p["flush"], "events_file": p["events_file"],
             "handed_over": p["handed_over"]}
    for core, runner in runners.items():
        sides.update(step_sides(bs, runner, emitter, calls, cleared, without, CORE_SUFFIX[core]))
    names = list(sides)
    for side in sides.values():                                  # warm-up
        side()
    results = rotated([lambda _round, side=sides[name]: side() for name in names], range(rounds))
    return dict(zip(names, results))


def summarise(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    bare = statistics.median(samples["bare"])
    out = {}
    for name, values in samples.items():
        median = statistics.median(values)
        out[name] = {"median_us": median, "spread_us": max(values) - min(values), "rounds": values}
        if name.startswith("step"):
            out[name]["added_us"] = median - bare
    return out


def run(sizes: list[int], rounds: int, calls: int, clock: str = "wall",
        step_cores: tuple[str, ...] = ("python",)) -> dict:
    CLOCK[0] = CLOCKS[clock]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def trivial(tokens, positions, slots):
        return tokens, positions

    # as in a run: its flush thread running, its events handed to a writer process (to /dev/null)
    emitter = Emitter(JsonlSink(os.devnull), RUN, flush_interval_s=0.2).start()
    idle = Emitter(NullSink(), RUN)                              # never started: its queue is read inline
    runners = {}
    for core in step_cores:                                      # the same step and plan, one runner per core
        runners[core] = GraphRunner(trivial, decode_inputs(max(sizes)), CapturePlan(tuple(sorted(set(sizes)))),
                                    backend="static", device="cpu", emitter=emitter, progress=False, step_core=core)
        runners[core].capture()
    result = {"torch": torch.__version__, "rounds": rounds, "calls": calls, "clock": clock,
              "cores": list(step_cores), "sizes": {}}
    try:
        for bs in sizes:
            result["sizes"][str(bs)] = summarise(measure_size(bs, runners, emitter, idle, rounds, calls))
    finally:
        emitter.close()
        torch.set_num_threads(threads)
    return result


def caption(result: dict) -> str:
    return (f"host µs per call on the CPU ({result['clock']} clock; static backend, trivial step, torch "
            f"{result['torch']}): median of "
            f"{result['rounds']} rounds of {result['calls']} calls, order rotating per round; spread: largest "
            f"minus smallest round; added: less the bare step")


def print_table(result: dict) -> None:
    sizes = list(result["sizes"])
    print(caption(result))
    head = "".join(f" {'bs ' + bs:>9} {'spread':>7} {'added':>7}" for bs in sizes)
    print(f"{'stage':<44}{head}")
    for key, label in stages(tuple(result["cores"])):
        cells = ""
        for bs in sizes:
            row = result["sizes"][bs][key]
            added = f"{row['added_us']:7.2f}" if "added_us" in row else f"{'':>7}"
            cells += f" {row['median_us']:9.3f} {row['spread_us']:7.3f} {added}"
        print(f"{label:<44}{cells}")


def markdown(result: dict) -> str:
    sizes = list(result["sizes"])
    rows = []
    for key, label in stages(tuple(result["cores"])):
        cells = [label]
        for bs in sizes:
            row = result["sizes"][bs][key]
            added = f", added {row['added_us']:.2f}" if "added_us" in row else ""
            cells.append(f"{row['median_us']:.3f} (spread {row['spread_us']:.3f}{added})")
        rows.append(cells)
    return caption(result) + "\n\n" + markdown_table(["stage"] + [f"bs {bs} µs" for bs in sizes], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,8,64")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall: perf_counter; thread: the main thread's CPU time (time.thread_time), which "
                             "other processes on a shared machine move less, and which leaves out the flush "
                             "thread's share of the GIL (its own row gives it)")
    add_core_option(parser)
    parser.add_argument("--json", help="also write the figures as JSON to this file")
    parser.add_argument("--out", help="also write host_path_bench.json and host_path_bench.md into this folder")
    options = parser.parse_args(argv)
    step_cores = runner_cores(parser, options.core)
    result = run([int(s) for s in options.sizes.split(",")], options.rounds, options.calls, options.clock, step_cores)
    print_table(result)
    write_json(options.json, result)
    write_folder(options.out, "host_path_bench", result, markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
