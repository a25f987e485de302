"""``replayscope db``: upgrade and current through the one CLI front."""

from __future__ import annotations

from app.cli import main
from collector.store import Store, head_revision


def test_db_upgrade_then_current(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/cli.db"
    assert main(["db", "current", "--db", url]) == 0
    assert "replayscope db upgrade" in capsys.readouterr().out
    assert main(["db", "upgrade", "--db", url]) == 0
    assert head_revision() in capsys.readouterr().out
    Store.open(url).dispose()
    assert main(["db", "current", "--db", url]) == 0
    assert "up to date" in capsys.readouterr().out


def test_a_bad_url_is_one_line_and_exit_2(capsys):
    assert main(["db", "upgrade", "--db", "nosuchdialect://x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("replayscope db: error:") and "\n" not in err


def test_db_prune_expires_raw_steps_past_the_retention_and_says_what_it_did(tmp_path, capsys):
    import time

    from collector import queries
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
    assert queries.run_summary(store, "old-run")["detail"]["raw_expired_before"] is not None
    store.dispose()


def test_db_prune_refuses_a_bad_retention_and_changes_nothing(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/prune.db"
    Store.open(url, upgrade=True).dispose()
    assert main(["db", "prune", "--db", url, "--raw-retention", "two weeks"]) == 2
    assert "--raw-retention 'two weeks'" in capsys.readouterr().err
