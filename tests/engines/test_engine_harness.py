"""The runs both real-engine harnesses make the same way (benchmarks/engine_harness.py), with
stand-in programs instead of an engine: the offline program's command, log, report and run
record, and ``record OUT_DIR``'s recorder log and ``summary.json`` (a run that raised is its
error, the others go on)."""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks import engine_harness

OFFLINE = """import json, sys
print("engine says: ready", *sys.argv[3:])
json.dump({"produced": {"exact": True}}, open(sys.argv[2], "w"))
sys.exit(0 if "--fail" not in sys.argv else 4)
"""
RECORDER = """import sys
print("recording", sys.argv[1], sys.argv[2])
"""


def read_log(text: str) -> dict:
    return {"ready": "engine says: ready" in text, "options": text.split("ready", 1)[1].split()}


def test_the_offline_run_writes_its_log_and_report_beside_each_other(tmp_path):
    program = tmp_path / "offline.py"
    program.write_text(OFFLINE)
    run = engine_harness.run_offline(program, {}, read_log, tmp_path / "model", tmp_path / "out", "off", False,
                                     "--x", "--fail")
    assert (run.name, run.traced, run.events, run.returncode) == ("off", False, None, 4)
    assert run.log == tmp_path / "out" / "off.log"
    assert run.log_facts == {"ready": True, "options": ["--x", "--fail"]}
    assert run.report == {"produced": {"exact": True}} and run.seconds["command"] > 0
    assert json.loads((tmp_path / "out" / "off.report.json").read_text()) == run.report


def test_record_writes_the_recorders_log_and_every_runs_summary_an_error_included(tmp_path, capsys):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")              # make_model keeps a model already there
    recorder = tmp_path / "recorder.py"
    recorder.write_text(RECORDER)
    program = tmp_path / "offline.py"
    program.write_text(OFFLINE)

    def run_offline(model, out, name, traced):
        return engine_harness.run_offline(program, {}, read_log, model, out, name, False)

    def run_serve(model, out, name, traced):
        raise RuntimeError(f"{name} did not become healthy")

    results = engine_harness.record(tmp_path, recorder, {}, run_offline, run_serve, prefix="e-")
    assert (tmp_path / "recorder.log").read_text() == f"recording {tmp_path / 'model'} {tmp_path / 'recorded.jsonl'}\n"
    assert results[0] == {"name": "recorder", "returncode": 0}
    assert [r["name"] for r in results[1:3]] == ["e-offline", "e-offline-traced"]
    assert results[3] == {"error": "RuntimeError('e-serve-traced did not become healthy')"}
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(json.dumps(results, default=str))
    assert len(capsys.readouterr().out.splitlines()) == 3                # each run printed as it ends


def test_main_records_into_its_folder_and_anything_else_exits_with_the_usage(tmp_path, monkeypatch):
    recorded = []
    monkeypatch.setattr(sys, "argv", ["harness", "record", str(tmp_path)])
    engine_harness.main(recorded.append, "usage")
    assert recorded == [tmp_path]
    monkeypatch.setattr(sys, "argv", ["harness", "recorded", str(tmp_path)])
    with pytest.raises(SystemExit) as exit_:
        engine_harness.main(recorded.append, "usage")
    assert exit_.value.code == "usage" and recorded == [tmp_path]
