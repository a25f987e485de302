"""Step timing (replayscope.runner.timing) on CPU with stand-in CUDA events: which steps are timed, on which
stream, and what the runner's step events carry for timed and untimed steps."""

import pytest
import torch

from replayscope.runner.emitter import Emitter
from replayscope.contract.errors import ReplayscopeError
from replayscope.runner.graphs import GraphRunner, StaticInput
from replayscope.runner.plan import CapturePlan
from replayscope.runner.timing import CudaClock, HostClock
from tests.run_events import ListSink

STEP_MS = 2.5


class Event:
    """torch.cuda.Event's surface: record on a stream, query, elapsed_time (ms)."""

    def __init__(self, enable_timing=False):
        self.streams = []

    def record(self, stream):
        self.streams.append(stream)

    def query(self):
        return True

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return STEP_MS


@pytest.fixture()
def cuda_events(monkeypatch):
    """Stand-in CUDA events and streams; ``current["raw"]`` is the current stream's handle."""
    current = {"raw": 0, "lookups": []}
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: current["raw"], raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda index=None: current["lookups"].append(current["raw"]) or f"stream {current['raw']}")
    monkeypatch.setattr(torch.cuda, "Event", Event)
    return current


def test_events_are_recorded_on_the_current_stream_looked_up_only_when_it_changed(cuda_events):
    clock = CudaClock(0, every=1)
    first = clock.stop(clock.record_start())
    first.release()
    again = clock.stop(clock.record_start())
    cuda_events["raw"] = 7                         # the caller switched streams
    other = clock.stop(clock.record_start())
    assert again is first                          # event pairs come back to the pool
    assert first.start.streams == first.end.streams == ["stream 0", "stream 0"]
    assert other.start.streams == other.end.streams == ["stream 7"]
    assert cuda_events["lookups"] == [0, 7]


def test_the_first_step_of_each_key_and_then_every_nth_is_timed(cuda_events):
    clock = CudaClock(0, every=4)
    timed = [clock.due(key) for key in ["a"] * 9 + ["b"] * 2]
    assert [i for i, is_timed in enumerate(timed) if is_timed] == [0, 4, 8, 9]
    assert clock.counter("a") == [9] and clock.counter("b") == [2]   # the cells a runner's routes count in
    assert clock.stop(None) is None                # an untimed step records nothing


def test_on_the_cpu_every_step_is_timed_on_the_host():
    assert HostClock.every == 1
    started = HostClock.record_start()
    assert HostClock.stop(started) >= 0


def test_the_runners_untimed_steps_carry_no_duration_and_its_timed_ones_the_gpus(cuda_events):
    sink = ListSink()
    emitter = Emitter(sink, {"run_id": "timing", "name": "t", "source": "library", "started_at": 0.0,
                             "backend": "static", "model": "m", "device": "cpu"}).start()
    runner = GraphRunner(lambda x: x * 2, [StaticInput("x", (3,), torch.float32)], CapturePlan((2, 4)),
                         backend="static", device="cpu", emitter=emitter, progress=False)
    runner._clock = CudaClock(0, every=3)          # what a CUDA device gets, with stand-in events
    runner.capture()
    for bs in (2, 2, 3, 2, 3, 2, 3, 3):            # graph bs 2, and padded 3 -> 4
        runner.step({"x": torch.ones(bs, 3)})
    emitter.close("finished")
    steps = [(e["raw_bs"], e["mode"], e["duration_s"]) for e in sink.events if e["kind"] == "step"]
    assert steps == [(2, "graph", STEP_MS / 1000), (2, "graph", None), (3, "padded", STEP_MS / 1000),
                     (2, "graph", None), (3, "padded", None), (2, "graph", STEP_MS / 1000),
                     (3, "padded", None), (3, "padded", STEP_MS / 1000)]
    assert runner.step_timing == {"clock": "cuda_events", "every": 3}


def test_a_runner_on_the_cpu_times_every_step_and_says_so():
    runner = GraphRunner(lambda x: x, [StaticInput("x", (1,), torch.float32)], CapturePlan((1,)),
                         backend="static", device="cpu", progress=False, time_every=5)
    assert runner.step_timing == {"clock": "host", "every": 1}


@pytest.mark.parametrize("every", [0, -1, 2.5, "8"])
def test_time_every_must_be_a_whole_number_of_at_least_one(every):
    with pytest.raises(ReplayscopeError, match="time_every must be a whole number >= 1"):
        GraphRunner(lambda x: x, [StaticInput("x", (1,), torch.float32)], CapturePlan((1,)),
                    backend="static", device="cpu", progress=False, time_every=every)
