"""The emitter's compiled step recorder (runner/_recordcore.c) against its reference, Emitter.step and
Emitter.step_fields in Python: the same values queued for the same calls, the same refusals."""

import gc
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness import NullSink
from replayscope.runner import compiled, emitter as emitter_module
from replayscope.runner.emitter import Emitter
from replayscope.runner.event_records import RECORD
from tests.compiled_checks import compile_each_without_warnings, exported_names, needs_gcc_and_nm
from tests.runner.reference import python_recorder

compiled_only = pytest.mark.skipif(emitter_module.RECORD_CORE is None, reason="the compiled recorder is not built here")

RUN = {"run_id": "rec", "name": "rec", "source": "library", "started_at": 0.0, "backend": "static",
       "model": "m", "device": "cpu"}


def python_emitter() -> Emitter:
    return python_recorder(Emitter(NullSink(), RUN))


CALLS = [
    (("decode", "graph", 8, 8, 8, 0, None, None), {}),
    (("decode", "padded", 5, 8, 5, 3, None, 0.00125), {}),
    (("prefill", "eager", 3, None, 96, 0, "prefill", None, "tokens 96 > 1"), {}),
    (("decode", "eager", 40), {"graph_bs": None, "num_tokens": 40, "padded_tokens": 0, "reason": "batch_too_large",
                               "timing": 0.5}),
    ((), {"stage": "verify", "mode": "graph", "raw_bs": 4, "graph_bs": 4, "num_tokens": 12, "padded_tokens": 0,
          "reason": None, "timing": None, "evidence": "e"}),
]


def queued(emitter: Emitter) -> list[tuple]:
    """The queued events without their wall-clock times."""
    values = emitter._queue
    return [tuple(v for i, v in enumerate(values[at:at + RECORD]) if i != 1) for at in range(0, len(values), RECORD)]


@compiled_only
def test_the_compiled_recorder_queues_what_the_python_methods_queue():
    fast, reference = Emitter(NullSink(), RUN), python_emitter()
    assert fast.step_recorder == "compiled" and reference.step.__func__ is Emitter.step
    fields = ("decode", "graph", 8, 8, 8, 0, None, None)
    for emitter in (fast, reference):
        for args, kwargs in CALLS:
            emitter.step(*args, **kwargs)
        emitter.step_fields(fields, 0.25)
        emitter.emit("phase", phase="load")
    assert queued(fast) == queued(reference)
    assert len(fast._queue) == len(reference._queue) == RECORD * (len(CALLS) + 2)
    stamps = fast._queue[1::RECORD]
    assert all(isinstance(t, float) for t in stamps) and stamps == sorted(stamps)
    assert fast._queue[RECORD * len(CALLS) + 3] is fields          # the caller's tuple itself, as in Python


@compiled_only
@pytest.mark.parametrize("args, kwargs, message", [
    (("decode", "graph"), {}, "missing required argument 'raw_bs'"),
    (("decode", "graph", 1, 1, 1, 0, None, None), {"bogus": 1}, "unexpected keyword argument 'bogus'"),
    (("decode", "graph", 1, 1, 1, 0, None, None), {"stage": "x"}, "multiple values for argument 'stage'"),
    (("decode", "graph", 1, 1, 1, 0, None, None, None, "extra"), {}, "at most 9 arguments"),
])
def test_a_wrong_call_is_refused_as_python_refuses_it_and_queues_nothing(args, kwargs, message):
    fast, reference = Emitter(NullSink(), RUN), python_emitter()
    with pytest.raises(TypeError, match=message):
        fast.step(*args, **kwargs)
    with pytest.raises(TypeError):
        reference.step(*args, **kwargs)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        fast.step_fields(("a",))
    assert fast._queue == reference._queue == []


@compiled_only
def test_a_subclass_with_its_own_step_keeps_it():
    class Counting(Emitter):
        def step(self, *args, **kwargs):
            self.counted = True

    emitter = Counting(NullSink(), RUN)
    emitter.step("decode", "graph", 1, 1, 1, 0, None, None)
    assert emitter.counted and emitter._queue == [] and emitter.step_recorder == "python"


@compiled_only
def test_the_recorder_holds_nothing_after_its_emitter_is_gone():
    emitter = Emitter(NullSink(), RUN)
    queue, fields = emitter._queue, ("decode", "graph", 8, 8, 8, 0, None, None)
    held, fields_held = sys.getrefcount(queue), sys.getrefcount(fields)
    for i in range(20000):
        emitter.step("decode", "graph", 8, 8, 8, 0, None, None)
    assert sys.getrefcount(queue) == held and len(queue) == 20000 * RECORD
    for i in range(1000):
        emitter.step_fields(fields, None)
    assert sys.getrefcount(fields) == fields_held + 1000     # one reference per queued event, no more
    queue.clear()
    assert sys.getrefcount(fields) == fields_held
    del emitter
    gc.collect()
    assert sys.getrefcount(queue) == held - 2        # neither the emitter's attribute nor its recorder's is left


def test_the_recorder_refuses_what_is_not_a_queue_and_a_counter():
    if emitter_module.RECORD_CORE is None:
        pytest.skip("the compiled recorder is not built here")
    with pytest.raises(TypeError):
        emitter_module.RECORD_CORE.Recorder((), itertools.count())
    with pytest.raises(TypeError, match="iterator"):
        emitter_module.RECORD_CORE.Recorder([], 5)


def test_pure_python_is_one_switch_for_every_compiled_part():
    code = ("from replayscope.runner import emitter\nfrom replayscope.runner.trace import step_core\n"
            "print(emitter.RECORD_CORE, step_core.CORE)")
    env = {**os.environ, compiled.ENV_PURE_PYTHON: "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "python"]


@pytest.mark.skipif(os.environ.get("REPLAYSCOPE_EXPECT_COMPILED_CORE") != "1",
                    reason="only where the build is expected to have compiled it (.ci/run)")
def test_ci_runs_the_compiled_recorder():
    assert emitter_module.RECORD_CORE is not None, "runner/_recordcore.c was not built: pip fell back to Python"
    assert Emitter(NullSink(), RUN).step_recorder == "compiled"


@needs_gcc_and_nm
def test_the_recorder_builds_without_a_warning_and_exports_its_init_function_alone(tmp_path):
    source = Path(emitter_module.__file__).parent / "_recordcore.c"
    compile_each_without_warnings([source], tmp_path)
    exported = exported_names([source], tmp_path / "_recordcore.so")
    assert exported == {"PyInit__recordcore"}, sorted(exported)
