"""Importers with a memory bound (issue 36): a log is read a chunk at a time and each run's
events are written as the parser emits them (never the whole file or all its events in
memory); what is not a regular file, or is binary, is refused at once with one line; an
import stopped half-way is resumed by importing again. The memory figures are the
benchmark's (benchmarks/import_memory_bench.py, docs/benchmarks.md), not a timed test."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import pytest

from replayscope.app.cli import imports as cli
from replayscope.collector.importers import import_log, log_source, parser as log_parser
from replayscope.collector.models import queries
from replayscope.collector.store import Store
from tests.importers.conftest import FIXTURES, MTIME, read_fixture
from tests.importers.test_cli import parser as cli_parser

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def replayscope(*argv: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replayscope", *argv], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONPATH=ROOT))


def test_dev_zero_is_refused_at_once_with_one_line(tmp_path):
    db = tmp_path / "never.db"
    start = time.monotonic()
    done = replayscope("import", "vllm", "/dev/zero", "--db", f"sqlite:///{db}")
    assert time.monotonic() - start < 15
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "/dev/zero is a device, not a regular file" in done.stderr
    assert not db.exists()


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    done = replayscope("import", "sglang", str(fifo), "--dry-run", timeout=15)
    assert done.returncode == 2 and "is a FIFO, not a regular file" in done.stderr


def test_binary_content_after_a_text_head_is_refused_and_writes_nothing(tmp_path):
    path = tmp_path / "mixed.log"
    path.write_bytes(read_fixture("sglang_new.log").encode() + b"\n" + b"x" * (3 << 20) + b"\x00\x01\x02" * 100)
    db = tmp_path / "never.db"
    done = replayscope("import", "sglang", str(path), "--db", f"sqlite:///{db}")
    assert done.returncode == 2 and "is a binary file" in done.stderr
    assert not db.exists()


def test_the_file_is_read_in_chunks_and_cut_as_split_lines_cuts_it(tmp_path, monkeypatch):
    monkeypatch.setattr(log_source, "READ_CHUNK", 5)
    path = tmp_path / "bars.log"
    data = (FIXTURES / "sglang_bar_forms.log").read_bytes()
    path.write_bytes(data)
    log = log_source.open_log_file(str(path))
    from replayscope.collector.importers.lines import split_lines
    assert list(log.lines()) == split_lines(data.decode())[0]
    assert log.ends_mid_line is split_lines(data.decode())[1]


def test_the_parser_takes_an_iterator_and_hands_events_on_as_it_goes(tmp_path, monkeypatch):
    """No list of the log's lines and no run's whole event list: the lines come from a
    generator, and events reach the drain in batches while lines are still being read."""
    monkeypatch.setattr(log_parser, "DRAIN_EVERY", 10)
    text = read_fixture("sglang_v046_decode_sample_serving.log")
    path = tmp_path / "serving.log"
    path.write_text(text)
    os.utime(path, (MTIME, MTIME))
    read = {"lines": 0}
    real_lines = log_source.LogFile.lines

    def counted(self):
        for line in real_lines(self):
            read["lines"] += 1
            yield line
    monkeypatch.setattr(log_source.LogFile, "lines", counted)
    drained: list[tuple[int, int, bool]] = []          # (lines read then, events, final)
    result = import_log("sglang", str(path), drain=lambda run, name, events, final:
                        drained.append((read["lines"], len(events), final)))
    total = len(text.splitlines())
    assert len(drained) > 3 and drained[0][0] < total          # events left before the file was read through
    assert max(n for _, n, _ in drained) < sum(n for _, n, _ in drained)
    (run,) = result.runs
    assert run.events == []                                    # nothing kept: the drain had them
    whole = the_events_of_a_whole_parse(text)
    assert sum(n for _, n, _ in drained) == len(whole) == run.summary()["events"]
    assert run.summary()["steps"] == whole_summary(text)["steps"]


def the_events_of_a_whole_parse(text):
    from replayscope.collector.importers import parse_sglang_text
    return parse_sglang_text(text, path="serving.log", mtime=MTIME).runs[0].events


def whole_summary(text):
    from replayscope.collector.importers import parse_sglang_text
    return parse_sglang_text(text, path="serving.log", mtime=MTIME).runs[0].summary()


def test_an_import_stopped_half_way_is_resumed_by_importing_again(tmp_path, monkeypatch):
    monkeypatch.setattr(log_parser, "DRAIN_EVERY", 20)
    path = tmp_path / "serving.log"
    path.write_text(read_fixture("sglang_v046_decode_sample_serving.log"))
    os.utime(path, (MTIME, MTIME))
    url = f"sqlite:///{tmp_path}/store.db"
    writes = {"n": 0}
    real = cli.DbSink.write_events

    def killed_after_two(self, run_id, events):
        writes["n"] += 1
        if writes["n"] == 3:
            raise KeyboardInterrupt            # the process stops here (Ctrl-C, a kill)
        return real(self, run_id, events)
    monkeypatch.setattr(cli.DbSink, "write_events", killed_after_two)
    args = cli_parser().parse_args(["import", "sglang", str(path), "--db", url])
    with pytest.raises(KeyboardInterrupt):
        args.handler(args)
    monkeypatch.setattr(cli.DbSink, "write_events", real)
    store = Store.open(url)
    try:
        (half,) = queries.list_runs(store)
        assert half["status"] == "running"                  # what was written stays; not ended yet
        args.handler(args)                                   # the same import again resumes it
        (run,) = queries.list_runs(store)
        assert run["run_id"] == half["run_id"] and run["status"] == "finished"
        again = cli_parser().parse_args(["import", "sglang", str(path), "--db", f"sqlite:///{tmp_path}/clean.db"])
        again.handler(again)
        clean = Store.open(f"sqlite:///{tmp_path}/clean.db")
        try:
            assert queries.list_runs(clean)[0]["status"] == "finished"
            def stored(s):             # what the log gave, not when the store saw it
                return {k: v for k, v in queries.run_summary(s, run["run_id"]).items()
                        if k not in ("created_at", "last_seen_at", "id")}
            assert stored(store) == stored(clean)
        finally:
            clean.dispose()
    finally:
        store.dispose()


# -- follow refuses what import refuses, and reads a grown file a bounded piece at a time ----

def test_follow_of_a_binary_file_exits_2_and_sends_nothing(tmp_path):
    blob = tmp_path / "blob.log"
    blob.write_bytes(b"\x7fELF\x00\x01\x02" * 1000)
    db = tmp_path / "never.db"
    done = replayscope("follow", "vllm", str(blob), "--db", f"sqlite:///{db}", "--idle-exit", "0.5", timeout=30)
    assert done.returncode == 2 and "is a binary file, not a server log" in done.stderr


def test_follow_of_a_device_exits_2_at_once():
    done = replayscope("follow", "sglang", "/dev/zero", "--db", "sqlite://", "--idle-exit", "0.5", "--state",
                       os.devnull, timeout=30)
    assert done.returncode == 2 and "is a device, not a regular file" in done.stderr


def test_follow_reads_what_a_file_grew_by_in_bounded_pieces(tmp_path, monkeypatch):
    from replayscope.collector.importers import follow as follow_module

    monkeypatch.setattr(follow_module, "MAX_READ", 4096)
    monkeypatch.setattr(follow_module, "READ_CHUNK", 1024)
    log = tmp_path / "server.log"
    log.write_text(read_fixture("sglang_v046_decode_sample_serving.log"))
    tail = follow_module.LogTail(str(log), follow_module.TailState(path=str(log)))
    sizes = []
    lines = []
    while True:
        before = tail.state.offset
        got = tail.read()
        if tail.state.offset == before:
            break
        sizes.append(tail.state.offset - before)
        lines += got
    assert max(sizes) <= 4096 and len(sizes) > 3
    assert lines == log.read_text().split("\n")[:-1]


# -- import events: checked and sent a line at a time ----------------------------------------

def _events_file(path, n: int) -> None:
    from replayscope.contract.events_file import write_events_file
    from replayscope.contract.wire import WIRE_VERSION

    run = {"run_id": "big-events", "name": "big", "source": "runner", "started_at": 1.7e9, "backend": "static",
           "model": "m", "device": "cpu", "torch_version": None, "config": {}, "wire_version": WIRE_VERSION}
    events = [{"seq": i, "ts": 1.7e9 + i, "kind": "heartbeat"} for i in range(n)]
    write_events_file(path, run, events)


def test_import_events_checks_and_sends_in_batches_without_reading_the_file_whole(tmp_path, monkeypatch):
    from replayscope.contract import events_file as ef

    path = tmp_path / "big.jsonl"
    _events_file(path, 1234)
    monkeypatch.setattr(ef, "read_events_file", lambda *a, **k: pytest.fail("read whole"))
    batches: list[int] = []
    real = cli.DbSink.write_events
    monkeypatch.setattr(cli.DbSink, "write_events",
                        lambda self, run_id, events: batches.append(len(events)) or real(self, run_id, events))
    args = cli_parser().parse_args(["import", "events", str(path), "--db", f"sqlite:///{tmp_path}/s.db"])
    out = io.StringIO()
    assert args.handler(args, out=out) == 0
    assert batches == [500, 500, 234] and "1234 events new" in out.getvalue()


@pytest.mark.parametrize("make", [lambda d: "/dev/zero", lambda d: os.mkfifo(d / "f.jsonl") or str(d / "f.jsonl")])
def test_import_events_refuses_what_is_not_a_regular_file_at_once(tmp_path, make):
    done = replayscope("import", "events", make(tmp_path), "--db", f"sqlite:///{tmp_path}/never.db", timeout=15)
    assert done.returncode == 2 and "not a regular file" in done.stderr
    assert not (tmp_path / "never.db").exists()
