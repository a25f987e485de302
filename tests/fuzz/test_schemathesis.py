"""Schemathesis against the collector's OpenAPI, over every route: no 5xx, every status
code and content type documented, every response body (errors included) as its schema
says, and a rejected request writes nothing (every table's row count unchanged)."""

from __future__ import annotations

import tempfile
import zlib
from collections import Counter
from pathlib import Path

import hypothesis
import pytest
import sqlalchemy as sa

schemathesis = pytest.importorskip("schemathesis")

from schemathesis.checks import (content_type_conformance, not_a_server_error,  # noqa: E402
                                 response_schema_conformance, status_code_conformance)

from replayscope.collector.alerting.alerts import create_rule  # noqa: E402
from replayscope.collector.api import create_api  # noqa: E402
from replayscope.collector.ingest import ingest_events, ingest_run  # noqa: E402
from replayscope.collector.settings import Settings  # noqa: E402
from replayscope.collector.store import Store  # noqa: E402

RUN_ID = "fuzz-run"
TOKEN = "fuzz-token"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
_DIR = Path(tempfile.mkdtemp(prefix="replayscope-fuzz-"))
STORE = Store.open(f"sqlite:///{_DIR / 'fuzz.db'}", upgrade=True)


def seed_run() -> None:
    ingest_run(STORE, {"run_id": RUN_ID, "name": "fuzz", "source": "runner", "started_at": 1000.0,
                       "backend": "static", "model": "tiny", "device": "cpu", "config": {}})
    ingest_events(STORE, RUN_ID, [{"seq": 0, "ts": 1000.0, "kind": "step", "stage": "decode", "mode": "graph",
                                   "raw_bs": 4, "graph_bs": 4, "num_tokens": 4, "padded_tokens": 0,
                                   "reason": None, "duration_s": 0.01}])


def seed_rule() -> int:
    return create_rule(STORE, {"name": "fuzz-rule", "threshold": 0.5}).id


seed_run()
RULE_ID = seed_rule()
# schemathesis calls the app as Host "testserver": a name this collector must be told it serves.
APP = create_api(STORE, Settings(run_services=False, max_body_bytes=256 * 1024, allowed_hosts="testserver",
                                 token=TOKEN))

schema = schemathesis.openapi.from_asgi("/openapi.json", APP)

STATUSES: Counter = Counter()     # (method, path template, status): what the fuzzing reached


def row_counts() -> dict[str, int]:
    with STORE.read() as conn:
        names = sa.inspect(conn).get_table_names()
        return {n: conn.execute(sa.text(f'SELECT count(*) FROM "{n}"')).scalar_one() for n in names}


def aim(case) -> dict[str, str]:
    """Half the generated ids are real, so requests get past the 404 into validation; three
    in four requests carry the token (the rest are refused writes). The headers to send."""
    params = case.path_parameters or {}
    if "run_id" in params and zlib.crc32(str(params["run_id"]).encode()) % 2 == 0:
        params["run_id"] = RUN_ID
    if "rule_id" in params and zlib.crc32(str(params["rule_id"]).encode()) % 2 == 0:
        params["rule_id"] = RULE_ID
    if case.headers:       # a made-up token would count as a wrong one and soon throttle every client
        case.headers.pop("Authorization", None)
    seen = zlib.crc32(repr((case.method, case.path, params, case.query, case.body)).encode())
    return {"Authorization": f"Bearer {TOKEN}"} if seen % 4 else {}


def restore_what_a_delete_removed(case, status: int) -> None:
    global RULE_ID
    if case.method == "DELETE" and status == 204:
        params = case.path_parameters or {}
        if params.get("run_id") == RUN_ID:
            seed_run()
        if params.get("rule_id") == RULE_ID:
            RULE_ID = seed_rule()


@schema.parametrize()
@hypothesis.settings(max_examples=25, deadline=None, derandomize=True,
                     suppress_health_check=list(hypothesis.HealthCheck))
def test_every_route_answers_as_its_schema_says_and_a_rejected_request_writes_nothing(case):
    headers = aim(case)
    before = row_counts()
    response = case.call(headers=headers)
    STATUSES[(case.method, case.operation.path, response.status_code)] += 1
    case.validate_response(response, checks=CHECKS)
    if response.status_code >= 400:
        assert row_counts() == before, (response.status_code, response.text[:300])
        assert isinstance(response.json()["detail"], str), response.text[:300]
    restore_what_a_delete_removed(case, response.status_code)


def test_the_fuzzing_reached_past_validation():
    """Runs after the parametrized cases (file order): some writes were accepted, some refused,
    and every route was called."""
    if not STATUSES:
        pytest.skip("run with the schemathesis cases")
    codes = {code for (_m, _p, code) in STATUSES}
    assert any(200 <= c < 300 for c in codes) and {401, 422} <= codes, STATUSES
    called = {(m, p) for (m, p, _c) in STATUSES}
    every = {(op.method.upper(), op.path) for op in (r.ok() for r in schema.get_all_operations())}
    assert every <= {(m.upper(), p) for m, p in called}, every - called
    reads = {(m, p) for (m, p, c) in STATUSES if m == "GET" and c == 200}
    assert len(reads) >= len({(m, p) for m, p in every if m == "GET"}) - 1, STATUSES
