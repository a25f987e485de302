"""``replayscope db``, and how every command opens its store: a new SQLite file is created,
a store behind is migrated only when asked, errors are one line without the password."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from replayscope.app.cli import main
from replayscope.collector.settings import Settings
from replayscope.collector.store import Store, head_revision

REPO = Path(__file__).resolve().parents[2]
VLLM_LOG = REPO / "tests" / "importers" / "fixtures" / "vllm_new.log"


def revision(url: str) -> str | None:
    store = Store.connect(url)
    store.dispose()
    return store.found_revision


def old_store(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    Store(url).upgrade("0001")
    return url


def test_db_upgrade_then_current(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/cli.db"
    assert main(["db", "current", "--db", url]) == 2        # reading a missing store creates none
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "cli.db").exists()
    assert main(["db", "upgrade", "--db", url]) == 0
    assert head_revision() in capsys.readouterr().out
    Store.open(url).dispose()
    assert main(["db", "current", "--db", url]) == 0
    assert "up to date" in capsys.readouterr().out


def test_db_upgrade_migrates_a_store_behind(tmp_path, capsys):
    url = old_store(tmp_path)
    assert main(["db", "upgrade", "--db", url]) == 0
    assert f"upgraded 0001 -> {head_revision()}" in capsys.readouterr().out
    assert revision(url) == head_revision()


def test_a_bad_url_is_one_line_and_exit_2(capsys):
    assert main(["db", "upgrade", "--db", "nosuchdialect://x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("replayscope db: error:") and "\n" not in err


def test_import_never_migrates_a_store_behind_without_migrate(tmp_path, capsys):
    url = old_store(tmp_path)
    assert main(["import", "vllm", str(VLLM_LOG), "--db", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "behind" in err and "--migrate" in err
    assert revision(url) == "0001"


def test_import_with_migrate_upgrades_then_writes(tmp_path, capsys):
    url = old_store(tmp_path)
    assert main(["import", "vllm", str(VLLM_LOG), "--db", url, "--migrate"]) == 0
    assert "written to" in capsys.readouterr().out
    assert revision(url) == head_revision()


def test_import_into_a_new_sqlite_file_named_by_the_environment(tmp_path, capsys, monkeypatch):
    path = tmp_path / "from-env.db"
    monkeypatch.setenv("REPLAYSCOPE_DB", f"sqlite:///{path}")
    assert main(["import", "vllm", str(VLLM_LOG)]) == 0
    assert f"written to store sqlite:///{path}" in capsys.readouterr().out
    assert revision(f"sqlite:///{path}") == head_revision()


@pytest.mark.parametrize("argv", [["db", "upgrade"], ["import", "vllm", str(VLLM_LOG)], ["advise", "r1"]])
def test_an_unreachable_database_is_one_line_without_the_password(argv, capsys):
    assert main([*argv, "--db", "postgresql+psycopg://user:s3cret@127.0.0.1:9/x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "s3cret" not in err and "user:***@127.0.0.1:9/x" in err


def test_a_missing_postgresql_driver_names_the_extra_in_one_line():
    blocked = """
import runpy, sys
class NoPsycopg:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("psycopg", "psycopg2"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoPsycopg())
sys.argv = ["replayscope", *sys.argv[1:]]
runpy.run_module("replayscope.app.cli", run_name="__main__", alter_sys=True)
"""
    done = subprocess.run([sys.executable, "-c", blocked, "db", "upgrade", "--db",
                           "postgresql+psycopg://user:s3cret@127.0.0.1:9/x"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "pip install 'replayscope[postgres]'" in done.stderr and "s3cret" not in done.stderr


def test_db_prune_expires_raw_steps_past_the_retention_and_says_what_it_did(tmp_path, capsys):
    import time

    from replayscope.collector.models import queries
    from replayscope.collector.ingest import ingest_events, ingest_run

    from .conftest import run_record, step

    url = f"sqlite:///{tmp_path}/prune.db"
    store = Store.open(url, upgrade=True)
    old = time.time() - 30 * 86400
    ingest_run(store, run_record("old-run", started_at=old), now=old)        # it arrived 30 days ago
    ingest_events(store, "old-run", [step(i, old + i) for i in range(50)], now=old + 60)
    store.dispose()
    assert main(["db", "prune", "--db", url, "--raw-retention", "14d"]) == 0
    out = capsys.readouterr().out
    assert "runs whose detail expired now: 1" in out and "steps 50" in out
    store = Store.open(url)
    assert queries.run_summary(store, "old-run")["steps"] == 50
    assert queries.run_summary(store, "old-run")["step_detail"]["raw_expired_before"] is not None
    store.dispose()


def test_db_prune_refuses_a_bad_retention_and_changes_nothing(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/prune.db"
    Store.open(url, upgrade=True).dispose()
    assert main(["db", "prune", "--db", url, "--raw-retention", "two weeks"]) == 2
    assert "--raw-retention 'two weeks'" in capsys.readouterr().err


# -- runs list --------------------------------------------------------------------------------

@pytest.fixture
def listed_store(tmp_path):
    """Three runs: a runner's finished one with steps, a vLLM log's and a running one without steps."""
    from replayscope.collector.ingest import ingest_events, ingest_run
    from tests.app import synthetic

    url = f"sqlite:///{tmp_path}/list.db"
    store = Store.open(url)
    synthetic.fill(store, "syn-1", steps=100)
    vllm = {**synthetic.run_record("vllm-1", source="vllm-log"), "model": "meta-llama/Llama-3.1-8B"}
    ingest_run(store, vllm)
    ingest_events(store, "vllm-1", [{"seq": 0, "ts": vllm["started_at"] + 1, "kind": "run_end", "status": "failed"}])
    ingest_run(store, synthetic.run_record("live-1", started_at=2e9))
    ingest_events(store, "live-1", [])
    store.dispose()
    return url


def test_runs_list_prints_a_table_newest_first(listed_store, capsys):
    assert main(["runs", "list", "--db", listed_store]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["RUN_ID", "NAME", "SOURCE", "MODEL", "STATUS"]
    assert [line.split()[0] for line in lines[1:]] == ["live-1", "vllm-1", "syn-1"]
    assert lines[1].endswith("no steps"), "no steps is not an eager share of 0%"
    assert "running" in lines[1] and "vllm-log" in lines[2] and "failed" in lines[2]


@pytest.mark.parametrize("flags, ids", [(["--source", "vllm-log"], ["vllm-1"]), (["--status", "running"], ["live-1"]),
                                        (["--model", "meta-llama/Llama-3.1-8B"], ["vllm-1"]),
                                        (["--model", "tiny", "--source", "runner"], ["live-1", "syn-1"])])
def test_runs_list_filters_and_json(listed_store, capsys, flags, ids):
    assert main(["runs", "list", "--db", listed_store, "--json", *flags]) == 0
    assert [run["run_id"] for run in json.loads(capsys.readouterr().out)] == ids


def test_runs_list_through_a_collector_with_the_same_filters(listed_store, capsys):
    from replayscope.collector.api import create_api
    from tests.live_server import serving

    store = Store.open(listed_store)
    with serving(create_api(store, Settings(run_services=False))) as url:
        assert main(["runs", "list", "--collector", url, "--source", "vllm-log", "--json"]) == 0
        assert [run["run_id"] for run in json.loads(capsys.readouterr().out)] == ["vllm-1"]
        assert main(["runs", "list", "--collector", url, "--status", "interrupted"]) == 0
        assert capsys.readouterr().out == "no runs match --status interrupted\n"
    store.dispose()


@pytest.mark.parametrize("argv", [["--status", "done"], ["--source", "vllm"], ["--limit", "0"],
                                  ["--db", "sqlite:///x.db", "--collector", "http://127.0.0.1:9"]])
def test_runs_list_refuses_a_bad_flag_with_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["runs", "list", *argv])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
