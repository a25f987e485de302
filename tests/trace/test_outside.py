"""The run_end ``replayscope trace`` writes for a process that died without one
(``replayscope.runner.trace.outside``): after the file's last complete line, never twice."""

from __future__ import annotations

import json

import pytest

from replayscope.contract.events_file import read_events_file, write_events_file
from replayscope.runner.trace.outside import OutsideEnds, end_events_file, read_registry, register

RUN = {"wire_version": 1, "run_id": "t-1", "name": "n", "source": "trace", "started_at": 1.0e9,
       "backend": "trace", "model": "m", "device": "cpu", "config": {}}
STEP = {"kind": "warning", "code": "x", "message": "m"}
END = {"kind": "run_end", "ts": 1.0e9 + 2, "status": "interrupted", "error": "killed"}


def test_a_line_cut_off_mid_write_is_removed_and_the_run_end_follows_the_last_event(tmp_path):
    path = tmp_path / "e.jsonl"
    write_events_file(path, RUN, [{"seq": 0, "ts": 1.0e9, **STEP}, {"seq": 1, "ts": 1.0e9, **STEP}])
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"seq": 2, "ts": 1000000000.0, "kind": "warn')
    end_events_file(str(path), END)
    run, events, warnings = read_events_file(path)
    assert warnings == [] and [e["seq"] for e in events] == [0, 1, 2]
    assert events[-1]["kind"] == "run_end" and events[-1]["status"] == "interrupted"


def test_a_file_already_ended_is_left_as_it_is_and_a_file_with_only_its_run_gets_seq_0(tmp_path):
    ended = tmp_path / "ended.jsonl"
    write_events_file(ended, RUN, [{"seq": 0, "ts": 1.0e9, **STEP}, {"seq": 1, **END, "status": "finished"}])
    before = ended.read_bytes()
    end_events_file(str(ended), END)
    assert ended.read_bytes() == before
    empty = tmp_path / "empty.jsonl"
    write_events_file(empty, RUN)
    end_events_file(str(empty), END)
    assert [(e["seq"], e["kind"]) for e in read_events_file(empty).events] == [(0, "run_end")]


def test_a_run_whose_events_file_cannot_be_ended_is_counted_as_one_lost_event(tmp_path):
    workdir = str(tmp_path)
    register(workdir, {"event": "open", "run_id": "t-999999999", "pid": 999_999_999,
                       "target": str(tmp_path / "missing.jsonl")})
    OutsideEnds(workdir).end_gone()
    run = read_registry(workdir)["t-999999999"]
    assert run["status"] == "interrupted" and run["ended_by"] == "trace" and run["lost"] == 1
    assert "could not be written" in run["error"]
    assert json.loads((tmp_path / "runs.jsonl").read_text().splitlines()[-1])["event"] == "close"


def test_a_run_its_parent_announced_it_would_stop_at_the_programs_end_ends_finished_with_a_warning(tmp_path):
    workdir = str(tmp_path)
    for name, pid in (("listed", 999_999_991), ("unlisted", 999_999_992), ("early", 999_999_993)):
        path = tmp_path / f"{name}.jsonl"
        write_events_file(path, RUN, [{"seq": 0, "ts": 1.0e9, **STEP}])
        register(workdir, {"event": "open", "run_id": name, "pid": pid, "target": str(path)})
    register(workdir, {"event": "stopping_children", "pid": 7, "note": "how X stops them",
                       "clean": True, "children": [999_999_991], "ts": 1.0e9})
    register(workdir, {"event": "stopping_children", "pid": 8, "note": "early",
                       "clean": False, "children": [999_999_993], "ts": 1.0e9})
    OutsideEnds(workdir).end_gone()
    runs = read_registry(workdir)
    assert (runs["listed"]["status"], runs["listed"]["error"]) == ("finished", None)
    assert "how X stops them" in runs["listed"]["note"]
    assert runs["unlisted"]["status"] == runs["early"]["status"] == "interrupted"
    events = read_events_file(tmp_path / "listed.jsonl").events
    assert [(e["seq"], e["kind"]) for e in events] == [(0, "warning"), (1, "warning"), (2, "run_end")]
    assert events[1]["code"] == "stopped_by_parent" and "pid 7" in events[1]["message"]
    assert events[2]["status"] == "finished" and "error" not in events[2]


def test_a_run_the_trace_ends_is_counted_from_its_events_file_for_the_summary(tmp_path):
    from replayscope.runner.trace.run_counts import events_file_counts

    path = tmp_path / "e.jsonl"
    step = {"kind": "step", "stage": "decode", "raw_bs": 2, "graph_bs": None, "num_tokens": 2,
            "padded_tokens": 0, "duration_s": None}
    write_events_file(path, RUN, [
        {"seq": 0, "ts": 1.0e9, "kind": "capture", "graph_bs": 4, "stage": "decode", "status": "ok"},
        {"seq": 1, "ts": 1.0e9, "kind": "capture", "graph_bs": 8, "stage": "decode", "status": "failed",
         "error": "oom"},
        {"seq": 2, "ts": 1.0e9, **step, "mode": "eager", "reason": "batch_too_large"},
        {"seq": 3, "ts": 1.0e9, **step, "mode": "graph", "graph_bs": 2, "reason": None},
        {"seq": 4, "ts": 1.0e9, **step, "mode": "eager", "reason": "batch_too_large"}])
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"seq": 5, "ts": 1000000000.0, "kind": "step", "mo')     # cut off mid-write
    assert events_file_counts(str(path)) == {"steps": 3, "modes": {"eager": 2, "graph": 1},
                                             "reasons": {"batch_too_large": 2}, "captures": 2, "failed_captures": 1}
    assert events_file_counts(str(tmp_path / "missing.jsonl")) == {}


class StandInCollector:
    """A server on a free loopback port that takes the trace's run_end (POST) and answers each
    read (GET) as ``answer`` says: ``"hang up"`` closes the connection without an answer, else
    ``(status, body bytes)``. It keeps the reads' Authorization headers."""

    def __init__(self, answer):
        import http.server
        import threading

        reads = self.reads = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                self._send(200, b'{"accepted": 2}')

            def do_GET(self):
                reads.append((self.path, self.headers.get("Authorization")))
                if answer == "hang up":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self._send(*answer)

            def _send(self, status, body):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def ended_by_trace_to(collector: str, workdir: str, token: str | None = None) -> tuple[dict, str]:
    """A run to ``collector`` whose process is gone, ended by the trace: its registry record
    and its summary line."""
    from replayscope.runner.trace.launch import summary_lines

    register(workdir, {"event": "open", "run_id": "t-999999999", "pid": 999_999_999, "process": "worker"})
    OutsideEnds(workdir, collector=collector, token=token).end_gone()
    runs = read_registry(workdir)
    [line] = [line for line in summary_lines(runs, collector) if "t-999999999" in line]
    return runs["t-999999999"], line


def test_to_a_collector_that_cannot_be_reached_the_summary_says_the_counts_are_not_available(tmp_path):
    from tests.live_server import free_port

    collector = f"http://127.0.0.1:{free_port()}"          # nothing listens there
    run, line = ended_by_trace_to(collector, str(tmp_path), token="s3cret-token")
    assert run["status"] == "interrupted" and run["lost"] == 1 and "steps" not in run
    assert "counts not available: collector did not answer: cannot reach " in line
    assert "steps" not in line and "s3cret-token" not in line


@pytest.mark.parametrize("answer, why", [
    ("hang up", "collector did not answer: cannot reach "),
    ((503, b'{"detail": "the store is not answering"}'), "collector answered HTTP 503: the store is not answering"),
    ((200, b"<html>a proxy's page</html>"), "the collector's answer is not JSON"),
    ((200, b'{"steps": "three"}'), "the collector's answer is not a run's summary and captures")],
    ids=["hangs-up", "error-status", "not-json", "not-a-summary"])
def test_a_collector_that_takes_the_run_end_but_does_not_answer_the_read_gets_no_counts_shown(
        tmp_path, answer, why):
    server = StandInCollector(answer)
    try:
        run, line = ended_by_trace_to(server.url, str(tmp_path), token="s3cret-token")
    finally:
        server.close()
    assert run["status"] == "interrupted" and run["lost"] == 0
    assert f"counts not available: {why}" in line and "0 steps" not in line
    assert server.reads[0] == ("/v1/runs/t-999999999", "Bearer s3cret-token")
    assert "s3cret-token" not in line
