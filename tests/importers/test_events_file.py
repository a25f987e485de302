"""`replayscope import events FILE...`: re-send runners' events files or spools, all or nothing."""

import json

import pytest

from replayscope.app.cli import main
from replayscope.collector.models import queries
from replayscope.collector.store import Store
from replayscope.contract.events_file import read_events_file


def a_run(path, run_id: str, steps: int = 60):
    pytest.importorskip("torch", reason="the events file is a real `replayscope run`'s")
    assert main(["run", "--backend", "static", "--preset", "tiny", "--workload", "mixed", "--steps", str(steps),
                 "--run-id", run_id, "--quiet", "--events", str(path)]) == 0
    return path


@pytest.fixture()
def events_file(tmp_path):
    return a_run(tmp_path / "run.jsonl", "file-run")


def steps_in(path):
    return sum(1 for event in read_events_file(path).events if event["kind"] == "step")


def test_an_events_file_imports_once_and_a_second_import_adds_nothing(events_file, tmp_path, capsys):
    db = f"sqlite:///{tmp_path}/store.db"
    assert main(["import", "events", str(events_file), "--db", db]) == 0
    assert main(["import", "events", str(events_file), "--db", db]) == 0
    out = capsys.readouterr().out
    assert "0 events new" in out.splitlines()[-1]
    store = Store.open(db)
    summary = queries.run_summary(store, "file-run")
    assert summary["steps"] == steps_in(events_file) == 60 and summary["status"] == "finished"


def test_a_bad_line_names_itself_and_writes_nothing(events_file, tmp_path, capsys):
    lines = events_file.read_text().splitlines()
    broken = json.loads(lines[5])
    broken["kind"] = "teleport"
    lines[5] = json.dumps(broken)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    db = f"sqlite:///{tmp_path}/store.db"
    assert main(["import", "events", str(bad), "--db", db]) == 2
    assert f"{bad}:6: kind: 'teleport' is not one of" in capsys.readouterr().err
    assert queries.list_runs(Store.open(db, upgrade=True)) == []


def test_several_files_import_in_one_command_each_reported(events_file, tmp_path, capsys):
    second = a_run(tmp_path / "second.jsonl", "second-run", steps=30)
    db = f"sqlite:///{tmp_path}/store.db"
    assert main(["import", "events", str(events_file), str(second), "--db", db]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{events_file}: run file-run (") and out[1].startswith(f"{second}: run second-run (")
    store = Store.open(db)
    assert {r["run_id"]: r["steps"] for r in queries.list_runs(store)} == {"file-run": 60, "second-run": 30}
    store.dispose()


def test_a_bad_line_in_any_file_writes_none_of_them(events_file, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(events_file.read_text().replace('"kind": "step"', '"kind": "teleport"', 1))
    db = f"sqlite:///{tmp_path}/store.db"
    assert main(["import", "events", str(events_file), str(bad), "--db", db]) == 2
    assert f"{bad}:" in capsys.readouterr().err
    store = Store.open(db)
    assert queries.list_runs(store) == []
    store.dispose()


def test_a_file_cut_off_mid_line_imports_what_is_whole_and_says_so(events_file, tmp_path, capsys):
    cut = tmp_path / "cut.jsonl"
    cut.write_text(events_file.read_text()[:-20])       # a runner killed mid-write
    db = f"sqlite:///{tmp_path}/store.db"
    assert main(["import", "events", str(cut), "--db", db]) == 0
    out = capsys.readouterr().out
    assert "cut off (the writer stopped mid-line); skipped" in out
    store = Store.open(db)
    [run] = queries.list_runs(store)
    store.dispose()
    assert run["run_id"] == "file-run" and run["status"] == "running"   # its run_end was the cut line
