"""The step path's fast hand-off records exactly what it recorded before (issue 37).

The runner hands the emitter one tuple per step, made once per route (``Emitter.step_fields``),
and the emitter's flush thread converts a run of ready events without parking each one: the
events a sink receives must be the ones ``Emitter.step`` and the old flush gave, field for
field, for the same steps.
"""

import itertools
import time

import torch

from replayscope.runner.emitter import Emitter
from replayscope.runner.graphs import GraphRunner, StaticInput
from replayscope.runner.plan import CapturePlan
from tests.runner.test_emitter import FakeTiming, ListSink, run_record

torch.set_num_threads(1)


def without_ts(events):
    return [{k: v for k, v in e.items() if k != "ts"} for e in events]


STEPS = [  # (stage, mode, raw_bs, graph_bs, num_tokens, padded_tokens, reason, evidence), timing
    (("decode", "graph", 8, 8, 8, 0, None, None), 0.002),
    (("decode", "padded", 5, 8, 5, 3, None, None), None),
    (("prefill", "eager", 3, None, 40, 0, "prefill", None), 0.004),
    (("decode", "eager", 2, None, 2, 0, "custom:warm-up", "the caller said so"), None),
]


def test_step_fields_sends_the_same_events_as_step_with_its_arguments():
    by_step, by_fields = ListSink(), ListSink()
    a, b = Emitter(by_step, run_record()), Emitter(by_fields, run_record())
    for emitter, call in ((a, lambda f, t: a.step(*f[:7], t, f[7])), (b, b.step_fields)):
        emitter.emit("phase", phase="capture", duration_s=1.5)
        for fields, timing in STEPS:
            call(fields, timing)
        emitter.flush()
    assert len(by_step.events) == len(STEPS) + 1
    assert without_ts(by_fields.events) == without_ts(by_step.events)
    assert by_fields.events[3] == {**by_fields.events[3], "reason": "prefill", "duration_s": 0.004}
    assert by_fields.events[4]["evidence"] == "the caller said so"
    assert "evidence" not in by_fields.events[1]


def test_the_flush_keeps_every_event_behind_a_gpu_timing_and_converts_the_rest_in_order():
    sink = ListSink()
    emitter = Emitter(sink, run_record())
    pending = FakeTiming(0.007)
    emitter.step_fields(STEPS[0][0], 0.002)
    emitter.step_fields(STEPS[1][0], pending)
    emitter.step_fields(STEPS[2][0], None)
    emitter.emit("warning", code="x", message="y")
    emitter._flush()                               # the GPU has not passed the second step yet
    assert [e["seq"] for e in sink.events] == [0]
    pending.is_ready = True
    emitter._flush()
    assert [(e["seq"], e["kind"], e.get("duration_s")) for e in sink.events] == [
        (0, "step", 0.002), (1, "step", 0.007), (2, "step", None), (3, "warning", None)]
    assert pending.released


def decode_runner(emitter):
    inputs = [StaticInput("x", (2,), torch.float32), StaticInput("slot", (), torch.long, pad_value=9)]
    runner = GraphRunner(lambda x, slot: x * 2, inputs, CapturePlan((1, 4, 8)), backend="static", device="cpu",
                         emitter=emitter, progress=False)
    runner.capture()
    return runner


def batch(bs):
    return {"x": torch.ones(bs, 2), "slot": torch.arange(bs)}


class StepOnly:
    """An emitter with ``step`` alone (a library user's own): steps reach it as ``step``'s arguments."""

    def __init__(self):
        self.steps, self.seq = [], itertools.count()

    def emit(self, kind, **fields):
        pass

    def step(self, *args):
        self.steps.append(args)


def drive(runner):
    for bs in (8, 5, 5, 1, 16, 3):
        runner.step(batch(bs))
    runner.step(batch(4), num_tokens=12)
    runner.step(batch(4), reason="warm-up")
    runner.step(batch(2), reason="grammar_switch")
    runner.step(batch(4))


# what these steps recorded before the route kept its event's fields (graphs.py at 566376b)
EXPECTED = [
    ("decode", "graph", 8, 8, 8, 0, None), ("decode", "padded", 5, 8, 5, 3, None),
    ("decode", "padded", 5, 8, 5, 3, None), ("decode", "graph", 1, 1, 1, 0, None),
    ("decode", "eager", 16, None, 16, 0, "batch_too_large"), ("decode", "padded", 3, 4, 3, 1, None),
    ("decode", "graph", 4, 4, 12, 0, None), ("decode", "eager", 4, None, 4, 0, "custom:warm-up"),
    ("decode", "eager", 2, None, 2, 0, "grammar_switch"), ("decode", "graph", 4, 4, 4, 0, None),
]


def test_the_runners_steps_are_the_events_they_were_each_timed_on_the_host():
    sink = ListSink()
    emitter = Emitter(sink, run_record())
    runner = decode_runner(emitter)
    drive(runner)
    emitter.flush()
    steps = [e for e in sink.events if e["kind"] == "step"]
    fields = ("stage", "mode", "raw_bs", "graph_bs", "num_tokens", "padded_tokens", "reason")
    assert [tuple(e[f] for f in fields) for e in steps] == EXPECTED
    assert all(isinstance(e["duration_s"], float) and "evidence" not in e for e in steps)
    assert [e["seq"] for e in sink.events] == list(range(len(sink.events)))


def test_an_emitter_with_step_alone_gets_the_same_steps_as_arguments():
    emitter = StepOnly()
    drive(decode_runner(emitter))
    assert [args[:7] for args in emitter.steps] == EXPECTED
    assert all(len(args) == 8 and isinstance(args[7], float) for args in emitter.steps)


def test_a_runner_whose_emitter_is_swapped_or_removed_records_to_the_one_it_has():
    first, second = ListSink(), ListSink()
    a, b = Emitter(first, run_record()), Emitter(second, run_record())
    runner = decode_runner(a)
    runner.step(batch(8))
    runner.emitter = None
    runner.step(batch(8))
    runner.emitter = b
    runner.step(batch(5))
    a.flush()
    b.flush()
    assert [e["raw_bs"] for e in first.events if e["kind"] == "step"] == [8]
    assert [e["raw_bs"] for e in second.events if e["kind"] == "step"] == [5]
    assert runner.emitter is b


def test_an_untimed_step_on_a_sampling_clock_carries_no_duration_and_no_clock_call(monkeypatch):
    sink = ListSink()
    emitter = Emitter(sink, run_record())
    runner = decode_runner(emitter)
    stops = []
    clock = runner._clock
    clock.every = 3                                 # as a CUDA clock samples: 1 step in 3 per key
    monkeypatch.setattr(clock, "stop", lambda started: stops.append(started) or 0.001)
    for _ in range(4):
        runner.step(batch(8))
    emitter.flush()
    assert [e["duration_s"] for e in sink.events if e["kind"] == "step"] == [0.001, None, None, 0.001]
    assert len(stops) == 2
    assert time.time() >= sink.events[-1]["ts"]


def test_queued_steps_leave_no_object_for_the_garbage_collector():
    """A step's queued record is values in the emitter's deque, not a container per step that
    lives until the flush: a serving loop's steps bring no collections of the heap."""
    import gc

    emitter = Emitter(ListSink(), run_record())
    fields = STEPS[1][0]
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        for _ in range(5000):
            emitter.step_fields(fields, None)
            emitter.step(*fields[:7], 0.001, fields[7])
        grown = len(gc.get_objects()) - before
    finally:
        gc.enable()
    assert grown < 100                  # was 10000: one tuple per step
    emitter.flush()
    assert len(emitter.sink.events) == 10000
