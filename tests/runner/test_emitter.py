"""replayscope.runner.emitter: the JSON-lines form of a run, ordering behind GPU timings, run_end, heartbeats,
and a sink failure that must not take the run down."""

import threading
import time

import pytest

from replayscope.contract import wire
from replayscope.runner.emitter import Emitter
from replayscope.contract.sinks import JsonlSink
from replayscope.contract.events_file import read_events_file
from tests.waiting import wait_until


def run_record(**overrides):
    record = {"run_id": "emit-1", "name": "emitter test", "source": "library", "started_at": time.time(),
              "backend": "static", "model": "tiny", "device": "cpu"}
    record.update(overrides)
    return record


class ListSink:
    """Keeps what it is given; optionally fails the first ``fail`` writes."""

    def __init__(self, fail: int = 0):
        self.run = None
        self.batches = []
        self.fail = fail
        self.closed = False
        self.lock = threading.Lock()

    def open(self, run):
        self.run = run

    def write(self, events):
        with self.lock:
            if self.fail:
                self.fail -= 1
                raise OSError("disk full")
            self.batches.append([dict(e) for e in events])

    def close(self):
        self.closed = True

    @property
    def events(self):
        with self.lock:
            return [e for b in self.batches for e in b]


class FakeTiming:
    """A GPU timing stand-in: not ready until the test says so."""

    def __init__(self, seconds):
        self._seconds = seconds
        self.is_ready = False
        self.released = False
        self.waited = False

    def ready(self):
        return self.is_ready

    def wait(self):
        self.waited = True
        self.is_ready = True

    def seconds(self):
        return self._seconds

    def release(self):
        self.released = True


def graph_steps_for(emitter, seconds, bs, pause_s):
    """A decode graph step of batch size ``bs`` every ``pause_s`` seconds for ``seconds`` seconds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        emitter.step("decode", "graph", bs, bs, bs, 0, None, 0.001)
        time.sleep(pause_s)


def test_the_events_file_holds_the_run_record_then_valid_events_in_sequence(tmp_path):
    path = tmp_path / "run.jsonl"
    emitter = Emitter(JsonlSink(str(path)), run_record(), flush_interval_s=0.01).start()
    emitter.emit("phase", phase="load_weights", duration_s=0.5, mem_bytes=1024)
    emitter.emit("capture", graph_bs=4, stage="decode", duration_s=0.1, pool_bytes=None,
                 pool_delta_bytes=None, status="ok")
    for i in range(50):
        emitter.step("decode", "padded", 3, 4, 3, 1, None, 0.001 * i)
        emitter.step("prefill", "eager", 2, None, 40, 0, "prefill", 0.002)
    emitter.emit("parity", graph_bs=4, max_abs_diff=0.0, rel_err=0.0)
    emitter.close()

    run, events, _ = read_events_file(path)             # checks every line against the wire contract
    assert run["run_id"] == "emit-1" and run["wire_version"] == wire.WIRE_VERSION
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)) and len(seqs) == 104
    assert events[-1]["kind"] == "run_end" and events[-1]["status"] == "finished"
    assert emitter.written == 104


def test_a_batch_the_disk_refused_is_counted_lost_not_written(tmp_path, capsys, monkeypatch):
    """The audit: a JSON-lines file on a full disk lost a batch with one line on stderr and the
    emitter still counted it as written. Here the file is /dev/full after the run record (the
    emitter's own thread writing it: its sink is this process's)."""
    monkeypatch.setenv("REPLAYSCOPE_EVENTS_IN_PROCESS", "1")
    sink = JsonlSink(str(tmp_path / "run.jsonl"))
    emitter = Emitter(sink, run_record(), flush_interval_s=60).start()
    sink._writer._file = open("/dev/full", "w")         # the disk is full from now on (ENOSPC)
    for i in range(10):
        emitter.step("decode", "graph", 4, 4, 4, 0, None, 0.001)
    emitter.flush()
    assert (emitter.written, emitter.lost) == (0, 10)
    assert "telemetry sink failed, 10 events not written (10 in all)" in capsys.readouterr().err
    emitter.close()
    assert emitter.written == 0 and emitter.lost >= 11        # the run_end too


def test_an_invalid_run_record_is_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "run.jsonl"
    with pytest.raises(wire.WireError, match="source"):
        Emitter(JsonlSink(str(path)), run_record(source="nobody"))
    assert not path.exists()


def test_a_step_waits_for_its_timing_and_later_events_wait_behind_it():
    sink = ListSink()
    emitter = Emitter(sink, run_record(), flush_interval_s=0.01, heartbeat_s=60).start()
    emitter.emit("phase", phase="warmup", duration_s=0.1)
    timing = FakeTiming(0.25)
    emitter.step("decode", "graph", 4, 4, 4, 0, None, timing)
    emitter.emit("parity", graph_bs=4, max_abs_diff=0.0, rel_err=0.0)
    assert wait_until(lambda: len(sink.events) == 1, 3.0)
    time.sleep(0.1)                                     # several flushes pass: the step is not ready
    assert [e["kind"] for e in sink.events] == ["phase"]
    timing.is_ready = True
    assert wait_until(lambda: len(sink.events) == 3, 3.0)
    events = sink.events
    assert [e["kind"] for e in events] == ["phase", "step", "parity"]
    assert [e["seq"] for e in events] == [0, 1, 2]
    assert events[1]["duration_s"] == 0.25 and timing.released and not timing.waited
    emitter.close()


def test_close_waits_for_outstanding_timings():
    sink = ListSink()
    emitter = Emitter(sink, run_record(), flush_interval_s=0.01).start()
    timing = FakeTiming(0.5)
    emitter.step("decode", "graph", 4, 4, 4, 0, None, timing)
    emitter.close()
    assert timing.waited and timing.released
    assert [(e["kind"], e.get("duration_s")) for e in sink.events] == [("step", 0.5), ("run_end", None)]


@pytest.mark.parametrize("status", ["finished", "failed", "interrupted"])
def test_close_ends_the_run_with_its_status_and_closes_the_sink(status):
    sink = ListSink()
    emitter = Emitter(sink, run_record()).start()
    emitter.close(status, error="boom" if status == "failed" else None)
    end = sink.events[-1]
    wire.validate_event(end)
    assert (end["kind"], end["status"]) == ("run_end", status)
    assert end.get("error") == ("boom" if status == "failed" else None)
    assert sink.closed and emitter.closed


def test_close_twice_ends_the_run_once():
    sink = ListSink()
    emitter = Emitter(sink, run_record()).start()
    emitter.close()
    emitter.close("failed")
    assert [e["status"] for e in sink.events if e["kind"] == "run_end"] == ["finished"]


def test_leaving_a_with_block_on_an_exception_ends_the_run_failed():
    sink = ListSink()
    with pytest.raises(ValueError):
        with Emitter(sink, run_record()):
            raise ValueError("bad batch")
    end = sink.events[-1]
    assert end["status"] == "failed" and "bad batch" in end["error"]


def test_an_idle_emitter_sends_heartbeats():
    sink = ListSink()
    emitter = Emitter(sink, run_record(), flush_interval_s=0.01, heartbeat_s=0.05).start()
    assert wait_until(lambda: sum(e["kind"] == "heartbeat" for e in sink.events) >= 2, 3.0)
    emitter.close()
    for event in sink.events:
        wire.validate_event(event)


def test_no_heartbeat_while_events_keep_flowing():
    sink = ListSink()
    emitter = Emitter(sink, run_record(), flush_interval_s=0.01, heartbeat_s=1.0).start()
    graph_steps_for(emitter, 0.5, bs=1, pause_s=0.005)
    emitter.close()
    assert not [e for e in sink.events if e["kind"] == "heartbeat"]


def test_a_failing_sink_does_not_stop_the_emitter(capsys):
    sink = ListSink(fail=1)
    emitter = Emitter(sink, run_record(), flush_interval_s=0.01, heartbeat_s=60).start()
    emitter.step("decode", "graph", 1, 1, 1, 0, None, 0.001)
    assert wait_until(lambda: sink.fail == 0, 3.0)          # the first write raised
    emitter.step("decode", "graph", 2, 2, 2, 0, None, 0.001)
    emitter.close()
    assert [(e["kind"], e.get("raw_bs")) for e in sink.events] == [("step", 2), ("run_end", None)]
    assert "telemetry sink failed, 1 event not written (1 in all): OSError('disk full')" in capsys.readouterr().err
    assert (emitter.written, emitter.lost) == (2, 1)


def test_step_returns_at_once_even_when_the_sink_is_slow():
    release = threading.Event()

    class SlowSink(ListSink):
        def write(self, events):
            release.wait(5)
            super().write(events)

    sink = SlowSink()
    emitter = Emitter(sink, run_record(), flush_interval_s=0.001).start()
    emitter.step("decode", "graph", 1, 1, 1, 0, None, 0.001)
    time.sleep(0.05)                                      # the flush thread is now stuck in write
    started = time.perf_counter()
    for _ in range(1000):
        emitter.step("decode", "graph", 1, 1, 1, 0, None, 0.001)
    assert time.perf_counter() - started < 0.5
    release.set()
    emitter.close()
    assert sum(e["kind"] == "step" for e in sink.events) == 1001


def test_ctrl_c_in_a_with_block_ends_the_run_interrupted():
    sink = ListSink()
    with pytest.raises(KeyboardInterrupt):
        with Emitter(sink, run_record()):
            raise KeyboardInterrupt
    assert sink.events[-1]["status"] == "interrupted" and "error" not in sink.events[-1]


def test_a_user_facing_error_ends_the_run_failed_with_its_own_words():
    from replayscope.contract.errors import ReplayscopeError

    sink = ListSink()
    with pytest.raises(ReplayscopeError):
        with Emitter(sink, run_record()):
            raise ReplayscopeError("workload tiny needs 300 positions")
    assert sink.events[-1]["error"] == "workload tiny needs 300 positions"


# -- sampling graph steps at the source ------------------------------------------------------

def _mixed_steps(emitter, n):
    """n steps: 3 in 4 graph (several batch sizes), then padded and eager ones."""
    for i in range(n):
        if i % 8 == 7:
            emitter.step("decode", "eager", 40, None, 40, 0, "batch_too_large", 0.004)
        elif i % 8 == 6:
            emitter.step("decode", "padded", 3, 4, 3, 1, None, 0.002)
        else:
            bs = (1, 2, 4, 8)[i % 4]
            emitter.step("decode", "graph", bs, bs, bs, 0, None, 0.001 * bs)


def test_a_sampled_run_says_so_in_its_record():
    sink = ListSink()
    Emitter(sink, run_record(), graph_sample=10).start().close()
    assert sink.run["graph_sample"] == 10
    sink = ListSink()
    Emitter(sink, run_record()).start().close()
    assert "graph_sample" not in sink.run


def test_sampling_sends_every_eager_and_padded_step_and_one_in_n_graph_steps():
    sink = ListSink()
    emitter = Emitter(sink, run_record(), flush_interval_s=0.01, graph_sample=10).start()
    _mixed_steps(emitter, 4000)
    emitter.close()
    steps = [e for e in sink.events if e["kind"] == "step"]
    by_mode = {m: sum(e["mode"] == m for e in steps) for m in ("graph", "padded", "eager")}
    assert by_mode["eager"] == 500 and by_mode["padded"] == 500
    assert by_mode["graph"] == 300                         # 3000 graph steps, 1 in 10
    counts = [e for e in sink.events if e["kind"] == "step_counts"]
    assert sum(c["count"] for c in counts) == 2700
    assert len(steps) + len(counts) < 4000 / 3


def test_the_counts_of_skipped_graph_steps_are_exact_and_valid_wire_events():
    sink = ListSink()
    emitter = Emitter(sink, run_record(), flush_interval_s=0.01, graph_sample=7).start()
    _mixed_steps(emitter, 2000)
    emitter.close()
    graph_sent = [e for e in sink.events if e["kind"] == "step" and e["mode"] == "graph"]
    counts = [e for e in sink.events if e["kind"] == "step_counts"]
    for event in sink.events:
        wire.validate_event(event)
    by_bs = {}
    for e in graph_sent:
        by_bs[e["raw_bs"]] = by_bs.get(e["raw_bs"], 0) + 1
    for c in counts:
        for bs, part in c["batch_sizes"].items():
            by_bs[int(bs)] = by_bs.get(int(bs), 0) + part["count"]
    assert by_bs == {1: 500, 2: 500, 4: 250, 8: 250}      # what _mixed_steps sent at each size
    tokens = sum(e["num_tokens"] for e in graph_sent) + sum(c["num_tokens"] for c in counts)
    seconds = sum(e["duration_s"] for e in graph_sent) + sum(c["duration_s"] for c in counts)
    assert tokens == 500 * 1 + 500 * 2 + 250 * 4 + 250 * 8
    assert seconds == pytest.approx(0.001 * tokens)
    assert len({e["seq"] for e in sink.events}) == len(sink.events)


def test_counts_never_span_two_seconds():
    sink = ListSink()
    emitter = Emitter(sink, run_record(), flush_interval_s=0.01, graph_sample=50).start()
    graph_steps_for(emitter, 2.5, bs=2, pause_s=0.002)
    emitter.close()
    counts = [e for e in sink.events if e["kind"] == "step_counts"]
    assert len({int(c["ts"]) for c in counts}) == len(counts) >= 2


def test_the_counts_of_a_second_leave_before_the_run_ends():
    sink = ListSink()
    emitter = Emitter(sink, run_record(), flush_interval_s=0.01, graph_sample=100).start()
    for _ in range(20):
        emitter.step("decode", "graph", 2, 2, 2, 0, None, 0.001)
    emitter.close()
    kinds = [e["kind"] for e in sink.events]
    assert kinds[-1] == "run_end" and kinds.count("step_counts") == 1


def test_a_graph_sample_below_one_is_refused():
    from replayscope.contract.errors import ReplayscopeError

    with pytest.raises(ReplayscopeError, match="graph_sample"):
        Emitter(ListSink(), run_record(), graph_sample=0)


def test_flush_unless_busy_without_waiting_writes_what_is_ready_and_leaves_a_pending_step():
    sink = ListSink()
    emitter = Emitter(sink, run_record(), flush_interval_s=60, heartbeat_s=60).start()
    emitter.emit("phase", phase="warmup", duration_s=0.1)
    timing = FakeTiming(0.25)
    emitter.step("decode", "graph", 4, 4, 4, 0, None, timing)
    assert emitter.flush_unless_busy(wait_for_gpu=False)
    assert [e["kind"] for e in sink.events] == ["phase"] and not timing.waited
    assert emitter.flush_unless_busy()
    assert [e["kind"] for e in sink.events] == ["phase", "step"] and timing.waited
    emitter.close()
