"""Where a traced step's host time goes: each stage of a ``--step`` step, on any machine.

    python -m benchmarks.trace_stages [--rounds 21] [--steps 4000] [--core both] [--json FILE]
    python -m benchmarks.trace_stages --program host --rounds 300 --steps 100    # inside a host-bound loop

One process, ``--program trivial`` (the default): a trivial step (a Python call that replays a
stand-in CUDA graph, so the replay hook and the graph path of the routing run as on a GPU; with
CUDA in use the timing stage is CUDA events on 1 step in N, else the host clock on every step);
``--program host``: the host-bound loop of ``benchmarks.trace_loop`` itself (``HostBoundProgram``:
real CUDA graphs and layers, a scheduler's pass before each step, one synchronise per 100 steps
left out of the time), where each stage costs what it costs among torch's own host work. Batch
sizes cycle over ``SIZES`` against graphs captured for ``CAPTURED``: graph, padded and eager (above
the largest) steps. Every figure is µs per step, the median over alternating rounds (the order of
the sides rotating round by round) with its spread (the interquartile range over the rounds; the
JSON also has the full range) and the mean with its standard error. Rounds of 100 steps and a few
hundred of them pair the sides closely in time, which a host whose speed moves needs; each side
runs its own copy of the program, which leaves offsets of about ±1 µs between sides in the host
loop:

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
- ``spin``: a plain Python loop of ~2 µs before the untraced step (a control: time that touches
  little memory adds just itself);
- ``step path``: the same, its emitter's thread stopped and its queue cleared: the whole step's
  work on the program's thread (dispatch, timing, routing, the event and the step's bookkeeping);
  ``step path, untimed`` / ``timed 1 in 8`` / ``timed 1 in 64`` / ``no event``: the same with its
  steps never timed (but each key's first), timed at another rate, or its event a Python no-op:
  what timing and the event cost among the rest of the step;
- ``CUDA event pair`` (and its start, end, untimed end alone), with CUDA in use: the untraced
  step with two CUDA events recorded around 1 step in the default N and no Python around them:
  what step timing's driver calls cost in this loop;
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
import functools
import gc
import itertools
import os
import statistics
import tempfile
import time
import types
from typing import Any, Callable

import torch

from benchmarks.harness import NullSink, StandInGraph, python_spin, write_json
from benchmarks.pairing import rotated
from benchmarks.trace_loop_program import schedule
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
        graph_class = type("Graph", (self.graph_base(),), {})      # its own class: its own hooks, or none
        if tracer is not None:
            install_cuda_graph_hooks(tracer, types.SimpleNamespace(CUDAGraph=graph_class), patches)
        self.graphs: dict[int, Any] = {}
        for bs in CAPTURED:
            self.graphs[bs] = self.capture(graph_class, bs)     # the tracer reads the size from ``bs``
        self.graph_for = {bs: next((self.graphs[s] for s in CAPTURED if s >= bs), None) for bs in SIZES}
        self.inputs = self.make_inputs()

    def graph_base(self) -> type:
        return StandInGraph

    def capture(self, graph_class: type, bs: int) -> Any:
        graph = graph_class()
        graph.capture_begin()
        graph.capture_end()
        return graph

    def make_inputs(self) -> list[torch.Tensor]:
        return [torch.zeros(bs, 1, dtype=torch.long) for bs in SIZES]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        graph = self.graph_for[tokens.shape[0]]
        if graph is not None:
            graph.replay()
        return tokens


class HostBoundProgram(Program):
    """``benchmarks.trace_loop``'s host-bound program in this process: 8 layers 512 wide, graphs
    captured per size in one pool (CUDA graphs on CUDA; on the CPU, stand-ins whose replay runs the
    layers on the static buffers), the batch copied into the static input, eager above the largest.
    ``between`` is the loop's own Python before each step (a scheduler's pass over 96 requests)."""

    LAYERS, REQUESTS = 8, 96

    def __init__(self, tracer: Tracer | None = None, patches: Patches | None = None):
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.width = 512 if self.device == "cuda" else 64        # on the CPU: the loop's shape, quickly
        dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        generator = torch.Generator().manual_seed(0)
        self.weights = [(torch.randn(self.width, self.width, generator=generator) / self.width ** 0.5)
                        .to(self.device, dtype) for _ in range(self.LAYERS)]
        self.static_in = torch.zeros(max(CAPTURED), self.width, device=self.device, dtype=dtype)
        self.static_out: dict[int, torch.Tensor] = {}
        self.pool = torch.cuda.graph_pool_handle() if self.device == "cuda" else None
        super().__init__(tracer, patches)
        self.size_of = {id(graph): bs for bs, graph in self.graphs.items()}
        if self.device == "cuda":
            torch.cuda.synchronize()
        requests = [[64 + k % 7, 0] for k in range(self.REQUESTS)]
        self.between = lambda: schedule(requests)

    def graph_base(self) -> type:
        return torch.cuda.CUDAGraph if self.device == "cuda" else _CpuGraph

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        for weight in self.weights:
            hidden = torch.nn.functional.linear(hidden, weight)
        return hidden

    def capture(self, graph_class: type, bs: int) -> Any:
        graph = graph_class()
        if self.device != "cuda":
            graph.work = lambda: self.static_out[bs].copy_(self.forward(self.static_in[:bs]))
            graph.capture_begin()
            self.static_out[bs] = self.forward(self.static_in[:bs])
            graph.capture_end()
            return graph
        side = torch.cuda.Stream()           # warmed up on a side stream, then captured, as programs do
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.forward(self.static_in[:bs])
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph, pool=self.pool):
            self.static_out[bs] = self.forward(self.static_in[:bs])
        return graph

    def make_inputs(self) -> list[torch.Tensor]:
        return [torch.randn(bs, self.width, device=self.device, dtype=self.static_in.dtype) for bs in SIZES]

    def step(self, hidden: torch.Tensor) -> torch.Tensor:
        bs = hidden.shape[0]
        graph = self.graph_for[bs]
        if graph is None:
            return self.forward(hidden)
        self.static_in[:bs].copy_(hidden)
        graph.replay()
        return self.static_out[self.size_of[id(graph)]][:bs]

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()


class _CpuGraph(StandInGraph):
    """A stand-in graph whose replay runs its size's layers (the host-bound program on the CPU)."""

    def replay(self):
        self.work()


PROGRAMS = {"trivial": Program, "host": HostBoundProgram}
SYNC_EVERY = 100        # the host-bound loop's synchronise: one per this many steps, left out of its time
SPARSER = (8, 64)       # the step path also with its steps timed 1 in this many (the default: CUDA_TIME_EVERY)
SPIN_US = 2.0           # the ``spin`` side's plain Python before each step


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


def cuda_event_sides(step: Callable[[Any], Any], every: int) -> dict[str, Callable[[Any], Any]]:
    """The untraced step with CUDA events recorded around 1 step in ``every`` and nothing else (the
    events made once, recorded on the stream taken once, never read): what the CUDA calls of step
    timing cost in this loop, apart from the Python that makes, records and reads them."""
    stream = torch.cuda.current_stream()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    record_start, record_end = functools.partial(start.record, stream), functools.partial(end.record, stream)

    def sampled(before: Callable[[], Any] | None, after: Callable[[], Any] | None) -> Callable[[Any], Any]:
        counter = itertools.count()

        def side(x):
            if next(counter) % every:
                return step(x)
            if before is not None:
                before()
            result = step(x)
            if after is not None:
                after()
            return result
        return side
    plain_end = torch.cuda.Event()
    return {f"CUDA event pair, 1 in {every}": sampled(record_start, record_end),
            f"CUDA start event, 1 in {every}": sampled(record_start, None),
            f"CUDA end event, 1 in {every}": sampled(None, record_end),
            f"CUDA end untimed, 1 in {every}": sampled(None, functools.partial(plain_end.record, stream))}


class _NoEvents:
    """An emitter whose step records nothing (a plain Python call): the step path without its event."""

    def step(self, *fields):
        pass


def new_tracer(path: str, core: str) -> Tracer:
    return tracer_class(core)(TraceSettings(trace_id="bench", name="bench"), make_sink=lambda run_id: JsonlSink(path))


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def _loop(fn: Callable[[Any], Any], inputs: list, steps: int, clock: Callable[[], float],
          then: Callable[[], Any] | None = None, after: Callable[[], Any] | None = None,
          between: Callable[[], Any] | None = None, sync: Callable[[], Any] | None = None) -> float:
    """µs per call of ``fn`` over ``steps`` calls, the inputs taken in turn, and ``then()`` after
    them (a traced round's hand-over: the emitter thread's work for its own events is in its time,
    whenever that thread would have done it); ``after()`` runs untimed (waiting for the writer
    process to write them, on a core of its own, so that the next round starts with it idle).
    A host-bound program's loop: ``between()`` before each call (the loop's own Python), and
    ``sync()`` after every ``SYNC_EVERY`` calls, its wait left out of the time (the host's launch
    loop alone, as ``benchmarks.trace_loop_program`` times it)."""
    n = len(inputs)
    batches = [inputs[i % n] for i in range(steps)]
    if between is None:
        started = clock()
        for x in batches:
            fn(x)
        if then is not None:
            then()
        elapsed = clock() - started
    else:
        sync()
        elapsed, block = 0.0, clock()
        for i, x in enumerate(batches):
            between()
            fn(x)
            if i % SYNC_EVERY == SYNC_EVERY - 1:
                elapsed += clock() - block
                sync()
                block = clock()
        if then is not None:
            then()
        elapsed += clock() - block
        sync()
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
    """The median, the spread of the middle half (interquartile range) and the full range; the
    mean (every round's share of what happens now and then) and its standard error."""
    quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": statistics.median(values), "spread": quartiles[2] - quartiles[0],
            "range": max(values) - min(values), "mean": statistics.fmean(values),
            "sem": statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0}


def measure(rounds: int, steps: int, workdir: str, clock: str = "wall", core: str = "python",
            program_name: str = "trivial") -> dict[str, Any]:
    Tracer = tracer_class(core)     # noqa: N806 (the class every tracer of this measure is made of)
    Program = PROGRAMS[program_name]       # noqa: N806 (the program every side runs, each its own instance)
    tracer, patches = new_tracer(os.path.join(workdir, f"traced-{core}.jsonl"), core), Patches()
    program = Program(tracer, patches)
    inputs = program.inputs
    traced = step_wrapper(tracer, program.step, tensor_batch, "bench")
    untraced_program = Program()
    plain = untraced_program.step              # untraced: each stage alone is measured around it
    between, sync = getattr(untraced_program, "between", None), getattr(untraced_program, "sync", None)
    spin, spin_alone_us = python_spin(SPIN_US)
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

    def spun(x):                                # plain Python time before the step: does it add just itself?
        spin()
        return plain(x)

    raw_events = cuda_event_sides(plain, TraceSettings.time_every) if torch.cuda.is_initialized() else {}

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
    # The step path with one part left out, each in the program's loop: what that part costs there,
    # with everything else a step does around it (the stages alone above do not add up to it).
    untimed_tracer = Tracer(TraceSettings(trace_id="untimed", name="untimed", time_every=10**9),
                            make_sink=lambda run_id: NullSink())
    untimed = step_wrapper(untimed_tracer, Program(untimed_tracer, patches).step, tensor_batch, "bench")
    sparse_tracers = {every: Tracer(TraceSettings(trace_id=f"every-{every}", name=f"every-{every}", time_every=every),
                                    make_sink=lambda run_id: NullSink()) for every in SPARSER}
    sparse = {f"step path, timed 1 in {every}": step_wrapper(t, Program(t, patches).step, tensor_batch, "bench")
              for every, t in sparse_tracers.items()}
    silent_tracer = Tracer(TraceSettings(trace_id="silent", name="silent"), make_sink=lambda run_id: NullSink())
    silent = step_wrapper(silent_tracer, Program(silent_tracer, patches).step, tensor_batch, "bench")
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
    untimed(inputs[0])
    silent(inputs[0])
    for step in sparse.values():
        step(inputs[0])
    traced_tree_call(inputs[0])
    stopped_tracers = (queuing, untimed_tracer, silent_tracer, *sparse_tracers.values())
    for opened in (tracer, dropping, trees_tracer, *stopped_tracers):
        opened._starter.join()                 # each run's writer process started before the rounds
    for stopped in stopped_tracers:
        stopped.emitter._stop.set()
        stopped.emitter._thread.join()
    silent_emitter = silent_tracer.emitter
    silent_tracer.emitter = _NoEvents()       # the step's event: a Python call that records nothing
    sides: dict[str, Callable[[Any], Any]] = {
        "untraced": plain, "floor": floor, "spin": spun, "dispatch": dispatch_only, "replay hook": replay_hook,
        "timing": timing, "routing": routing, "event": event, "traced step": traced, "events dropped": dropped,
        "step path": queued, "step path, untimed": untimed, **sparse, "step path, no event": silent,
        "tree call": tree_call, "graph-tree step": traced_tree_call, **raw_events}
    gc_counts = {name: GcCount() for name in sides}
    traced_emitters = {"traced step": tracer.emitter, "events dropped": dropping.emitter,
                       "graph-tree step": trees_tracer.emitter}

    def side(name: str) -> Callable[[int], float]:
        def one_round(_round: int) -> float:
            queue.clear()
            events._queue.clear()
            for stopped in stopped_tracers:
                if stopped is not silent_tracer:
                    stopped.emitter._queue.clear()
            with gc_counts[name]:
                emitter = traced_emitters.get(name)
                return _loop(sides[name], inputs, steps, CLOCKS[clock], emitter and emitter._flush,
                             emitter and emitter.flush, between, sync)
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
    silent_tracer.emitter = silent_emitter
    for stopped in stopped_tracers:
        stopped.emitter._queue.clear()
        stopped.close()
    trees_tracer.close()
    hooks_on.in_step = False
    hooks_on.close()
    base = per_round["untraced"]
    result: dict[str, Any] = {"core": core, "program": program_name, "spin_alone_us": spin_alone_us,
                              "clock": clock, "steps_per_round": steps, "rounds": rounds, "cuda_events": torch.cuda.is_initialized(),
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
    parser.add_argument("--program", choices=tuple(PROGRAMS), default="trivial",
                        help="trivial: a call that replays a stand-in graph (the trace's own work alone); host: "
                             "the host-bound loop of benchmarks.trace_loop in this process (real CUDA graphs and "
                             "layers, a scheduler's pass before each step, one synchronise per 100 steps left "
                             "out of the time): what each stage costs among torch's own host work")
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
            results[core] = measure(options.rounds, options.steps, workdir, options.clock, core, options.program)
    first = results[chosen[0]]
    print(f"{options.program} program; spin alone {first['spin_alone_us']:.2f} us; "
          f"{options.clock} clock; untraced step {first['untraced_us']['median']:.2f} us; per step, added over it "
          f"(median of {options.rounds} alternating rounds of {options.steps} steps, spread = interquartile range), "
          f"per step core:")
    print(f"{'stage':<26}" + "".join(f" {core + ' us':>13} {'spread':>7} {'mean ± s.e.':>13} {'gc gen0/1/2':>12}"
                                     for core in chosen))
    for name in first["stages"]:
        row = f"{name:<26}"
        for core in chosen:
            figures = results[core]["stages"][name]
            gcs = "/".join(str(n) for n in figures.get("gc", ())) or "-"
            mean = f"{figures['mean']:.2f} ± {figures['sem']:.2f}" if "mean" in figures else "-"
            row += f" {figures['median']:13.2f} {figures['spread']:7.2f} {mean:>13} {gcs:>12}"
        print(row)
    for core in chosen:
        result = results[core]
        print(f"{core}: untraced gc {'/'.join(map(str, result['untraced_gc']))}; traced steps "
              f"{result['traced_steps']}, modes {result['modes']}")
    write_json(options.json, results if options.core == "both" else first)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
