"""Where a traced step's host time goes: each stage of a ``--step`` step, on any machine.

    python -m benchmarks.trace_stages [--rounds 21] [--steps 4000] [--core both] [--json FILE]

One process, a trivial step (a Python call that replays a stand-in CUDA graph, so the replay
hook and the graph path of the routing run as on a GPU; with CUDA in use the timing stage is
CUDA events on 1 step in N, else the host clock on every step). Batch sizes cycle over
``SIZES`` against graphs captured for ``CAPTURED``: graph, padded and eager (above the largest)
steps, as the host-bound loop of ``benchmarks.trace_loop`` runs. Every figure is µs per step, the
median over alternating rounds (the order of the sides rotating round by round) with its
spread (the interquartile range over the rounds; the JSON also has the full range):

- ``floor``: what recording a step cannot go below: a bare Python call and a list append;
- the stages of a traced step, each alone around the untraced step: ``dispatch`` (the step wrapper
  and reading the batch from the arguments), ``replay hook`` (a graph replay counted and kept for
  the step's end), ``timing`` (start and stop of the step's clock), ``routing`` (deciding
  graph / padded / eager and the cause from the graphs replayed and the tracer's state), ``event``
  (``Emitter.step``: counting and queueing the step), ``sink`` (the emitter thread's work per
  event in the program's process, which holds the GIL the program needs: taking the queued values
  and handing them to the writer process, ``replayscope.runner.event_writer``, as one marshal frame),
  ``converted here`` (what that thread did per event before the writer process, and still does
  where no writer is used: the wire dict and its line in the events file);
- ``step path``: the same, its emitter's thread stopped and its queue cleared: the whole step's
  work on the program's thread (dispatch, timing, routing, the event and the step's bookkeeping);
- ``events dropped``: the same, its events handed to a writer process that writes them to
  /dev/null (the emitter's thread hands them over; the writer converts them on its own core);
- ``traced step``: the whole step traced (the emitter's thread running, its events written to a
  file by its writer process; each round ends with the hand-over of its own events, timed, so that
  the emitter thread's work for them is in its time, then a flush that waits, untimed, for the
  writer to write them on its own core) minus the same step untraced; the collections the garbage
  collector ran in each side;
- ``writer cpu``: the writer process's CPU time per event (``/proc``, all rounds of ``sink``
  together: a 10 ms tick), spent on a core of its own, not the program's;
- ``--core``: the step core the tracers run (``replayscope.runner.trace.step_core``): ``compiled``,
  ``python`` (the reference), or ``both`` (the default where the compiled one is built): every
  figure measured for each, a column per core. ``timing`` and ``routing`` call the Python
  reference's methods in both (the compiled core does their common case inside ``step_end``: its
  figures are in ``dispatch``, ``replay hook`` and ``step path``);
- ``graph-tree step``: the zero-configuration step, the same program called through a stand-in
  of Inductor's graph-tree manager (each call of a reduce-overhead function a step, no
  ``--step``), traced minus untraced, its events written as the traced step's are.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import statistics
import tempfile
import time
import types
from typing import Any, Callable

import torch

from benchmarks.harness import NullSink, StandInGraph, write_json
from benchmarks.pairing import rotated
from replayscope.runner.emitter import Emitter
from replayscope.contract.sinks import JsonlSink
from replayscope.runner.timing import CudaClock
from replayscope.runner.trace.graph_trees import install_graph_tree_hooks
from replayscope.runner.trace.hooks import Patches, install_cuda_graph_hooks
from replayscope.runner.trace.recipes import step_wrapper, tensor_batch
from replayscope.runner.trace.settings import TraceSettings
from replayscope.runner.trace.step_core import cores
from replayscope.runner.trace.tracer import Tracer, tracer_class

CAPTURED = (1, 2, 4, 8, 16)
SIZES = (1, 3, 8, 12, 24)         # graph, padded, graph, padded, eager (above the largest graph)


class Program:
    """The traced program: graphs captured per size (hooks on), a step that replays the graph of
    the smallest size that holds its batch, or runs eager above the largest."""

    def __init__(self, tracer: Tracer | None = None, patches: Patches | None = None):
        graph_class = type("Graph", (StandInGraph,), {})      # its own class: its own hooks, or none
        if tracer is not None:
            install_cuda_graph_hooks(tracer, types.SimpleNamespace(CUDAGraph=graph_class), patches)
        self.graphs: dict[int, StandInGraph] = {}
        for bs in CAPTURED:
            graph = graph_class()
            graph.capture_begin()       # the tracer reads the size from this frame's ``bs``
            graph.capture_end()
            self.graphs[bs] = graph
        self.graph_for = {bs: next((self.graphs[s] for s in CAPTURED if s >= bs), None) for bs in SIZES}
        self.inputs = [torch.zeros(bs, 1, dtype=torch.long) for bs in SIZES]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        graph = self.graph_for[tokens.shape[0]]
        if graph is not None:
            graph.replay()
        return tokens


class StandInNode:
    def check_invariants(self, inputs):
        return True


def tree_manager(program: Program) -> type:
    """Inductor's graph-tree manager reduced to what the hooks see: ``run`` is one call of a
    reduce-overhead function, here the program's step on its first input."""
    class Manager:
        ids_to_funcs: dict = {}

        def run(self, new_inputs, function_id):
            return program.step(new_inputs[0])

        def record_function(self, new_inputs, function_id):
            return new_inputs
    return Manager


def new_tracer(path: str, core: str) -> Tracer:
    return tracer_class(core)(TraceSettings(trace_id="bench", name="bench"), make_sink=lambda run_id: JsonlSink(path))


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def _loop(fn: Callable[[Any], Any], inputs: list, steps: int, clock: Callable[[], float],
          then: Callable[[], Any] | None = None, after: Callable[[], Any] | None = None) -> float:
    """µs per call of ``fn`` over ``steps`` calls, the inputs taken in turn, and ``then()`` after
    them (a traced round's hand-over: the emitter thread's work for its own events is in its time,
    whenever that thread would have done it); ``after()`` runs untimed (waiting for the writer
    process to write them, on a core of its own, so that the next round starts with it idle)."""
    n = len(inputs)
    batches = [inputs[i % n] for i in range(steps)]
    started = clock()
    for x in batches:
        fn(x)
    if then is not None:
        then()
    elapsed = clock() - started
    if after is not None:
        after()
    return elapsed / steps * 1e6


class GcCount:
    """Collections the garbage collector ran, and the seconds spent in them, while counting."""

    def __init__(self):
        self.collections = [0, 0, 0]
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.collections[info["generation"]] += 1
            self.seconds += time.perf_counter() - self._started

    def __enter__(self) -> "GcCount":
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self)


def process_cpu_s(pid: int) -> float:
    """CPU seconds another process has used (user and system), from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def summary(values: list[float]) -> dict[str, float]:
    """The median, the spread of the middle half (interquartile range) and the full range."""
    quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": statistics.median(values), "spread": quartiles[2] - quartiles[0],
            "range": max(values) - min(values)}


def measure(rounds: int, steps: int, workdir: str, clock: str = "wall", core: str = "python") -> dict[str, Any]:
    Tracer = tracer_class(core)     # noqa: N806 (the class every tracer of this measure is made of)
    tracer, patches = new_tracer(os.path.join(workdir, f"traced-{core}.jsonl"), core), Patches()
    program = Program(tracer, patches)
    inputs = program.inputs
    traced = step_wrapper(tracer, program.step, tensor_batch, "bench")
    plain = Program().step                     # untraced: each stage alone is measured around it
    closed = Tracer(TraceSettings(trace_id="closed", name="closed"), make_sink=lambda run_id: None)
    closed.closed = True                       # step_begin refuses at once: the wrapper and the batch alone
    dispatch_only = step_wrapper(closed, plain, tensor_batch, "bench")
    hooks_on = Tracer(TraceSettings(trace_id="hooks", name="hooks"), make_sink=lambda run_id: NullSink())
    hooks_on.in_step = True                    # its replays are appended to a step's graphs, as in a step
    hooked, step_graphs = Program(hooks_on, patches).step, hooks_on.step_graphs

    def replay_hook(x):
        result = hooked(x)
        step_graphs.clear()
        return result
    queue: list = []
    append, seq = queue.append, itertools.count()

    def floor(x):
        append((next(seq), 8))                  # a record of atoms, as an event is (untracked by the gc)
        return plain(x)

    def timing(x):
        # On CUDA the events go back to the pool at once (the emitter's thread does it once read).
        CudaClock.drop(tracer._stop_timing(tracer._start_timing("decode", 8)))
        return plain(x)

    bs_of = {id(x): x.shape[0] for x in inputs}
    graph_of = {id(x): program.graph_for[x.shape[0]] for x in inputs}
    replayed: list = []

    def routing(x):
        graph = graph_of[id(x)]
        if graph is not None:
            replayed.append(graph)
        tracer._route(bs_of[id(x)], replayed)      # empties the list
        return plain(x)

    record = {"run_id": f"stages-{core}", "name": "stages", "source": "trace", "started_at": time.time(),
              "backend": "trace", "model": "bench", "device": "cpu", "config": {}}
    events = Emitter(JsonlSink(os.path.join(workdir, f"events-{core}.jsonl")), record)
    events.sink.open(events.run)                # its thread is not started: the rounds clear its queue
    handing = Emitter(JsonlSink(os.devnull), record, flush_interval_s=3600).start()   # a writer process

    def event(x):
        events.step("decode", "graph", 8, 8, 8, 0, None, None, None)
        return plain(x)

    # The same program traced with its events written to /dev/null by its writer process: the step's
    # path on the program's thread, and the emitter thread's hand-over (the lines made in the writer).
    dropping = Tracer(TraceSettings(trace_id="drop", name="drop"), make_sink=lambda run_id: JsonlSink(os.devnull))
    dropped = step_wrapper(dropping, Program(dropping, patches).step, tensor_batch, "bench")
    # The same program traced, its emitter's thread stopped once its run is open (the queue cleared
    # each round): the whole of the step's work on the program's thread, none of the emitter's.
    queuing = Tracer(TraceSettings(trace_id="queue", name="queue"), make_sink=lambda run_id: NullSink())
    queued = step_wrapper(queuing, Program(queuing, patches).step, tensor_batch, "bench")
    # Zero configuration: each call of a reduce-overhead function a step (no --step), same program.
    trees_tracer = new_tracer(os.path.join(workdir, f"trees-{core}.jsonl"), core)
    traced_manager = tree_manager(Program(trees_tracer, patches))
    install_graph_tree_hooks(trees_tracer, types.SimpleNamespace(CUDAGraphTreeManager=traced_manager,
                                                                 CUDAGraphNode=StandInNode), patches)
    traced_tree, untraced_tree = traced_manager(), tree_manager(Program())()
    tree_inputs = {id(x): [x] for x in inputs}

    def tree_call(x):
        return untraced_tree.run(tree_inputs[id(x)], 0)

    def traced_tree_call(x):
        return traced_tree.run(tree_inputs[id(x)], 0)

    traced(inputs[0])                           # the runs open (their emitter threads start) outside the rounds
    dropped(inputs[0])
    queued(inputs[0])
    traced_tree_call(inputs[0])
    for opened in (tracer, dropping, queuing, trees_tracer):
        opened._starter.join()                 # each run's writer process started before the rounds
    queuing.emitter._stop.set()
    queuing.emitter._thread.join()
    sides: dict[str, Callable[[Any], Any]] = {
        "untraced": plain, "floor": floor, "dispatch": dispatch_only, "replay hook": replay_hook,
        "timing": timing, "routing": routing, "event": event, "traced step": traced, "events dropped": dropped,
        "step path": queued,
        "tree call": tree_call, "graph-tree step": traced_tree_call}
    gc_counts = {name: GcCount() for name in sides}
    traced_emitters = {"traced step": tracer.emitter, "events dropped": dropping.emitter,
                       "graph-tree step": trees_tracer.emitter}

    def side(name: str) -> Callable[[int], float]:
        def one_round(_round: int) -> float:
            queue.clear()
            events._queue.clear()
            queuing.emitter._queue.clear()
            with gc_counts[name]:
                emitter = traced_emitters.get(name)
                return _loop(sides[name], inputs, steps, CLOCKS[clock], emitter and emitter._flush,
                             emitter and emitter.flush)
        return one_round

    names = list(sides)
    gc.collect()
    per_round = dict(zip(names, rotated([side(n) for n in names], range(rounds))))
    # The emitter thread's work per event (the GIL it holds), measured here on the main thread: handing
    # the values to the writer process, and converting them here (no writer).
    sink_us, converted_us = [], []
    handing.flush()
    writer_cpu = process_cpu_s(handing.writer_pid)
    for emitter, figures in ((handing, sink_us), (events, converted_us)):
        for _ in range(rounds):
            emitter.flush()
            for _ in range(steps):
                emitter.step("decode", "graph", 8, 8, 8, 0, None, None, None)
            started = CLOCKS[clock]()
            emitter._flush()
            figures.append((CLOCKS[clock]() - started) / steps * 1e6)
        emitter.flush()
    writer_cpu_us = (process_cpu_s(handing.writer_pid) - writer_cpu) / (rounds * steps) * 1e6
    handing.close()
    patches.remove()
    tracer.close()
    dropping.close()
    queuing.emitter._queue.clear()
    queuing.close()
    trees_tracer.close()
    hooks_on.in_step = False
    hooks_on.close()
    base = per_round["untraced"]
    result: dict[str, Any] = {"core": core, "clock": clock, "steps_per_round": steps, "rounds": rounds, "cuda_events": torch.cuda.is_initialized(),
                              "untraced_us": summary(base), "stages": {}}
    for name in names[1:]:
        if name == "tree call":
            continue
        against = per_round["tree call"] if name == "graph-tree step" else base
        added = [v - b for v, b in zip(per_round[name], against)]
        result["stages"][name] = {**summary(added), "gc": gc_counts[name].collections,
                                  "gc_ms": gc_counts[name].seconds * 1e3}
    result["stages"]["sink"] = summary(sink_us)
    result["stages"]["converted here"] = summary(converted_us)
    result["stages"]["writer cpu"] = {"median": writer_cpu_us, "spread": 0.0, "range": 0.0}
    result["untraced_gc"] = gc_counts["untraced"].collections
    result["traced_steps"] = tracer.steps
    result["modes"] = dict(tracer.modes)
    result["graph_tree_modes"] = dict(trees_tracer.modes)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--steps", type=int, default=4000, help="steps per side per round")
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="wall",
                        help="wall: elapsed time; cpu: the process's CPU time, all its threads (the emitter's "
                             "too), which other processes on a busy machine do not inflate")
    parser.add_argument("--core", choices=("both", "compiled", "python"), default="both",
                        help="the step core traced (both: each in turn, a column per core; the compiled one "
                             "where it is built)")
    parser.add_argument("--json", help="also write the figures as JSON to this file")
    options = parser.parse_args(argv)
    chosen = list(cores()) if options.core == "both" else [options.core]
    if options.core not in ("both", *cores()):
        parser.error(f"--core {options.core}: the compiled step core is not built here "
                     f"(python3 setup.py build_ext --inplace), or REPLAYSCOPE_PURE_PYTHON=1 is set")
    if torch.cuda.is_available():
        torch.cuda.init()            # as a traced GPU program: the timing stage is CUDA events on 1 step in N
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for core in chosen:
            results[core] = measure(options.rounds, options.steps, workdir, options.clock, core)
    first = results[chosen[0]]
    print(f"{options.clock} clock; untraced step {first['untraced_us']['median']:.2f} us; per step, added over it "
          f"(median of {options.rounds} alternating rounds of {options.steps} steps, spread = interquartile range), "
          f"per step core:")
    print(f"{'stage':<16}" + "".join(f" {core + ' us':>13} {'spread':>7} {'gc gen0/1/2':>12}" for core in chosen))
    for name in first["stages"]:
        row = f"{name:<16}"
        for core in chosen:
            figures = results[core]["stages"][name]
            gcs = "/".join(str(n) for n in figures.get("gc", ())) or "-"
            row += f" {figures['median']:13.2f} {figures['spread']:7.2f} {gcs:>12}"
        print(row)
    for core in chosen:
        result = results[core]
        print(f"{core}: untraced gc {'/'.join(map(str, result['untraced_gc']))}; traced steps "
              f"{result['traced_steps']}, modes {result['modes']}")
    write_json(options.json, results if options.core == "both" else first)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
