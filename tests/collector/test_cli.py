"""``replayscope db``, and how every command opens its store: a new SQLite file is created,
a store behind is migrated only when asked, errors are one line without the password."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import main
from collector.store import Store, head_revision

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
runpy.run_module("app.cli", run_name="__main__", alter_sys=True)
"""
    done = subprocess.run([sys.executable, "-c", blocked, "db", "upgrade", "--db",
                           "postgresql+psycopg://user:s3cret@127.0.0.1:9/x"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "pip install 'replayscope[postgres]'" in done.stderr and "s3cret" not in done.stderr


def test_db_prune_expires_raw_steps_past_the_retention_and_says_what_it_did(tmp_path, capsys):
    import time

    from collector.models import queries
    from collector.ingest import ingest_events, ingest_run

    from .conftest import run_record, step

    url = f"sqlite:///{tmp_path}/prune.db"
    store = Store.open(url, upgrade=True)
    old = time.time() - 30 * 86400
    ingest_run(store, run_record("old-run", started_at=old))
    ingest_events(store, "old-run", [step(i, old + i) for i in range(50)])
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
