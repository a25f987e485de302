"""`replayscope import events FILE`: re-send a runner's events file or spool, all or nothing."""

import json

import pytest

from app.cli import main
from collector import queries
from collector.store import Store


@pytest.fixture()
def events_file(tmp_path):
    path = tmp_path / "run.jsonl"
    assert main(["run", "--backend", "static", "--preset", "tiny", "--workload", "mixed", "--steps", "60",
                 "--run-id", "file-run", "--quiet", "--events", str(path)]) == 0
    return path


def steps_in(path):
    return sum(1 for line in path.read_text().splitlines() if json.loads(line).get("kind") == "step")


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
