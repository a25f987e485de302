"""The write path no one can forge or break: every write needs the token when one is set,
writes are JSON from this server's own pages only, webhook URLs are not shown to readers
without the token, every value the store and pages later handle is bounded (a bad one is
a 4xx, writes nothing, and every page still answers), the nesting check counts structure
only and off the event loop, and runs can be deleted."""

from __future__ import annotations

import json
import threading

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from replayscope.collector.api import body as collector_json
from replayscope.collector.settings import Settings
from replayscope.collector.store import Store
from replayscope.collector.tables import step_rollups
from tests.live_server import LOOPBACK_BASE
from tests.spying import spy

from .conftest import run_record, step

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SLACK = "https://hooks.slack.example/services/T000/B000/XXXXSECRETXXXX"


@pytest.fixture
def server(tmp_path):
    """The whole app (API + dashboard) on a fresh store; ``make(token=...)``."""
    made = []

    def make(**settings):
        from replayscope.app.server import create_server

        store = Store.open(f"sqlite:///{tmp_path}/w{len(made)}.db", upgrade=True)
        client = TestClient(create_server(store, Settings(run_services=False, **settings)), base_url=LOOPBACK_BASE)
        client.__enter__()              # the lifespan: the dashboard's page routes are added at startup
        made.append((client, store))
        return client, store
    yield make
    for client, store in made:
        client.__exit__(None, None, None)
        store.dispose()


def row_counts(store) -> dict[str, int]:
    with store.read() as conn:
        names = [n for n in sa.inspect(conn).get_table_names() if n != "alembic_version"]
        return {n: conn.execute(sa.text(f'SELECT count(*) FROM "{n}"')).scalar_one() for n in names}


def pages_answer(client: TestClient, store, run_id: str) -> None:
    """Every API read and every dashboard page (its shell and the data its callbacks show)."""
    from replayscope.app.pages import advisor, alerts, run, runs, startup

    for path in ("/v1/runs", f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/timeline", f"/v1/runs/{run_id}/reasons",
                 f"/v1/runs/{run_id}/batch-sizes", f"/v1/runs/{run_id}/step-times", f"/v1/runs/{run_id}/phases",
                 f"/v1/runs/{run_id}/captures", "/v1/alerts", "/metrics", "/", f"/run/{run_id}",
                 f"/startup/{run_id}", f"/advisor/{run_id}", "/alerts"):
        response = client.get(path)
        assert response.status_code == 200, (path, response.text[:300])
        if path.startswith("/v1/"):
            json.dumps(response.json(), allow_nan=False)
    runs.page_data(store)
    run.page_data(store, run_id)
    startup.page_data(store, run_id)
    advisor.page_data(store, run_id)
    alerts.page_data(store)


# -- the token -------------------------------------------------------------------------------

WRITES = [
    ("post", "/v1/runs", run_record("new")),
    ("post", "/v1/runs/run-1/events", {"events": [step(0, 1000.0)]}),
    ("post", "/v1/alert-rules", {"name": "x", "threshold": 0.5}),
    ("put", "/v1/alert-rules/1", {"name": "x", "threshold": 0.5}),
    ("patch", "/v1/alert-rules/1", {"threshold": 0.9}),
    ("delete", "/v1/alert-rules/1", None),
    ("delete", "/v1/runs/run-1", None),
]


@pytest.mark.parametrize("method, path, body", WRITES, ids=[f"{m} {p}" for m, p, _ in WRITES])
def test_with_a_token_every_write_needs_it_and_changes_nothing_without(server, method, path, body):
    client, store = server(token=TOKEN)
    assert client.post("/v1/runs", json=run_record(), headers=AUTH).status_code == 201
    assert client.post("/v1/alert-rules", json={"name": "r", "threshold": 0.2}, headers=AUTH).status_code == 201
    before = row_counts(store)
    kwargs = {} if body is None else {"json": body}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Cookie": "replayscope_session=1.forged"}):
        response = getattr(client, method)(path, headers=headers, **kwargs)
        assert response.status_code == 401, response.text
    assert row_counts(store) == before
    assert getattr(client, method)(path, headers=AUTH, **kwargs).status_code in (200, 201, 204)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None])
def test_a_write_that_is_not_json_is_refused_so_no_page_can_forge_one(server, content_type):
    client, store = server()                          # no token: the Content-Type is the guard
    before = row_counts(store)
    headers = {"Content-Type": content_type} if content_type else {}
    response = client.post("/v1/runs", content=json.dumps(run_record()), headers=headers)
    assert response.status_code == 415 and "application/json" in response.json()["detail"]
    assert row_counts(store) == before


def test_a_cross_origin_write_is_refused_and_a_same_origin_one_is_not(server):
    client, store = server()
    before = row_counts(store)
    evil = client.post("/v1/runs", json=run_record(), headers={"Origin": "https://evil.example"})
    assert evil.status_code == 403 and row_counts(store) == before
    dash_forged = client.post("/_dash-update-component", json={}, headers={"Origin": "https://evil.example"})
    assert dash_forged.status_code == 403
    same = client.post("/v1/runs", json=run_record(), headers={"Origin": LOOPBACK_BASE})
    assert same.status_code == 201


def test_webhook_urls_are_redacted_for_readers_without_the_token(server):
    client, _store = server(token=TOKEN)
    made = client.post("/v1/alert-rules", json={"name": "slack", "threshold": 0.2, "webhook_url": SLACK},
                       headers=AUTH).json()
    for path in ("/v1/alert-rules", f"/v1/alert-rules/{made['id']}"):
        reader = client.get(path)
        assert "SECRET" not in reader.text and "T000" not in reader.text
        assert "https://hooks.slack.example/" in reader.text
        assert SLACK in client.get(path, headers=AUTH).text
    from replayscope.app.pages import alerts as alerts_page
    assert "SECRET" not in json.dumps(alerts_page.page_data(_store, writer=False))


def test_without_a_token_configured_everyone_is_a_writer_and_sees_the_url(server):
    client, _store = server()
    client.post("/v1/alert-rules", json={"name": "slack", "threshold": 0.2, "webhook_url": SLACK})
    assert SLACK in client.get("/v1/alert-rules").text


# -- values the store and pages must later handle ------------------------------------------

def steps_with(**fields) -> list[dict]:
    return [dict(step(i, 1_700_000_000.0 + i), **fields) for i in range(2)]


BAD_EVENTS = {
    "duration_s 1e308 twice": steps_with(duration_s=1e308),
    "ts 1e19": [step(0, 1e19)],
    "ts in milliseconds": [step(0, 1_700_000_000_000.0)],
    "num_tokens 2^62 twice": steps_with(num_tokens=2**62, raw_bs=4),
    "raw_bs beyond a database integer": [dict(step(0, 1_700_000_000.0), raw_bs=2**31, graph_bs=2**31)],
    "step_counts count 2^62": [{"seq": 0, "ts": 1_700_000_000.0, "kind": "step_counts", "stage": "mixed",
                                "mode": "graph", "reason": None, "count": 2**62, "num_tokens": 0,
                                "padded_tokens": 0}],
    "phase duration 1e308": [{"seq": 0, "ts": 1_700_000_000.0, "kind": "phase", "phase": "compile",
                              "duration_s": 1e308}],
    "an integer too big for a float": [dict(step(0, 1_700_000_000.0), duration_s=10**400)],
}


@pytest.mark.parametrize("name", sorted(BAD_EVENTS))
def test_every_bad_value_is_a_4xx_writes_nothing_and_every_page_still_answers(server, name):
    client, store = server()
    assert client.post("/v1/runs", json=run_record(started_at=1_700_000_000.0)).status_code == 201
    client.post("/v1/runs/run-1/events", json={"events": [step(100, 1_700_000_000.0)]})
    before = row_counts(store)
    body = json.dumps({"events": BAD_EVENTS[name]}).encode()     # json.dumps: 10**400 stays an integer
    response = client.post("/v1/runs/run-1/events", content=body, headers={"Content-Type": "application/json"})
    assert 400 <= response.status_code < 500, response.text
    assert row_counts(store) == before
    pages_answer(client, store, "run-1")


def test_a_run_started_in_milliseconds_is_refused_saying_so(server):
    client, store = server()
    response = client.post("/v1/runs", json=run_record(started_at=1_700_000_000_123.0))
    assert response.status_code == 422 and response.json()["field"] == "started_at"
    assert "milliseconds" in response.json()["detail"]
    assert row_counts(store)["runs"] == 0
    assert client.get("/").status_code == 200 and client.get("/v1/runs").json() == []


def test_run_totals_that_would_overflow_are_refused_not_turned_into_floats(store, run_in):
    from replayscope.collector.ingest import InvalidBatch, ingest_events

    run_id = run_in(store)
    counts = {"seq": 0, "ts": 1000.0, "kind": "step_counts", "stage": "mixed", "mode": "graph", "reason": None,
              "count": 2**40, "num_tokens": 2**40, "padded_tokens": 0}
    ingest_events(store, run_id, [counts])
    with store.write() as conn:                       # a run already near what a BIGINT holds
        conn.execute(step_rollups.update().where(step_rollups.c.bucket_s == 0)
                     .values(num_tokens=2**63 - 2**39))
    with pytest.raises(InvalidBatch, match="exceed what the store can sum"):
        ingest_events(store, run_id, [dict(counts, seq=1, ts=1001.0)])
    with store.read() as conn:
        totals = conn.execute(sa.select(step_rollups.c.num_tokens).where(step_rollups.c.bucket_s == 0)).scalars()
        assert [type(v) for v in totals] == [int]
        assert conn.execute(sa.text("SELECT count(*) FROM step_counts")).scalar() == 1


def test_a_custom_reason_with_an_unbalanced_bracket_is_accepted(server):
    client, store = server()
    client.post("/v1/runs", json=run_record())
    events = [dict(step(i, 1000.0 + i * 0.01, mode="eager"), reason="custom:adapter [7 not loaded")
              for i in range(5000)]
    response = client.post("/v1/runs/run-1/events", json={"events": events})
    assert response.status_code == 200 and response.json()["accepted"] == 5000


@pytest.mark.parametrize("text, depth", [
    (b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}', 1),
    (b'{"a": "]]]]]", "b": [[1]]}', 3),
    (b'{"a": "\\"[[[[\\"", "b": {"c": []}}', 3),
    (b'[' * 33 + b']' * 33, 33),
    (b'[' * 40, 33),
    (b'[{"x": "{"}, {"y": [1, 2, "]"]}]', 3),
])
def test_the_nesting_check_counts_structure_never_string_contents(text, depth):
    assert collector_json._bracket_depth(collector_json._structure(text), collector_json.MAX_JSON_DEPTH) == depth


def test_a_large_body_is_checked_off_the_event_loop(server, monkeypatch):
    """An 8 MB body of brackets takes the check a while; it must not hold up other requests."""
    import asyncio

    client, _store = server()
    client.post("/v1/runs", json=run_record())
    where = []

    def note_where(_body):
        try:
            asyncio.get_running_loop()
            where.append("event loop")
        except RuntimeError:
            where.append(threading.current_thread().name)

    spy(monkeypatch, collector_json, "check_structure", note_where)
    body = b'{"events": [' + (b"[" * 30 + b"]" * 30 + b",") * 130_000 + b"1]}"     # 7.9 MB, depth 32
    response = client.post("/v1/runs/run-1/events", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert where and "event loop" not in where


def test_a_body_of_millions_of_arrays_is_refused_before_parsing(server, monkeypatch):
    """Parsing millions of containers holds the interpreter for seconds: refused unparsed."""
    client, store = server()
    client.post("/v1/runs", json=run_record())
    parsed = []
    spy(monkeypatch, collector_json, "_loads", lambda body: parsed.append(len(body)))
    before = row_counts(store)
    body = b'{"events": [' + b",".join([b"[[]]"] * 150_000) + b"]}"
    response = client.post("/v1/runs/run-1/events", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and "objects and arrays" in response.json()["detail"]
    assert parsed == [] and row_counts(store) == before
    events = [step(i, 1000.0 + i * 0.001) for i in range(5000)]          # a runner's batch is far below it
    assert client.post("/v1/runs/run-1/events", json={"events": events}).status_code == 200


# -- deleting a run ---------------------------------------------------------------------------

def test_deleting_a_run_removes_everything_recorded_for_it_and_nothing_else(server):
    client, store = server(token=TOKEN)
    for run_id in ("keep", "drop"):
        client.post("/v1/runs", json=run_record(run_id), headers=AUTH)
        events = [step(i, 1000.0 + i, mode="eager" if i % 2 else "graph") for i in range(50)] + [
            {"seq": 99, "ts": 1100.0, "kind": "warning", "message": "hi"},
            {"seq": 100, "ts": 1100.0, "kind": "recording", "function": "forward (frame 0)", "cause": "first",
             "recordings": 1}]
        client.post(f"/v1/runs/{run_id}/events", json={"events": events}, headers=AUTH)
    only_keep = row_counts(store)
    assert client.delete("/v1/runs/drop", headers=AUTH).status_code == 204
    after = row_counts(store)
    for table, n in only_keep.items():
        if n and table not in ("alert_rules",):
            assert after[table] == n // 2, table
    assert client.get("/v1/runs/drop").status_code == 404
    assert client.get("/v1/runs/keep").json()["steps"] == 50
    assert client.delete("/v1/runs/drop", headers=AUTH).status_code == 404
    pages_answer(client, store, "keep")


def test_replayscope_runs_delete_removes_a_run_from_the_store(tmp_path, capsys):
    from replayscope.app.cli import main
    from replayscope.collector.ingest import ingest_events, ingest_run

    url = f"sqlite:///{tmp_path}/cli.db"
    store = Store.open(url, upgrade=True)
    ingest_run(store, run_record("bad-import"))
    ingest_events(store, "bad-import", [step(0, 1000.0)])
    store.dispose()
    assert main(["runs", "delete", "bad-import", "--db", url]) == 0
    assert "deleted run bad-import" in capsys.readouterr().out
    assert main(["runs", "delete", "bad-import", "--db", url]) == 2
    assert "no run 'bad-import'" in capsys.readouterr().err


def test_replayscope_runs_delete_through_a_collector_needs_its_token(tmp_path, capsys):
    from replayscope.app.cli import main
    from replayscope.collector.api import create_api
    from tests.live_server import serving

    store = Store.open(f"sqlite:///{tmp_path}/c.db", upgrade=True)
    from replayscope.collector.ingest import ingest_run
    ingest_run(store, run_record("r1"))
    with serving(create_api(store, Settings(run_services=False, token=TOKEN))) as url:
        assert main(["runs", "delete", "r1", "--collector", url, "--token", "wrong"]) == 2
        assert "401" in capsys.readouterr().err
        assert main(["runs", "delete", "r1", "--collector", url, "--token", TOKEN]) == 0
    store.dispose()


# -- serving beyond loopback ---------------------------------------------------------------

def test_serve_refuses_a_non_loopback_address_without_a_token(tmp_path, monkeypatch, capsys):
    from replayscope.app.cli import main
    from tests.live_server import free_port

    monkeypatch.delenv("REPLAYSCOPE_TOKEN", raising=False)
    url = f"sqlite:///{tmp_path}/s.db"
    Store.open(url, upgrade=True).dispose()
    assert main(["serve", "--host", "0.0.0.0", "--port", str(free_port()), "--db", url]) == 2
    assert "refusing to listen on 0.0.0.0 without REPLAYSCOPE_TOKEN" in capsys.readouterr().err


@pytest.mark.parametrize("host, token, insecure, allowed", [
    ("127.0.0.1", None, False, True), ("::1", None, False, True), ("localhost", None, False, True),
    ("0.0.0.0", None, False, False), ("10.1.2.3", None, False, False), ("0.0.0.0", "t", False, True),
    ("0.0.0.0", None, True, True),
])
def test_who_may_listen_where(host, token, insecure, allowed):
    from replayscope.app.cli.serve import _refuse_open_writes
    from replayscope.contract.errors import ReplayscopeError

    settings = Settings(host=host, token=token)
    if allowed:
        _refuse_open_writes(settings, insecure)
    else:
        with pytest.raises(ReplayscopeError, match="--insecure"):
            _refuse_open_writes(settings, insecure)
