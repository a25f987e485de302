"""``replayscope advise``, ``serve`` and ``demo`` from the command line."""

import subprocess
import sys
from pathlib import Path

import pytest

from replayscope.app.cli import main
from tests.live_server import LOOPBACK_BASE, free_port

REPO = Path(__file__).resolve().parents[2]


def test_advise_prints_sizes_and_flags_for_a_stored_run(filled, capsys):
    assert main(["advise", "syn-1", "--budget", "3", "--db", filled.url]) == 0
    out = capsys.readouterr().out
    assert "budget 3 graphs" in out and "held back" in out
    assert "--cudagraph-capture-sizes" in out and "--cuda-graph-bs" in out and "--compilation-config" in out
    assert "compilation_config=" in out and "--capture-sizes" in out
    assert "Validity:" in out and "replayscope run: valid" in out


def test_advise_json_is_what_the_api_answers_and_the_budget_defaults_to_the_runs_count(filled, capsys):
    import json

    from replayscope.collector.analysis.advisor.stored import advice_for_run

    assert main(["advise", "syn-1", "--json", "--db", filled.url]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == advice_for_run(filled, "syn-1")
    assert printed["budget"] == 6 and printed["budget_basis"] == "the run's 6 graphs"
    assert printed["split"]["held_back_steps"] > 0 and printed["verdict"]["compared"]


def test_advise_through_a_collector_with_its_token_prints_what_the_store_gives(filled, capsys):
    from replayscope.collector.api import create_api
    from replayscope.collector.settings import Settings
    from tests.live_server import serving

    assert main(["advise", "syn-1", "--budget", "3", "--db", filled.url]) == 0
    direct = capsys.readouterr().out
    with serving(create_api(filled, Settings(run_services=False, token="s3cret"))) as url:
        assert main(["advise", "syn-1", "--budget", "3", "--collector", url, "--token", "s3cret"]) == 0
        assert capsys.readouterr().out == direct
        result = subprocess.run([sys.executable, "-m", "replayscope", "advise", "syn-1", "--collector", url, "--json"],
                                cwd=REPO, capture_output=True, text=True, timeout=120,
                                env={**__import__("os").environ, "REPLAYSCOPE_TOKEN": "s3cret"})
        assert result.returncode == 0 and '"sizes"' in result.stdout
        assert main(["advise", "nope", "--collector", url]) == 2
        assert "no run 'nope' in the collector at" in capsys.readouterr().err
        assert main(["advise", "syn-1", "--collector", url, "--eager-weight", "-1"]) == 2
        assert "--eager-weight" in capsys.readouterr().err
    assert main(["advise", "syn-1", "--collector", "http://127.0.0.1:9"]) == 2
    assert "collector http://127.0.0.1:9" in capsys.readouterr().err


def test_advise_names_an_unknown_run(filled, capsys):
    assert main(["advise", "nope", "--db", filled.url]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_advise_rejects_a_zero_budget(filled, capsys):
    assert main(["advise", "syn-1", "--budget", "0", "--db", filled.url]) == 2
    assert "--budget" in capsys.readouterr().err


def test_serve_refuses_a_store_whose_schema_is_behind_and_leaves_it_as_it_is(tmp_path, capsys):
    from replayscope.collector.store import Store

    url = f"sqlite:///{tmp_path / 'old.db'}"
    Store(url).upgrade("0001")
    assert main(["serve", "--db", url, "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "behind" in err and "replayscope db upgrade" in err and "--migrate" in err
    store = Store.connect(url)
    store.dispose()
    assert store.found_revision == "0001"


def test_serve_creates_a_new_store_named_by_the_environment_and_logs_each_request_at_info(tmp_path):
    import os
    import time
    import urllib.request

    port = free_port()
    db = tmp_path / "fresh" / "new.db"
    db.parent.mkdir()
    env = {**os.environ, "REPLAYSCOPE_DB": f"sqlite:///{db}", "REPLAYSCOPE_LOG_LEVEL": "info"}
    server = subprocess.Popen([sys.executable, "-m", "replayscope", "serve", "--no-dashboard", "--port", str(port)],
                              cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        answered = False
        deadline = time.monotonic() + 60
        while not answered and time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/runs", timeout=2) as response:
                    answered = response.status == 200
            except OSError:
                time.sleep(0.1)
    finally:
        server.terminate()
        out, err = server.communicate(timeout=30)
    assert answered, err
    assert f"(store sqlite:///{db})" in out
    assert '"GET /v1/runs HTTP/1.1" 200' in out                 # uvicorn's access log (on stdout)


def test_server_keeps_the_api_next_to_the_dashboard(filled):
    from fastapi.testclient import TestClient

    from replayscope.app.server import create_server
    from replayscope.collector.settings import Settings

    with TestClient(create_server(filled, Settings(run_services=False)), base_url=LOOPBACK_BASE) as client:
        assert client.get("/healthz").status_code == 200
        assert {r["run_id"] for r in client.get("/v1/runs").json()} == {"syn-1", "syn-base"}
        assert client.get("/metrics").status_code == 200
        page = client.get("/run/syn-1")
        assert page.status_code == 200 and "_dash-renderer" in page.text
        assert client.get("/_dash-layout").status_code == 200


def test_server_without_dashboard_serves_only_the_api(filled):
    from fastapi.testclient import TestClient

    from replayscope.app.server import create_server
    from replayscope.collector.settings import Settings

    with TestClient(create_server(filled, Settings(run_services=False), dashboard=False), base_url=LOOPBACK_BASE) as client:
        assert client.get("/v1/runs").status_code == 200
        assert client.get("/run/syn-1").status_code == 404


def test_demo_streams_a_live_run_into_its_own_store_and_stops_cleanly(tmp_path):
    """Without --db the demo keeps its own file, whatever $REPLAYSCOPE_DB says, so its alert
    rule never lands in the store that serve and the importers use."""
    pytest.importorskip("torch", reason="the demo runs a model")
    import os

    from replayscope.collector.models import queries
    from replayscope.collector.store import Store

    port = free_port()
    shared = tmp_path / "shared.db"
    env = {**os.environ, "PYTHONPATH": str(REPO), "REPLAYSCOPE_DB": f"sqlite:///{shared}"}
    done = subprocess.run([sys.executable, "-m", "replayscope", "demo", "--port", str(port), "--duration", "20"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"http://127.0.0.1:{port}" in done.stdout and "stopped" in done.stdout
    assert "(store sqlite:///replayscope-demo.db)" in done.stdout
    assert not shared.exists() and not (tmp_path / "replayscope.db").exists()
    store = Store.open(f"sqlite:///{tmp_path / 'replayscope-demo.db'}")
    [run] = queries.list_runs(store)
    assert run["name"] == "demo" and run["source"] == "runner" and run["steps"] > 0
    [rule] = queries.alert_rules(store)              # the built-in eager-ratio rule, as every new store's
    assert rule.threshold == 0.2 and rule.stage == "decode+mixed"   # the decode stages, as by default
    store.dispose()


def test_a_database_that_cannot_be_opened_is_one_line_without_the_password(capsys):
    from replayscope.app.cli import main

    assert main(["serve", "--db", "postgresql+psycopg://user:s3cret@127.0.0.1:9/x", "--port", "9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("replayscope serve: error: cannot open postgresql+psycopg://user:***@127.0.0.1:9/x")
    assert "s3cret" not in err and err.count("\n") == 1
