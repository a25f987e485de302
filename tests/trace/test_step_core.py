"""The compiled step core (``_stepcore*.c``) against its Python reference (``steps.py``): the same
scripted programs through both give the same events and the same tracer counters; the C objects
hold no references they should not; CI runs the compiled core; without it the Python core runs."""

from __future__ import annotations

import gc
import inspect
import json
import os
import subprocess
import sys
import sysconfig
import types
import zipfile
from pathlib import Path

import pytest
import torch

from replayscope.contract import wire
from replayscope.runner.trace import step_core
from replayscope.runner.trace import causes
from replayscope.runner.trace.causes import Cause
from replayscope.runner.trace.hooks import Patches, install_cuda_graph_hooks
from replayscope.runner.trace.recipes import _BATCHES, step_wrapper, tensor_batch
from replayscope.runner.compiled import ENV_PURE_PYTHON
from replayscope.runner.trace.settings import TraceSettings
from replayscope.runner.trace.tracer import tracer_class
from tests.run_events import ListSink
from tests.trace.conftest import FakeCUDAGraph, FakeGraphContext
from tests.trace.test_tracer import FakeEvent, cuda_in_use  # noqa: F401 (a fixture)
from tests.compiled_checks import (compile_each_without_warnings, exported_names, memory_growth, needs_gcc,
                                   needs_gcc_and_nm)

compiled_only = pytest.mark.skipif(step_core.COMPILED is None, reason="the compiled step core is not built here "
                                                                      "(python3 setup.py build_ext --inplace)")
MUTATED = "skipping cudagraphs due to mutated inputs (6 instances). Found from : \n File \"model.py\", line 3"


class Harness:
    """A tracer of one core, its hooks on a graph class of its own, its events kept."""

    def __init__(self, core: str, time_every: int = 8):
        self.sinks: list[ListSink] = []
        self.tracer = tracer_class(core)(TraceSettings(trace_id="t0", name="test", command=("python", "p.py"),
                                                       time_every=time_every), make_sink=self._sink)
        self.graph_class = type("Graph", (FakeCUDAGraph,), {})
        self.patches = Patches()
        assert install_cuda_graph_hooks(self.tracer, types.SimpleNamespace(CUDAGraph=self.graph_class,
                                                                           graph=FakeGraphContext), self.patches)

    def _sink(self, run_id):
        self.sinks.append(ListSink())
        return self.sinks[-1]

    def capture(self, bs):
        graph = self.graph_class()
        with FakeGraphContext(graph):       # the tracer reads the size from this frame's ``bs``
            pass
        return graph

    def capture_unsized(self):
        graph = self.graph_class()
        with FakeGraphContext(graph):
            pass
        return graph

    def counters(self) -> dict:
        t = self.tracer
        return {"steps": t.steps, "total_replays": t.total_replays, "step_replays_total": t.step_replays_total,
                "modes": dict(t.modes), "reasons": dict(t.reasons), "in_step": t.in_step,
                "step_graphs": len(t.step_graphs), "replayed": sorted(t._replayed)}

    def finish(self) -> list[dict]:
        self.tracer.close()
        self.patches.remove()
        events = self.sinks[0].events if self.sinks else []
        for event in events:
            wire.validate_event(event)
        return events


def comparable(events: list[dict]) -> list[dict]:
    """The events without what differs between two runs of one program: clocks, and the run's
    config line naming its core."""
    kept = []
    for event in events:
        timed = event.get("duration_s") is not None
        event = {k: v for k, v in event.items() if not (k in ("ts", "started_at") or k.endswith(("_ts", "_s")))}
        if event["kind"] == "step":
            event["timed"] = timed
        kept.append(event)
    return kept


def script(h: Harness) -> None:
    """One program's steps, every case the cores share: graph, padded, eager above the largest, a
    graph of unknown size, Inductor's word, a recipe hint, a nested call, a step that raises, a
    batch not readable, a compile-time skip; then the tracer closed."""
    tracer = h.tracer
    graphs = {size: h.capture(size) for size in (1, 2, 4, 8)}
    unsized = h.capture_unsized()

    def program(tokens, nested=False, fail=False, graph=None):
        if graph is not None:
            graph.replay()
        if nested:
            traced(tokens)          # the inner call is part of this step
        if fail:
            raise ValueError("the program's own error")
        return tokens
    traced = step_wrapper(tracer, program, tensor_batch, "--step")
    rows = lambda n: torch.zeros(n, 1, dtype=torch.long)     # noqa: E731
    for n in (1, 2, 3, 5, 8, 2, 3):
        traced(rows(n), graph=graphs[min(s for s in graphs if s >= n)])
    traced(rows(12))                                          # eager: above the largest graph
    traced(rows(6), graph=unsized)                            # a graph of unknown size takes the batch
    traced(rows(6), graph=unsized)
    traced(rows(3), graph=graphs[2])                          # a graph smaller than the batch
    traced(rows(2), graph=graphs[2], nested=True)
    with pytest.raises(ValueError):
        traced(rows(4), graph=graphs[4], fail=True)
    traced(torch.zeros(3, 7), graph=graphs[4])                # floating: one token per row
    traced(rows(4).repeat(1, 5), graph=graphs[4])             # token ids: rows x columns tokens
    traced("no tensor here", graph=graphs[1])                 # the batch is not readable
    graphs[8].replay()                                        # outside any step
    assert tracer.step_begin("decode", 4, 4)                  # Inductor ran a function without its graph
    graphs[4].replay()
    tracer.step_inductor = Cause("mutated_inputs", "Inductor: skipping cudagraphs due to mutated inputs")
    tracer.step_end()
    assert tracer.step_begin("prefill", 2, 64, Cause("prefill", "32 new tokens per sequence"))
    tracer.step_end()                                         # a recipe's hint, no replay
    assert tracer.step_begin("prefill", 2, num_tokens=64, hint=Cause("prefill", "32 new tokens"))
    graphs[2].replay()
    tracer.step_end()
    tracer.inductor_skip(MUTATED)                             # decided at compile time
    traced(rows(16))
    assert not tracer.step_begin("decode", 1) if tracer.in_step else True
    tracer.step_abort()                                       # no step running: nothing happens
    tracer.step_end()
    tracer.closed = True                                      # a closed tracer records nothing
    assert not tracer.step_begin("decode", 2, 2)
    traced(rows(2), graph=graphs[2])
    tracer.closed = False


@compiled_only
def test_the_same_program_through_both_cores_gives_the_same_events_and_counters():
    results = {}
    for core in ("python", "compiled"):
        h = Harness(core)
        script(h)
        counters = h.counters()
        events = h.finish()
        run = h.sinks[0].run
        results[core] = (comparable(events), counters, run["config"]["trace"].pop("step_core"))
    (py_events, py_counters, py_core), (c_events, c_counters, c_core) = results["python"], results["compiled"]
    assert (py_core, c_core) == ("python", "compiled")
    assert c_counters == py_counters
    assert c_events == py_events
    modes = {e["mode"] for e in py_events if e["kind"] == "step"}
    assert modes == {"graph", "padded", "eager"}
    reasons = {e["reason"] for e in py_events if e["kind"] == "step"}
    assert {"batch_too_large", "mutated_inputs", "prefill"} <= reasons
    assert py_counters["steps"] == 19 and py_counters["total_replays"] == 19


@compiled_only
def test_failures_of_the_tracers_own_work_are_the_same_warnings_in_both_cores_and_never_the_programs():
    results = {}
    for core in ("python", "compiled"):
        h = Harness(core)
        graph = h.capture(2)
        tracer = h.tracer

        def no_batch(args, kwargs):
            raise KeyError("no batch here")
        assert step_wrapper(tracer, lambda x: x + 1, no_batch, "odd")(1) == 2        # the call runs, untraced
        traced = step_wrapper(tracer, lambda tokens: graph.replay() or tokens.shape[0], tensor_batch, "--step")
        traced(torch.zeros(2, 1, dtype=torch.long))
        tracer._decided = lambda *args: 1 / 0                     # deciding an eager step fails
        assert traced(torch.zeros(5, 1, dtype=torch.long)) == 5
        assert not tracer.in_step
        del tracer._decided
        begin_interrupted = step_wrapper(tracer, lambda tokens: (_ for _ in ()).throw(KeyboardInterrupt()),
                                         tensor_batch, "--step")
        with pytest.raises(KeyboardInterrupt):                     # the program's own interrupt passes through
            begin_interrupted(torch.zeros(2, 1, dtype=torch.long))
        traced(torch.zeros(2, 1, dtype=torch.long))
        counters = h.counters()
        warnings = [(e["code"], e["message"]) for e in h.finish() if e["kind"] == "warning"]
        results[core] = (counters, warnings)
    assert results["compiled"] == results["python"]
    counters, warnings = results["python"]
    assert counters["steps"] == 2 and counters["in_step"] is False
    assert [code for code, _ in warnings] == ["recipe_failed", "hook_failed"]
    assert "KeyError: 'no batch here'" in warnings[0][1] and "ZeroDivisionError" in warnings[1][1]


@compiled_only
def test_cuda_sampled_timing_is_the_same_through_both_cores(cuda_in_use):
    results = {}
    for core in ("python", "compiled"):
        FakeEvent.recorded = 0
        h = Harness(core)
        graphs = {size: h.capture(size) for size in (2, 4)}
        traced = step_wrapper(h.tracer, lambda tokens, graph: graph.replay(), tensor_batch, "--step")
        for n in [4] * 10 + [2] * 3 + [3] * 9:
            cuda_in_use["capturing"] = n == 3 and h.tracer.steps == 13     # the first 3 is not timed
            traced(torch.zeros(n, 1, dtype=torch.long), graphs[4 if n > 2 else 2])
        for _ in range(10):                      # another stage: its count in the clock's cells
            assert h.tracer.step_begin("prefill", 4, 40)
            h.tracer.step_end()
        with pytest.raises(RuntimeError):        # a timed step that raises: its events go back to the pool
            step_wrapper(h.tracer, lambda tokens: (_ for _ in ()).throw(RuntimeError("x")), tensor_batch, "s")(
                torch.zeros(5, 1, dtype=torch.long))
        results[core] = ([(e["raw_bs"], e["duration_s"]) for e in h.finish() if e["kind"] == "step"],
                         FakeEvent.recorded, len(h.tracer._cuda_clock.pool))
    assert results["compiled"] == results["python"]
    durations, recorded, _ = results["python"]
    assert [d for _, d in durations[:10]] == [0.0025] + [None] * 7 + [0.0025, None]
    assert recorded == 2 * 6 + 1      # bs 4 twice, bs 2, bs 3 once (its first step capturing), prefill twice; the raise
    assert [d for bs, d in durations if bs == 4][10:] == [0.0025] + [None] * 7 + [0.0025, None]


@compiled_only
def test_the_compiled_wrappers_look_like_the_originals_and_bind_as_methods():
    h = Harness("compiled")

    class Model:
        def forward(self, tokens, scale=1):
            """The model's step."""
            return tokens * scale
    original = Model.forward
    Model.forward = step_wrapper(h.tracer, original, tensor_batch, "--step")
    assert type(Model.forward).__name__ == "StepWrapper"
    assert Model.forward.__wrapped__ is original
    assert (Model.forward.__name__, Model.forward.__qualname__, Model.forward.__doc__) == \
        ("forward", original.__qualname__, "The model's step.")
    assert inspect.signature(Model().forward) == inspect.signature(original.__get__(Model()))
    assert Model().forward(torch.ones(2, 1, dtype=torch.long), scale=3).sum() == 6
    assert h.tracer.steps == 1
    assert type(h.graph_class.replay).__name__ == "ReplayHook"
    assert h.graph_class.replay.__wrapped__ is FakeCUDAGraph.replay
    h.finish()


@compiled_only
def test_the_compiled_core_keeps_no_reference_it_should_not_and_its_memory_is_flat():
    h = Harness("compiled")
    graphs = {size: h.capture(size) for size in (2, 4)}
    tensors = [torch.zeros(n, 1, dtype=torch.long) for n in (3, 4, 9)]      # padded, graph, eager

    def program(tokens, scale=1):
        graph = graphs.get(4 if tokens.shape[0] > 2 else 2) if tokens.shape[0] <= 4 else None
        if graph is not None:
            graph.replay()
        return tokens

    def nested(tokens):
        return traced(tokens, scale=2)                 # a call inside the step: part of it
    traced = step_wrapper(h.tracer, program, tensor_batch, "--step")
    outer = step_wrapper(h.tracer, nested, tensor_batch, "--step")

    def steps(n):
        for i in range(n):
            (outer if i % 7 == 0 else traced)(tensors[i % 3])
            h.tracer.emitter._queue.clear()
    steps(300)
    h.tracer._starter.join()                 # the run is open; its emitter's thread stopped (no other
    h.tracer.emitter._stop.set()             # thread holds anything of the step while counting)
    h.tracer.emitter._thread.join()
    held = (*graphs.values(), *tensors, program, nested, h.tracer, h.tracer._modes, h.tracer._reasons,
            h.tracer._replayed, h.tracer._decisions, h.tracer.step_graphs, h.tracer._timing_counts, traced, outer)

    def refs():
        gc.collect()
        return [sys.getrefcount(obj) for obj in held] + [sys.getrefcount(v) for v in h.tracer._replayed.values()] \
            + [sys.getrefcount(v) for v in h.tracer._decisions.values()] + [sys.getrefcount(v) for v in _BATCHES.values()]
    before = refs()
    growth = memory_growth(steps)
    assert refs() == before
    assert growth < 4096
    assert h.tracer.steps == 20_300 and set(h.tracer.modes) == {"graph", "padded", "eager"}
    h.finish()


@compiled_only
def test_the_compiled_host_clock_is_time_perf_counters():
    """A step's start read in C and its end in Python (or the reverse) are on one clock."""
    import time
    before = time.perf_counter()
    read = step_core.COMPILED.perf_counter()
    after = time.perf_counter()
    assert before <= read <= after


def test_without_the_compiled_module_or_with_pure_python_the_python_core_runs():
    def absent(name):
        raise ImportError(f"No module named {name!r}")
    assert step_core.load({}, import_module=absent) is None
    assert step_core.load({ENV_PURE_PYTHON: "1"}) is None
    if step_core.COMPILED is not None:
        assert step_core.load({ENV_PURE_PYTHON: "0"}) is step_core.COMPILED
    assert tracer_class("python").step_core == "python"


TRACED = """import torch


def step(x):
    return x * 2


for n in (1, 3, 3, 8):
    step(torch.ones(n, 1, dtype=torch.long))
"""


def traced_run(tmp_path, env_extra: dict) -> tuple[dict, list[dict]]:
    folder = tmp_path / ("pure" if env_extra else "default")
    folder.mkdir()
    (folder / "prog.py").write_text(TRACED)
    env = {**{k: v for k, v in os.environ.items() if k != ENV_PURE_PYTHON}, **env_extra, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "replayscope", "trace", "--events", "e.jsonl", "--step",
                           "__main__:step", "--", sys.executable, "prog.py"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in (folder / "e.jsonl").read_text().splitlines()]
    steps = [{k: v for k, v in e.items() if k not in ("ts", "duration_s")} for e in lines[1:] if e["kind"] == "step"]
    return lines[0]["config"]["trace"], steps


def test_a_traced_process_told_pure_python_runs_the_python_core_and_records_the_same_steps(tmp_path):
    pure_config, pure_steps = traced_run(tmp_path, {ENV_PURE_PYTHON: "1"})
    assert pure_config["step_core"] == "python"
    config, steps = traced_run(tmp_path, {})
    assert config["step_core"] == ("compiled" if step_core.load({}) is not None else "python")
    assert steps == pure_steps and [s["raw_bs"] for s in steps] == [1, 3, 3, 8]


def test_the_built_core_is_ignored_by_git():
    root = Path(__file__).resolve().parents[2]
    name = "runner/trace/_stepcore" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")
    done = subprocess.run(["git", "check-ignore", "-q", name], cwd=root)
    assert done.returncode == 0, f"{name} is not git-ignored"




@needs_gcc
def test_the_core_compiles_without_a_warning(tmp_path):
    sources = sorted(Path(step_core.__file__).parent.glob("_stepcore*.c"))
    assert len(sources) > 1, sources
    compile_each_without_warnings(sources, tmp_path)


@needs_gcc_and_nm
def test_the_built_core_exports_its_init_function_alone(tmp_path):
    """The names its files share (``zero``, ``route``, ``truth``...) are hidden: a process that loads
    libraries RTLD_GLOBAL sees ``PyInit__stepcore`` alone."""
    exported = exported_names(sorted(Path(step_core.__file__).parent.glob("_stepcore*.c")), tmp_path / "_stepcore.so")
    assert exported == {"PyInit__stepcore"}, sorted(exported)


def test_without_a_compiler_the_package_builds_as_pure_python(tmp_path):
    from tests.install.test_fresh_venv import copy_source
    copy_source(tmp_path / "src")
    env = {**os.environ, "CC": "false", "LDSHARED": "false"}
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path / "dist"), str(tmp_path / "src")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("replayscope-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "replayscope/runner/trace/steps.py" in names and "replayscope/runner/graphs.py" in names
    assert not [n for n in names if ("_stepcore" in n or "_runcore" in n or "_recordcore" in n) and not n.endswith((".c", ".h"))], \
        "no compiled part (the trace's core, the runner's, the emitter's recorder) is in a wheel built without a compiler"


@pytest.mark.skipif(os.environ.get("REPLAYSCOPE_EXPECT_COMPILED_CORE") != "1",
                    reason="only where the build is expected to have compiled the core (.ci/run)")
def test_ci_runs_the_compiled_core():
    assert step_core.CORE == "compiled", "the C step core was not built: pip fell back to pure Python"


@compiled_only
def test_a_step_state_made_before_configure_is_refused_by_name_not_a_crash():
    """The core calls into the modules configure() gives it: a StepState made before would crash the
    interpreter at its first step (it did: SIGSEGV); it is refused when made instead."""
    code = ("import importlib\n"
            "core = importlib.import_module('replayscope.runner.trace._stepcore')\n"
            "try:\n    core.StepState().step_begin('decode', 8)\n"
            "except RuntimeError as error:\n    print('refused:', error)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "refused: _stepcore.configure(steps, device) must be called before a StepState is made" in done.stdout


@compiled_only
def test_the_compiled_core_reads_a_kept_decision_itself_and_asks_the_python_when_the_facts_change():
    h = Harness("compiled")
    for size in (2, 4):
        h.capture(size)
    eager = step_wrapper(h.tracer, lambda tokens: tokens, tensor_batch, "--step")   # replays nothing
    eager(torch.zeros(8, 1, dtype=torch.long))          # decided by the Python, and kept
    asked = []
    decide = h.tracer._decided
    h.tracer._decided = lambda *args: asked.append(args) or decide(*args)
    for _ in range(3):
        eager(torch.zeros(8, 1, dtype=torch.long))
    assert asked == []                                  # found with the Python's own key
    h.capture(16)                                       # a fact the outcome depends on changed
    eager(torch.zeros(8, 1, dtype=torch.long))
    assert asked == [(8, 0, 0)]
    steps = [e for e in h.finish() if e["kind"] == "step"]
    assert [s["mode"] for s in steps] == ["eager"] * 5
    assert len({s["reason"] for s in steps[:4]}) == 1 and steps[4]["reason"] != steps[0]["reason"]


@compiled_only
def test_the_compiled_core_keeps_a_graph_steps_route_per_batch_and_size_and_follows_a_new_replayed_table():
    """A graph or padded step's outcome per (batch, graph size) is kept in the core's own table
    (read without building _replayed's key); the step's note is still its evidence; a new _replayed
    (another dict) is what the core reads from then on."""
    h = Harness("compiled")
    graphs = {size: h.capture(size) for size in (4, 8)}

    def program(tokens, graph):
        graph.replay()
        return tokens
    traced = step_wrapper(h.tracer, program, tensor_batch, "--step")
    rows = lambda n: torch.zeros(n, 1, dtype=torch.long)     # noqa: E731
    for _ in range(2):                                       # the second time each from the kept table
        traced(rows(8), graph=graphs[8])
        traced(rows(3), graph=graphs[4])
    assert h.tracer.step_begin("decode", 3, 3)
    h.tracer.step_note = "vLLM padded the batch to its captured size"
    graphs[4].replay()
    h.tracer.step_end()
    h.tracer._replayed = {(8, 8): causes.StepOutcome("padded", 16, None)}   # not what causes.replayed says
    traced(rows(8), graph=graphs[8])
    steps = [e for e in h.finish() if e["kind"] == "step"]
    assert [(s["mode"], s["raw_bs"], s["graph_bs"]) for s in steps] == [
        ("graph", 8, 8), ("padded", 3, 4), ("graph", 8, 8), ("padded", 3, 4), ("padded", 3, 4), ("padded", 8, 16)]
    assert [s.get("evidence") for s in steps[:4]] == [None] * 4
    assert steps[4]["evidence"] == "vLLM padded the batch to its captured size"
