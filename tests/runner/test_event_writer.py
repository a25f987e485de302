"""The emitter's writer process (issue 37): the events of an events file or a collector are converted
and written by ``replayscope.runner.event_writer``, the program's process only hands the queued
values over. What it writes is what the emitter's own thread writes, line for line; flush() and
close() wait for it; it outlives a SIGKILLed program; it never sees the token on its command line
or in its environment."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replayscope.contract.sinks import HttpSink, JsonlSink
from replayscope.runner import emitter as emitter_module
from replayscope.runner.emitter import Emitter
from replayscope.runner.trace.outside import process_gone as gone
ENV_IN_PROCESS = "REPLAYSCOPE_EVENTS_IN_PROCESS"     # replayscope.runner.writer_link.ENV_IN_PROCESS
from tests.runner.reference import python_recorder
from tests.runner.test_emitter import FakeTiming, ListSink, run_record
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


def some_events(emitter: Emitter) -> None:
    """Steps of every shape (timed in seconds, not timed, a GPU timing, fields made once, evidence)
    and other kinds, at fixed times."""
    emitter.emit("phase", phase="capture", duration_s=1.5, start_ts=1764760000.0, mem_bytes=None)
    timing = FakeTiming(0.0025)
    timing.is_ready = True
    fields = ("decode", "padded", 3, 4, 3, 1, None, None)
    for i in range(300):
        bs, mode = 1 + i % 7, ("graph", "padded", "eager")[i % 3]
        graph_bs = {"graph": bs, "padded": 8, "eager": None}[mode]
        emitter.step("decode", mode, bs, graph_bs, bs, 8 - bs if mode == "padded" else 0,
                     "batch_too_large" if mode == "eager" else None, 0.001 * (i % 5) if i % 4 else None,
                     "seen" if i % 50 == 0 else None)
        if i % 60 == 0:
            emitter.step_fields(fields, timing)
            emitter.emit("capture", bs=i, duration_s=0.01, mem_bytes=1024, ok=True)
    emitter.emit("warning", code="custom", message="é and \"quotes\"", rank=None)


def written_both_ways(tmp_path, monkeypatch, make_sink, graph_sample: int = 1):
    """The same events through the writer process and through the emitter's thread."""
    emitters = {}
    for how in ("writer", "thread"):
        monkeypatch.setenv(ENV_IN_PROCESS, "1" if how == "thread" else "0")
        clock = (1764760000.0 + i / 97 for i in itertools.count())     # the same ts both ways
        monkeypatch.setattr(emitter_module, "_now", lambda clock=clock: next(clock))
        emitter = python_recorder(Emitter(make_sink(how), run_record(run_id=f"both-{how}", started_at=1764760000.0),
                                          flush_interval_s=60, heartbeat_s=600, graph_sample=graph_sample)).start()
        assert (emitter.writer_pid is not None) == (how == "writer")
        some_events(emitter)
        emitter.close()
        emitters[how] = emitter
    return emitters


@pytest.mark.parametrize("graph_sample", [1, 3])
def test_the_writer_process_writes_the_events_file_line_for_line_as_the_emitters_thread(tmp_path, monkeypatch,
                                                                                        graph_sample):
    emitters = written_both_ways(tmp_path, monkeypatch, lambda how: JsonlSink(str(tmp_path / f"{how}.jsonl")),
                                 graph_sample)
    writer, thread = ((tmp_path / f"{how}.jsonl").read_text().splitlines()[1:] for how in ("writer", "thread"))
    assert writer == thread and len(writer) > (300 if graph_sample == 1 else 150)
    assert ('"kind": "step_counts"' in "".join(writer)) == (graph_sample > 1)
    assert emitters["writer"].written == emitters["thread"].written == len(writer)
    assert emitters["writer"].lost == 0
    assert gone(emitters["writer"].writer_pid)            # close() returned once it wrote everything


def test_the_writer_process_sends_a_collector_what_the_emitters_thread_sends(tmp_path, monkeypatch):
    from replayscope.collector.api import create_api
    from replayscope.collector.models import queries
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store
    from tests.live_server import serving

    store = Store.open(f"sqlite:///{tmp_path}/c.db", upgrade=True)
    with serving(create_api(store, Settings(run_services=False, token="right"))) as url:
        emitters = written_both_ways(tmp_path, monkeypatch, lambda how: HttpSink(
            url, token="right", spool_path=str(tmp_path / f"spool-{how}.jsonl"), retries=1, backoff_s=0.01))
    reads = {}
    for how in ("writer", "thread"):
        run_id = f"both-{how}"
        summary = queries.run_summary(store, run_id)
        reads[how] = ({k: summary[k] for k in ("steps", "modes", "reasons", "status", "num_tokens")},
                      [{k: v for k, v in w.items() if k != "id"} for w in queries.warnings(store, run_id)],
                      queries.step_time_by_mode(store, run_id), len(queries.captures(store, run_id)))
    store.dispose()
    assert reads["writer"] == reads["thread"]
    assert reads["writer"][0]["steps"] == 305 and reads["writer"][0]["status"] == "finished"
    assert emitters["writer"].written == emitters["thread"].written
    assert emitters["writer"].sink.spooled == 0 and emitters["writer"].sink.spool_path == str(
        tmp_path / "spool-writer.jsonl")


def test_flush_returns_once_the_writer_wrote_everything_queued(tmp_path):
    path = tmp_path / "run.jsonl"
    emitter = Emitter(JsonlSink(str(path)), run_record(), flush_interval_s=60).start()
    assert emitter.writer_pid not in (None, os.getpid())
    for round_ in range(3):
        for _ in range(1000):
            emitter.step("decode", "graph", 4, 4, 4, 0, None, 0.001)
        emitter.flush()
        assert path.read_text().count('"kind": "step"') == 1000 * (round_ + 1)
        assert emitter.written == 1000 * (round_ + 1)
    emitter.close()


def test_close_counts_what_the_writer_wrote_and_what_could_not_be_handed_over(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    emitter = Emitter(JsonlSink(str(path)), run_record(), flush_interval_s=60).start()
    for _ in range(10):
        emitter.step("decode", "graph", 4, 4, 4, 0, None, 0.001)
    emitter.emit("phase", phase="odd", duration_s=1.0, thing=object())      # marshal cannot hand it over
    emitter.close()
    assert emitter.written == 11 and emitter.lost == 1                     # 10 steps and the run_end
    assert "a value cannot be handed to the writer" in capsys.readouterr().err
    assert [line.count('"run_end"') for line in path.read_text().splitlines()][-1] == 1


def test_the_writer_never_has_the_token_in_its_arguments_or_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAYSCOPE_TOKEN", "s3cret-in-env")
    monkeypatch.setenv("REPLAYSCOPE_TRACE", "1")
    monkeypatch.setenv("REPLAYSCOPE_TRACE_DIR", str(tmp_path / "trace"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "trace" / "boot"), str(REPO)]))
    sink = HttpSink("http://127.0.0.1:9", token="s3cret-token", spool_path=str(tmp_path / "spool.jsonl"),
                    retries=1, drain_timeout_s=0.1)
    emitter = Emitter(sink, run_record(), flush_interval_s=60).start()
    try:
        pid = emitter.writer_pid
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        environ = dict(item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                       if b"=" in item)
    finally:
        emitter.close()
    assert argv[1:3] == [b"-m", b"replayscope.runner.event_writer"]
    assert not any(b"s3cret" in part for part in argv)
    assert not any(b"s3cret" in value for value in environ.values())
    assert not any(key.startswith(b"REPLAYSCOPE_TRACE") for key in environ)
    assert b"trace" not in environ[b"PYTHONPATH"].split(os.pathsep.encode())[-1]
    assert emitter.sink.spooled == 1                # the run_end: no collector answered, it is in the spool


def test_the_writer_imports_no_torch():
    code = "import sys, replayscope.runner.event_writer; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


KILLED_PROGRAM = """
import os, signal, sys, time
from replayscope.runner.emitter import open_emitter
emitter = open_emitter(sys.argv[1], name="killed", model="m", backend="static")
for i in range(int(sys.argv[2])):
    emitter.step("decode", "graph", 4, 4, 4, 0, None, 0.001)
if sys.argv[3] == "flush":
    emitter.flush()          # written when it returns
else:
    emitter._flush()         # handed over, not waited for: in the pipe or the writer when killed
print(emitter.writer_pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("how, steps", [("flush", 1000), ("handed_over", 200000)])
def test_a_program_sigkilled_loses_nothing_it_handed_to_its_writer(tmp_path, how, steps):
    path = tmp_path / "run.jsonl"
    program = subprocess.run([sys.executable, "-c", KILLED_PROGRAM, str(path), str(steps), how], cwd=REPO,
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                             timeout=120)
    assert program.returncode == -signal.SIGKILL, program.stderr
    writer = int(program.stdout.strip())
    wait_until(lambda: gone(writer), 60.0)
    text = path.read_text()
    assert text.count('"kind": "step"') == steps and '"run_end"' not in text
    assert text.endswith("\n")


def test_a_forked_child_does_not_write_into_its_parents_writer(tmp_path):
    path = tmp_path / "run.jsonl"
    emitter = Emitter(JsonlSink(str(path)), run_record(), flush_interval_s=60).start()
    emitter.step("decode", "graph", 4, 4, 4, 0, None, 0.001)
    pid = os.fork()
    if pid == 0:                                   # the child: its copy of the pipe is closed
        code = 0 if emitter.link.broken else 1
        emitter.step("decode", "eager", 9, None, 9, 0, "child", 0.001)
        emitter.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    emitter.close()
    text = path.read_text()
    assert text.count('"kind": "step"') == 1 and '"child"' not in text and text.count('"run_end"') == 1


def test_where_the_writer_cannot_be_used_the_emitters_thread_writes(tmp_path, monkeypatch, capsys):
    assert Emitter(ListSink(), run_record()).start().writer_pid is None        # a sink it cannot make again
    monkeypatch.setenv(ENV_IN_PROCESS, "1")
    in_process = Emitter(JsonlSink(str(tmp_path / "a.jsonl")), run_record()).start()
    assert in_process.writer_pid is None
    in_process.close()
    monkeypatch.delenv(ENV_IN_PROCESS)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    emitter = Emitter(JsonlSink(str(tmp_path / "b.jsonl")), run_record()).start()
    emitter.step("decode", "graph", 4, 4, 4, 0, None, 0.001)
    emitter.close()
    err = capsys.readouterr().err
    assert emitter.writer_pid is None and err.count("the event writer process could not be used") == 1
    assert (tmp_path / "b.jsonl").read_text().count('"kind": "step"') == 1 and emitter.written == 2


def test_a_sink_the_writer_cannot_open_is_refused_at_start_as_before(tmp_path):
    from replayscope.contract.errors import ReplayscopeError

    with pytest.raises(ReplayscopeError, match="cannot write the events file"):
        Emitter(JsonlSink(str(tmp_path / "missing" / "run.jsonl")), run_record()).start()


def test_a_writer_that_died_is_said_once_and_what_it_missed_counted_lost(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    emitter = Emitter(JsonlSink(str(path)), run_record(), flush_interval_s=60).start()
    for _ in range(5):
        emitter.step("decode", "graph", 4, 4, 4, 0, None, 0.001)
    emitter.flush()
    os.kill(emitter.writer_pid, signal.SIGKILL)
    wait_until(lambda: emitter.link.process.poll() is not None, 30.0)
    for round_ in range(3):
        for _ in range(7):
            emitter.step("decode", "graph", 4, 4, 4, 0, None, 0.001)
        emitter.flush()
    started = time.monotonic()
    emitter.close()
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err
    assert err.count("is gone") == 1, err
    assert emitter.written == 5 and emitter.lost == 3 * 7 + 1        # and the run_end
    assert path.read_text().count('"kind": "step"') == 5


def test_the_writer_counts_a_batch_its_sink_refused_lost_and_says_so(capsys):
    """The writer process's own loop (``Writing``), run here: a sink that raises loses the batch,
    counted and said on stderr as the emitter's thread does, and the run goes on."""
    from replayscope.runner.event_records import EventConverter
    from replayscope.runner.event_writer import Writing

    sink = ListSink(fail=1)
    writing = Writing(sink, EventConverter(False))
    writing.write([{"seq": 0, "ts": 1.0, "kind": "phase"}, {"seq": 1, "ts": 1.0, "kind": "phase"}])
    writing.write([{"seq": 2, "ts": 1.0, "kind": "phase"}])
    writing.close()
    assert (writing.written, writing.lost) == (1, 2) and sink.closed
    assert "telemetry sink failed, 2 events not written (2 in all)" in capsys.readouterr().err


def test_a_large_queue_is_handed_over_in_frames_of_max_batch_events_in_order(tmp_path):
    path = tmp_path / "run.jsonl"
    emitter = Emitter(JsonlSink(str(path)), run_record(), flush_interval_s=60, max_batch=1000).start()
    sent = []
    send = emitter.link.send
    emitter.link.send = lambda part: sent.append(len(part)) or send(part)
    for i in range(4500):
        emitter.step("decode", "graph", 4, 4, 4, 0, None, 0.001)
    emitter.flush()
    emitter.close()
    assert sent[:5] == [12000] * 4 + [6000]
    seqs = [int(line.split(",", 1)[0].split(": ")[1]) for line in path.read_text().splitlines()[1:]]
    assert seqs == list(range(4501))


def test_a_flush_the_writer_answers_late_is_said_and_its_late_answer_not_taken_for_the_next(tmp_path, monkeypatch,
                                                                                            capsys):
    """A collector that takes 1.5 s to answer: the first flush gives up after 0.3 s (said on stderr);
    the second flush's answer is its own (the first one's, arriving meanwhile, is skipped)."""
    import json as json_module

    from tests.stub_server import QuietHandler, start_server, stop_server

    class SlowCollector(QuietHandler):
        def do_POST(self):
            body = self.json_body()
            if isinstance(body, dict) and "events" in body:
                time.sleep(1.5)
                self.answer(200, json_module.dumps({"stored": len(body["events"])}).encode(), "application/json")
            else:
                self.answer(200, b"{}", "application/json")

    monkeypatch.setattr(emitter_module, "FLUSH_WAIT_S", 0.3)
    server = start_server(SlowCollector)
    try:
        sink = HttpSink(f"http://127.0.0.1:{server.server_port}", spool_path=str(tmp_path / "spool.jsonl"),
                        retries=1, timeout_s=5)
        emitter = Emitter(sink, run_record(), flush_interval_s=60, heartbeat_s=600).start()
        emitter.step("decode", "graph", 4, 4, 4, 0, None, 0.001)
        emitter.flush()                                  # gives up waiting
        assert "did not write what was flushed within 0.3s" in capsys.readouterr().err
        assert emitter.written == 0
        time.sleep(1.6)                                  # its answer arrives, unread
        for _ in range(2):
            emitter.step("decode", "graph", 4, 4, 4, 0, None, 0.001)
        monkeypatch.setattr(emitter_module, "FLUSH_WAIT_S", 10.0)
        emitter.flush()
        assert emitter.written == 3                      # this flush's own answer: all three steps
        emitter.close()
    finally:
        stop_server(server)
    assert emitter.written == 4 and emitter.lost == 0


SIGPIPE_PROGRAM = """
import os, signal, sys, time
signal.signal(signal.SIGPIPE, signal.SIG_DFL)       # as a command-line tool may set it
from replayscope.runner.emitter import open_emitter
emitter = open_emitter(sys.argv[1], name="pipe", model="m", backend="static")
emitter.step("decode", "graph", 4, 4, 4, 0, None, 0.001)
emitter.flush()
os.kill(emitter.writer_pid, signal.SIGKILL)
emitter.link.process.wait()
for _ in range(3):
    emitter.step("decode", "graph", 4, 4, 4, 0, None, 0.001)
    emitter.flush()
emitter.close()
print("alive", emitter.written, emitter.lost, flush=True)
"""


def test_a_program_with_sigpipes_default_action_survives_its_writers_death(tmp_path):
    program = subprocess.run([sys.executable, "-c", SIGPIPE_PROGRAM, str(tmp_path / "run.jsonl")], cwd=REPO,
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                             timeout=120)
    assert program.returncode == 0, program.stderr
    assert program.stdout.split() == ["alive", "1", "4"]
    assert program.stderr.count("is gone") == 1


def test_a_flush_while_start_is_still_opening_on_another_thread_keeps_the_queue(tmp_path, capsys):
    """A traced process opens its run's sink on a thread of its own (starting the writer process takes
    ~0.1 s): a flush meanwhile (the program's own, or a signal's) writes nothing and loses nothing;
    the events go once the writer is there. It lost them to a sink not yet opened before."""
    path = tmp_path / "events.jsonl"
    emitter = Emitter(JsonlSink(str(path)), run_record(), opening=True)
    for step in range(5):
        emitter.step("decode", "graph", 8, 8, 8, 0, None, 0.001 * step)
    assert emitter.flush_unless_busy() and emitter._flush() == 0      # not opened yet: nothing written
    emitter.start()
    emitter.close()
    lines = path.read_text().splitlines()
    assert sum('"kind":"step"' in line.replace(" ", "") for line in lines) == 5
    assert (emitter.written, emitter.lost) == (len(lines) - 1, 0) and "failed" not in capsys.readouterr().err


def test_a_run_closed_before_its_sink_ever_opened_says_what_it_lost(tmp_path, capsys):
    emitter = Emitter(JsonlSink(str(tmp_path / "events.jsonl")), run_record(), opening=True)
    emitter.step("decode", "graph", 8, 8, 8, 0, None, None)
    emitter.close()
    assert emitter.lost == 2 and "never opened, 2 events not written" in capsys.readouterr().err   # the step, run_end
