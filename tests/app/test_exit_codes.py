"""Every command's exit code says whether it did its job (docs/commands.md), and what it
prints on the way out is honest. The audit: ``run --collector`` refused with 401 exited 0;
``advise ... | head`` ended in a BrokenPipe traceback; the password mask garbled errors
(``***ostgresql+***syco***g://u:***@…: ***i*** install 're***laysco***e[***ostgres]'``) and a
MySQL URL's hint named ``MySQLdb`` (not a pip package)."""

from __future__ import annotations

import argparse
import errno
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replayscope.app.cli import build_parser, main
from tests.live_server import free_port, serving

# The codes docs/commands.md promises (replayscope.contract.errors.EXIT_* in the code): a contract, so spelt out.
EXIT_DONE, EXIT_INCOMPLETE, EXIT_ERROR, EXIT_PIPE_CLOSED = 0, 1, 2, 141

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "commands.md"
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def commands(parser: argparse.ArgumentParser, prefix: str = "") -> list[str]:
    out = []
    for action in parser._actions:                   # noqa: SLF001 (argparse has no public walk)
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = commands(sub, f"{prefix}{name} ")
                out.extend(nested or [f"{prefix}{name}"])
    return out


def test_the_exit_code_table_names_every_command():
    documented = set(re.findall(r"^\| `replayscope ([a-z ]+?)`", DOC.read_text(), flags=re.M))
    assert documented == set(commands(build_parser())), "docs/commands.md lists every command, no other"
    for code in (EXIT_DONE, EXIT_INCOMPLETE, EXIT_ERROR, 130, EXIT_PIPE_CLOSED):
        assert f"| {code} |" in DOC.read_text()


@pytest.fixture
def advised_store(tmp_path):
    from replayscope.collector.store import Store
    from tests.app import synthetic

    url = f"sqlite:///{tmp_path / 'a.db'}"
    store = Store.open(url, upgrade=True)
    synthetic.fill(store, "syn-1", steps=600)
    store.dispose()
    return url


def test_advise_into_a_pipe_closed_early_ends_quietly(advised_store):
    """What ``replayscope advise RUN | head -1`` does once head has its line."""
    reader, writer = os.pipe()
    os.close(reader)                                  # the reader went away before anything was written
    done = subprocess.run([sys.executable, "-m", "replayscope", "advise", "syn-1", "--db", advised_store],
                          stdout=writer, stderr=subprocess.PIPE, text=True, env=ENV, cwd=REPO, timeout=120)
    os.close(writer)
    assert done.returncode == EXIT_PIPE_CLOSED, done.stderr
    assert done.stderr == "", "no traceback, no 'Exception ignored' line"


def test_advise_into_head_prints_its_first_line(advised_store):
    done = subprocess.run(f"{sys.executable} -m replayscope advise syn-1 --db {advised_store} | head -n 1; "
                          "echo \"status ${PIPESTATUS[0]}\"", shell=True, executable="/bin/bash",
                          capture_output=True, text=True, env=ENV, cwd=REPO, timeout=120)
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and lines[-1] in ("status 0", f"status {EXIT_PIPE_CLOSED}"), done.stdout
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_an_unreachable_postgresql_url_is_masked_in_place_and_the_rest_is_intact(capsys):
    port = free_port()
    assert main(["db", "upgrade", "--db", f"postgresql+psycopg://u:p@127.0.0.1:{port}/x"]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith(f"replayscope db: error: cannot open postgresql+psycopg://u:***@127.0.0.1:{port}/x: "
                          f"connection failed: "), err
    assert "***ostgres" not in err and "Connection refused" in err


def test_a_mysql_url_names_the_pip_package_of_its_driver(capsys):
    assert main(["db", "upgrade", "--db", "mysql://u:p@127.0.0.1/x"]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err == ("replayscope db: error: mysql://u:***@127.0.0.1/x: its database driver (MySQLdb) is not "
                   "installed: pip install mysqlclient (replayscope is tested on SQLite and PostgreSQL only)\n")


def run_argv(*extra: str) -> list[str]:
    """``replayscope run`` of the tiny preset; a test that runs it skips where torch is not installed."""
    pytest.importorskip("torch", reason="`replayscope run` runs a model")
    return ["run", "--backend", "static", "--preset", "tiny", "--workload", "mixed", "--steps", "40", "--quiet",
            *extra]


def test_a_run_whose_collector_refuses_its_token_exits_1_and_says_where_its_events_are(tmp_path):
    from replayscope.collector.api import create_api
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    store = Store.open(f"sqlite:///{tmp_path / 'c.db'}", upgrade=True)
    spool = tmp_path / "spool.jsonl"
    try:
        with serving(create_api(store, Settings(run_services=False, token="right"))) as url:
            done = subprocess.run([sys.executable, "-m", "replayscope", *run_argv(
                "--collector", url, "--token", "wrong", "--spool", str(spool))],
                capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    finally:
        store.dispose()
    assert done.returncode == EXIT_INCOMPLETE, done.stderr[-2000:]
    assert "the collector refused the token" in done.stderr
    assert "events were not delivered to the collector (kept in the spool" in done.stderr
    assert spool.stat().st_size > 0


def test_a_run_whose_events_file_cannot_be_created_exits_2_before_running(tmp_path, capsys):
    assert main(run_argv("--events", "/dev/full")) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "cannot write the events file /dev/full: No space left on device" in err


def test_a_run_whose_disk_fills_up_exits_1_and_counts_what_was_lost(tmp_path, capsys, monkeypatch):
    from replayscope.contract import events_file

    def fill_up(self, events):                      # the run record fit; the disk is full after it
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(events_file.EventsFileWriter, "write", fill_up)
    monkeypatch.setenv("REPLAYSCOPE_EVENTS_IN_PROCESS", "1")    # the patched writer is this process's
    code = main(run_argv("--events", str(tmp_path / "run.jsonl")))
    err = capsys.readouterr().err
    assert code == EXIT_INCOMPLETE, err
    assert re.search(r"replayscope run: \d+ events could not be written \(the sink failed, see above\)", err)
    assert "No space left on device" in err


def test_a_run_that_delivered_everything_exits_0(tmp_path, capsys):
    assert main(run_argv("--events", str(tmp_path / "ok.jsonl"))) == EXIT_DONE


def test_follow_into_a_collector_that_refuses_its_token_exits_1(tmp_path):
    from replayscope.collector.api import create_api
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    log = REPO / "tests" / "importers" / "fixtures" / "vllm_new.log"
    store = Store.open(f"sqlite:///{tmp_path / 'f.db'}", upgrade=True)
    try:
        with serving(create_api(store, Settings(run_services=False, token="right"))) as url:
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "replayscope", "follow", "vllm", str(log), "--collector", url,
                                   "--token", "wrong", "--idle-exit", "1", "--state", str(tmp_path / "state.json")],
                                  capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    finally:
        store.dispose()
    assert done.returncode == EXIT_INCOMPLETE, (done.stdout[-1500:], done.stderr[-1500:])
    assert "refused the token" in done.stderr and time.monotonic() - started < 120
