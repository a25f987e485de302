"""The HTTP API: wire contract v1 at the edge."""

from __future__ import annotations

import json
import sqlite3

import pytest
from fastapi.testclient import TestClient

from replayscope.collector.api import create_api
from replayscope.collector.settings import Settings
from replayscope.collector.store import Store
from tests.live_server import LOOPBACK_BASE

from .conftest import run_record, step

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def make_client(tmp_path):
    stores = []

    def make(**settings):
        store = Store.open(f"sqlite:///{tmp_path}/api-{len(stores)}.db", upgrade=True,
                           busy_timeout_ms=settings.pop("busy_timeout_ms", 5000))
        stores.append(store)
        client = TestClient(create_api(store, Settings(run_services=False, **settings)), base_url=LOOPBACK_BASE)
        return client
    yield make
    for s in stores:
        s.dispose()


@pytest.fixture
def client(make_client):
    c = make_client()
    assert c.post("/v1/runs", json=run_record()).status_code == 201
    return c


def test_posting_a_run_twice_is_harmless(client):
    response = client.post("/v1/runs", json=run_record())
    assert response.status_code == 200 and response.json() == {"run_id": "run-1", "created": False}


def test_an_invalid_run_record_is_422_naming_the_field(client):
    response = client.post("/v1/runs", json=run_record(started_at="yesterday"))
    assert response.status_code == 422 and response.json()["field"] == "started_at"


def test_events_are_accepted_and_summarised(client):
    events = [step(0, 1000.0), step(1, 1000.5, mode="padded"), step(2, 1001.0, mode="eager", reason="prefill")]
    response = client.post("/v1/runs/run-1/events", json={"events": events})
    assert response.json() == {"accepted": 3, "duplicates": 0}
    summary = client.get("/v1/runs/run-1").json()
    assert summary["steps"] == 3
    assert summary["modes"] == {"graph": 1, "padded": 1, "eager": 1, "unknown": 0}
    assert summary["reasons"] == {"prefill": 1}
    assert summary["eager_ratio"] == pytest.approx(1 / 3)
    assert summary["padded_tokens"] == 1


def test_one_bad_event_rejects_the_batch_with_its_index_and_field(client):
    events = [step(0, 1000.0), step(1, 1000.1), dict(step(2, 1000.2), raw_bs=0)]
    response = client.post("/v1/runs/run-1/events", json={"events": events})
    assert response.status_code == 422
    body = response.json()
    assert (body["index"], body["field"]) == (2, "raw_bs")
    assert "event 2" in body["detail"]
    assert client.get("/v1/runs/run-1").json()["steps"] == 0


def test_a_retried_batch_is_counted_once(client):
    events = [step(i, 1000.0 + i) for i in range(5)]
    client.post("/v1/runs/run-1/events", json={"events": events})
    again = client.post("/v1/runs/run-1/events", json={"events": events})
    assert again.json() == {"accepted": 0, "duplicates": 5}
    assert client.get("/v1/runs/run-1").json()["steps"] == 5


def test_events_for_an_unknown_run_are_404(client):
    assert client.post("/v1/runs/ghost/events", json={"events": [step(0, 1.0)]}).status_code == 404
    assert client.get("/v1/runs/ghost").status_code == 404
    assert client.get("/v1/runs/ghost/timeline").status_code == 404


def test_an_oversized_body_is_413_by_content_length(make_client):
    c = make_client(max_body_bytes=1000)
    c.post("/v1/runs", json=run_record())
    body = json.dumps({"events": [step(i, 1000.0 + i) for i in range(50)]})
    response = c.post("/v1/runs/run-1/events", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert c.get("/v1/runs/run-1").json()["steps"] == 0


def test_an_oversized_streamed_body_is_413(make_client):
    c = make_client(max_body_bytes=1000)
    c.post("/v1/runs", json=run_record())

    def chunks():
        for _ in range(20):
            yield b" " * 200

    response = c.post("/v1/runs/run-1/events", content=chunks(), headers={"Content-Type": "application/json"})
    assert response.status_code == 413


@pytest.mark.parametrize("body", [
    "[" * 100_000 + "]" * 100_000,
    '{"events": [{"seq": 0, "extra": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + "}]}",
])
def test_deeply_nested_json_is_refused_before_parsing(client, body):
    response = client.post("/v1/runs/run-1/events", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and "nested deeper" in response.json()["detail"]


def test_malformed_json_is_400(client):
    response = client.post("/v1/runs/run-1/events", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 400


def test_a_body_without_an_events_list_is_422(client):
    response = client.post("/v1/runs/run-1/events", json={"evnts": []})
    assert response.status_code == 422 and response.json()["field"] == "events"


def test_with_a_token_writes_need_it_and_reads_stay_open(make_client):
    c = make_client(token=TOKEN)
    assert c.post("/v1/runs", json=run_record()).status_code == 401
    assert c.post("/v1/runs", json=run_record(), headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.post("/v1/runs", json=run_record(), headers=AUTH).status_code == 201
    assert c.post("/v1/runs/run-1/events", json={"events": [step(0, 1.0)]}).status_code == 401
    assert c.post("/v1/alert-rules", json={"name": "x", "threshold": 0.5}).status_code == 401
    assert c.get("/v1/runs").status_code == 200
    assert c.get("/v1/runs/run-1").status_code == 200


def test_a_locked_database_is_503_and_writes_nothing(make_client, tmp_path):
    c = make_client(busy_timeout_ms=50)
    c.post("/v1/runs", json=run_record())
    blocker = sqlite3.connect(tmp_path / "api-0.db", isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        response = c.post("/v1/runs/run-1/events", json={"events": [step(0, 1000.0)]})
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert response.status_code == 503
    assert "locked" in response.json()["detail"] and "nothing was written" in response.json()["detail"]
    assert c.get("/v1/runs/run-1").json()["steps"] == 0


def test_dashboard_queries_are_served(client):
    events = [step(i, 1000.0 + i, mode=("graph", "padded", "eager")[i % 3]) for i in range(30)]
    events.append({"seq": 100, "ts": 999.0, "kind": "capture", "graph_bs": 8, "stage": "decode",
                   "duration_s": 0.3, "pool_bytes": 1 << 20, "pool_delta_bytes": 1 << 20, "status": "ok"})
    events.append({"seq": 101, "ts": 998.0, "kind": "phase", "phase": "warmup", "duration_s": 1.0})
    client.post("/v1/runs/run-1/events", json={"events": events})
    timeline = client.get("/v1/runs/run-1/timeline", params={"bucket_s": 10}).json()
    assert [p["graph"] + p["padded"] + p["eager"] for p in timeline] == [10, 10, 10]
    assert client.get("/v1/runs/run-1/reasons").json()[0]["steps"] == 10
    assert sum(r["steps"] for r in client.get("/v1/runs/run-1/batch-sizes").json()) == 30
    assert {r["mode"] for r in client.get("/v1/runs/run-1/step-times").json()} == {"graph", "padded", "eager"}
    assert client.get("/v1/runs/run-1/captures").json()[0]["graph_bs"] == 8
    assert client.get("/v1/runs/run-1/phases").json()[0]["phase"] == "warmup"
    assert client.get("/v1/runs/run-1/degrades").json() == []
    assert client.get("/v1/runs/run-1/parity").json() == []
    assert client.get("/v1/runs").json()[0]["steps"] == 30


def test_the_decode_stages_are_one_stage_parameter(client):
    """stage=decode+mixed (URL-encoded) is what the run page's batch sizes and the default alert count."""
    events = [step(i, 1000.0 + i, stage=("decode", "mixed", "prefill")[i % 3]) for i in range(30)]
    client.post("/v1/runs/run-1/events", json={"events": events})
    sizes = client.get("/v1/runs/run-1/batch-sizes?stage=decode%2Bmixed")
    assert sizes.status_code == 200 and sum(r["steps"] for r in sizes.json()) == 20
    assert sum(r["steps"] for r in client.get("/v1/runs/run-1/batch-sizes", params={"stage": "mixed"}).json()) == 10
    assert client.get("/v1/runs/run-1/batch-sizes?stage=decode+mixed").status_code == 422   # '+' is a space
    assert client.get("/v1/runs/run-1").json()["stage_steps"] == {"decode": 10, "mixed": 10, "prefill": 10}


def test_openapi_documents_the_event_schema(client):
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert {"StepEvent", "CaptureEvent", "EventBatch", "RunRecord"} <= set(schemas)
    assert set(schemas["StepEvent"]["properties"]) >= {"seq", "ts", "kind", "mode", "raw_bs", "reason"}
    body = spec["paths"]["/v1/runs/{run_id}/events"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"]["$ref"].endswith("/EventBatch")
    assert client.get("/docs").status_code == 200


def test_alert_rules_crud_with_validation(client):
    bad = client.post("/v1/alert-rules", json={"name": "eager", "threshold": 1.2})
    assert bad.status_code == 422 and bad.json()["field"] == "threshold" and "0..1" in bad.json()["detail"]
    assert client.post("/v1/alert-rules", json={"name": "eager", "threshold": 0.2, "stage": "nope"}).json()["field"] == "stage"
    assert client.post("/v1/alert-rules", json={"name": "eager", "threshold": 0.2, "colour": 1}).status_code == 422
    created = client.post("/v1/alert-rules", json={"name": "eager", "threshold": 0.2, "run_pattern": "demo*"})
    assert created.status_code == 201
    rule = created.json()
    assert (rule["window_s"], rule["min_steps"], rule["stage"], rule["enabled"]) == (300, 100, "decode+mixed", True)
    assert client.post("/v1/alert-rules", json={"name": "eager", "threshold": 0.3}).status_code == 409
    patched = client.patch(f"/v1/alert-rules/{rule['id']}", json={"threshold": 0.5, "enabled": False}).json()
    assert (patched["threshold"], patched["enabled"], patched["run_pattern"]) == (0.5, False, "demo*")
    replaced = client.put(f"/v1/alert-rules/{rule['id']}", json={"name": "eager", "threshold": 0.4}).json()
    assert replaced["run_pattern"] is None and replaced["enabled"] is True
    from replayscope.collector.alerting.alerts import BUILTIN_EAGER_RATIO_RULE        # every store starts with it
    assert [r["name"] for r in client.get("/v1/alert-rules").json()] == [BUILTIN_EAGER_RATIO_RULE["name"], "eager"]
    assert client.delete(f"/v1/alert-rules/{rule['id']}").status_code == 204
    assert client.get(f"/v1/alert-rules/{rule['id']}").status_code == 404
    assert client.get("/v1/alerts").json() == []


def test_healthz(client):
    assert client.get("/healthz").json()["status"] == "ok"


def test_healthz_is_degraded_while_writes_fail_and_healthy_once_one_commits(make_client, tmp_path):
    """It said "ok" while every write was a 503 (a full disk, a lock held elsewhere)."""
    import sqlite3

    c = make_client(busy_timeout_ms=50)
    db = next(tmp_path.glob("api-*.db"))
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")                   # another process holds the write lock
    try:
        write = c.post("/v1/alert-rules", json={"name": "r", "threshold": 0.5})
        assert write.status_code == 503 and write.headers["retry-after"] == "1"
        health = c.get("/healthz")
        assert health.status_code == 503 and health.headers["retry-after"] == "1"
        assert health.json()["detail"].startswith("degraded: the store answers reads but refused the last write")
        assert "locked" in health.json()["detail"]
        assert c.get("/v1/runs").status_code == 200, "reads keep answering"
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert c.post("/v1/alert-rules", json={"name": "r", "threshold": 0.5}).status_code == 201
    assert c.get("/healthz").json() == {"status": "ok", "db": "sqlite"}


def test_a_rule_id_beyond_a_database_integer_is_a_422_not_a_crash(client):
    huge = 2**70
    for method in ("get", "delete"):
        response = getattr(client, method)(f"/v1/alert-rules/{huge}")
        assert response.status_code == 422, (method, response.text)
    assert client.patch(f"/v1/alert-rules/{huge}", json={"threshold": 0.5}).status_code == 422
    assert client.get("/v1/alert-rules/0").status_code == 422
    assert client.get("/v1/alert-rules/12345").status_code == 404
