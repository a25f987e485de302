"""One error hierarchy carries its HTTP status; one handler in the API answers for all of it."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from replayscope.collector import ingest, store as store_module
from replayscope.collector.alerting import alerts
from replayscope.collector.api import create_api, errors as api_errors
from replayscope.collector.settings import Settings
from replayscope.collector.store import Store
from replayscope.contract import errors
from tests.live_server import LOOPBACK_BASE


def every_error_class() -> set[type]:
    found, todo = set(), [errors.ReplayscopeError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return found


EXAMPLES = [
    (errors.ReplayscopeError("bad"), 400, {"detail": "bad"}, {}),
    (errors.Unauthorized("who?"), 401, {"detail": "who?"}, {"www-authenticate": "Bearer"}),
    (errors.Forbidden("not from here"), 403, {"detail": "not from here"}, {}),
    (ingest.UnknownRun("r1"), 404, {"detail": "unknown run 'r1': POST the run record to /v1/runs first"}, {}),
    (alerts.UnknownRule(7), 404, {"detail": "no alert rule with id 7"}, {}),
    (alerts.DuplicateRule("x"), 409, {"detail": "name: a rule named 'x' already exists", "field": "name"}, {}),
    (errors.TooLarge("big"), 413, {"detail": "big"}, {}),
    (errors.UnsupportedMediaType("json only"), 415, {"detail": "json only"}, {}),
    (ingest.InvalidRun("name", "required"), 422, {"detail": "run record: name: required", "field": "name"}, {}),
    (ingest.InvalidBatch(3, "kind", "unknown"), 422, {"detail": "event 3: kind: unknown", "index": 3, "field": "kind"}, {}),
    (alerts.InvalidRule("threshold", "must be in 0..1"), 422,
     {"detail": "threshold: must be in 0..1", "field": "threshold"}, {}),
    (errors.TooManyRequests("slow down", 11.6), 429, {"detail": "slow down"}, {"retry-after": "12"}),
    (store_module.StoreUnavailable("locked"), 503, {"detail": "locked"}, {"retry-after": "1"}),
]


@pytest.fixture()
def client():
    s = Store.open("sqlite://")
    app = create_api(s, Settings(run_services=False))
    raised: dict[str, Exception] = {}

    @app.get("/raise/{name}")
    def _raise(name: str):
        raise raised[name]

    @app.get("/database-gone")
    def _gone():
        raise sa.exc.OperationalError("SELECT 1", {}, Exception("could not connect to server"))

    with TestClient(app, raise_server_exceptions=False, base_url=LOOPBACK_BASE) as c:
        c.raised = raised
        yield c
    s.dispose()


@pytest.mark.parametrize("error, status, body, headers", EXAMPLES, ids=lambda v: type(v).__name__)
def test_each_error_answers_with_its_status_and_body(client, error, status, body, headers):
    client.raised["e"] = error
    response = client.get("/raise/e")
    assert response.status_code == status and response.json() == body
    for name, value in headers.items():
        assert response.headers[name] == value


def test_a_database_that_stops_answering_is_a_503_to_retry(client):
    response = client.get("/database-gone")
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert response.json() == {"detail": "the store is unavailable (could not connect to server); retry later"}


def test_every_error_class_carries_an_http_status_the_api_documents():
    for cls in every_error_class():
        assert cls.status in (400, 401, 403, 404, 409, 413, 415, 422, 429, 503), cls
        assert all(isinstance(name, str) for name in cls.body_fields), cls


def test_one_handler_answers_for_the_whole_hierarchy():
    s = Store.open("sqlite://")
    try:
        handlers = create_api(s, Settings(run_services=False)).exception_handlers
    finally:
        s.dispose()
    ours = {cls: handler for cls, handler in handlers.items()
            if isinstance(cls, type) and (issubclass(cls, errors.ReplayscopeError) or cls is sa.exc.OperationalError)}
    assert set(ours) == {errors.ReplayscopeError, sa.exc.OperationalError}
    assert set(ours.values()) == {api_errors.problem}
