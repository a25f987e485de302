"""The import and follow commands' edges (issue 34): a log with no run in it is an error,
not "0 run(s)"; ``follow`` says what reached its target, and what did not, instead of
counting runs it only tried to send."""

from __future__ import annotations

import argparse
import io

import pytest

from replayscope.app.cli import main
from replayscope.app.cli import imports as cli
from replayscope.contract import sinks
from tests.importers.test_follow import START, decode, db_args
from tests.live_server import free_port


@pytest.mark.parametrize("content", ["", "starting up\nall good\n", "\n\n\n"])
@pytest.mark.parametrize("engine, label", [("vllm", "vLLM"), ("sglang", "SGLang")])
def test_a_log_without_a_run_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, content, engine, label):
    path = tmp_path / "app.log"
    path.write_text(content)
    db = tmp_path / "never.db"
    assert main(["import", engine, str(path), "--db", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"no {label} server start, startup line or failure found" in err and "nothing was written" in err
    assert not db.exists()
    assert main(["import", engine, str(path), "--json", "--dry-run"]) == 2


def test_follow_into_a_store_says_how_many_events_it_delivered(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("\n".join(START + [decode(1, 3, True)]) + "\n")
    out = io.StringIO()
    assert cli.run_follow(db_args(tmp_path, log, idle_exit=0.2), out=out) == 0
    last = out.getvalue().strip().splitlines()[-1]
    assert last.startswith("1 run(s) followed: ") and " event(s) delivered to store sqlite:///" in last
    assert int(last.split(": ")[1].split()[0]) > 0
    assert "NOT delivered" not in last


def test_follow_with_the_collector_down_says_nothing_was_delivered_and_where_it_is(tmp_path, monkeypatch):
    class QuickHttpSink(sinks.HttpSink):
        def __init__(self, url, **kw):
            super().__init__(url, **kw, drain_timeout_s=0.3, retries=0, timeout_s=0.5)

    monkeypatch.setattr(sinks, "HttpSink", QuickHttpSink)
    monkeypatch.chdir(tmp_path)                      # the spool is written beside the command
    log = tmp_path / "server.log"
    log.write_text("\n".join(START + [decode(1, 3, True)]) + "\n")
    args = argparse.Namespace(engine="sglang", path=str(log), db=None, collector=f"http://127.0.0.1:{free_port()}",
                              token=None, state=None, interval=0.02, idle_exit=0.2)
    out = io.StringIO()
    assert cli.run_follow(args, out=out) == 1
    last = out.getvalue().strip().splitlines()[-1]
    assert last.startswith("1 run(s) followed: 0 event(s) delivered to collector http://127.0.0.1:")
    assert "NOT delivered, kept in replayscope-spool-" in last and "replayscope import events" in last
    assert "run(s) sent" not in out.getvalue()
