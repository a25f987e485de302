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
