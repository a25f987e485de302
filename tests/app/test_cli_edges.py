"""The command line's edges (issues 34 and 36): what a user types by mistake, or types first,
gets help or one line and exit 2, never a traceback, and nothing is changed on the way."""

from __future__ import annotations

import pytest

from replayscope.app.cli import main

EXIT_DONE, EXIT_ERROR = 0, 2          # docs/commands.md


def test_replayscope_alone_prints_its_help_and_exits_0(capsys):
    assert main([]) == EXIT_DONE
    out = capsys.readouterr()
    assert out.out.startswith("usage: replayscope") and "serve" in out.out and "runs" in out.out
    assert out.err == ""


@pytest.mark.parametrize("argv", [["serve", "--port", "70000"], ["serve", "--port", "99999"], ["serve", "--port", "-1"],
                                  ["demo", "--port", "99999"], ["db", "prune", "--raw-retention", "99999999999d"]])
def test_a_flag_out_of_its_range_is_one_line_and_exit_2(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REPLAYSCOPE_DB", raising=False)
    assert main(argv) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err and argv[-2] in err, err
    assert list(tmp_path.iterdir()) == [], "nothing created"


@pytest.mark.parametrize("argv", [["db", "current"], ["runs", "delete", "r1"], ["advise", "r1"],
                                  ["db", "current", "--db", "sqlite:///sub/missing.db"]])
def test_a_command_that_reads_never_creates_a_store(argv, capsys, tmp_path, monkeypatch):
    """``db current`` on a missing SQLite path made it; ``runs delete`` and ``advise`` without
    ``--db`` made ./replayscope.db. Now: one line naming the path, exit 2, no file."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REPLAYSCOPE_DB", raising=False)
    assert main(argv) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err and "nothing was created" in err, err
    assert list(tmp_path.rglob("*")) == [], "no store, no journal, no folder"


def test_db_current_still_reads_an_existing_store(capsys, tmp_path):
    from replayscope.collector.store import Store, head_revision

    url = f"sqlite:///{tmp_path / 'r.db'}"
    Store.open(url).dispose()
    assert main(["db", "current", "--db", url]) == EXIT_DONE
    assert f"{head_revision()} (up to date)" in capsys.readouterr().out
