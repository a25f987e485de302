"""The API's responses are its contract: the declared models, one error shape, the bearer
scheme on writes (schemathesis checks every route against the same document: tests/fuzz)."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from pydantic import ValidationError

from replayscope.collector import schemas
from replayscope.collector.models import queries
from replayscope.collector.api import create_api
from replayscope.collector.api.app import ROUTERS
from replayscope.collector.ingest import ingest_events, ingest_run
from replayscope.collector.settings import Settings
from replayscope.collector.store import Store
from tests.live_server import LOOPBACK_BASE

from .conftest import run_record, step

TOKEN = "s3cret"


@pytest.fixture
def store(tmp_path):
    s = Store.open(f"sqlite:///{tmp_path}/contract.db", upgrade=True)
    ingest_run(s, run_record())
    ingest_events(s, "run-1", [step(0, 1000.0), step(1, 1001.0, mode="eager", reason="prefill")])
    yield s
    s.dispose()


@pytest.fixture
def client(store):
    return TestClient(create_api(store, Settings(run_services=False, token=TOKEN)), base_url=LOOPBACK_BASE)


def test_the_run_summary_is_its_declared_model_with_no_key_left_out(store, client):
    body = client.get("/v1/runs/run-1").json()
    assert set(body) == set(schemas.RunSummary.model_fields)
    assert set(body) == set(queries.run_summary(store, "run-1"))
    assert body["step_detail"] == {"graph_sample": None, "raw_expired_before": None, "seconds_expired_before": None,
                                   "log_sample": None}
    assert "version" in body and "detail" not in body        # "detail" is the error body's key only


def test_a_response_with_an_undeclared_key_is_refused_not_passed_on():
    row = {"t": 0.0, "graph": 1, "padded": 0, "eager": 0, "steps": 1, "eager_ratio": 0.0}
    schemas.TimelinePoint.model_validate(row)
    with pytest.raises(ValidationError, match="extra"):
        schemas.TimelinePoint.model_validate({**row, "surprise": 1})


def test_every_route_but_deletes_and_metrics_declares_a_response_model():
    routes = [r for router in ROUTERS for r in router.routes if isinstance(r, APIRoute)]
    assert len(routes) == 30
    untyped = {(sorted(r.methods)[0], r.path) for r in routes if r.response_model is None}
    assert untyped == {("DELETE", "/v1/runs/{run_id}"), ("DELETE", "/v1/alert-rules/{rule_id}"), ("GET", "/metrics")}


@pytest.mark.parametrize("url, field", [("/v1/runs?limit=0", "limit"), ("/v1/alerts?limit=x", "limit"),
                                        ("/v1/runs/run-1/timeline?stage=nope", "stage"),
                                        ("/v1/alert-rules/0", "rule_id"), ("/v1/fleet?since=-1", "since")])
def test_a_bad_query_or_path_parameter_is_the_one_error_body(client, url, field):
    response = client.get(url)
    assert response.status_code == 422
    body = response.json()
    assert set(body) == {"detail", "field"} and body["field"] == field
    assert isinstance(body["detail"], str) and f"parameter {field}: " in body["detail"]


def test_openapi_declares_the_bearer_scheme_on_every_write_and_no_read(client):
    spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"] == {"bearer": {
        "type": "http", "scheme": "bearer", "description": spec["components"]["securitySchemes"]["bearer"]["description"]}}
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            wants = [{"bearer": []}] if method in ("post", "put", "patch", "delete") else None
            assert operation.get("security") == wants, (method, path)


def test_openapi_documents_every_error_as_the_one_body(client):
    spec = client.get("/openapi.json").json()
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            errors = {code: r for code, r in operation["responses"].items() if code.startswith(("4", "5"))}
            assert "422" in errors or not operation.get("parameters"), (method, path)
            for code, response in errors.items():
                assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Problem"}, \
                    (method, path, code)


def test_a_write_without_the_token_is_401_in_the_one_shape(client):
    response = client.post("/v1/runs", json=run_record("run-2"))
    assert response.status_code == 401 and response.json() == {
        "detail": "writes need 'Authorization: Bearer <token>' (REPLAYSCOPE_TOKEN)"}
    assert response.headers["www-authenticate"] == "Bearer"
