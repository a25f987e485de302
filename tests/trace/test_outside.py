"""The run_end ``replayscope trace`` writes for a process that died without one
(``replayscope.runner.trace.outside``): after the file's last complete line, never twice."""

from __future__ import annotations

import json

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
