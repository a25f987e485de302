"""Schemathesis against the collector's OpenAPI, on the ingest and alert-rule endpoints:
no 5xx, and a rejected request writes nothing (every table's row count unchanged)."""

from __future__ import annotations

import tempfile
import zlib
from collections import Counter
from pathlib import Path

import hypothesis
import pytest
import sqlalchemy as sa

schemathesis = pytest.importorskip("schemathesis")

from collector.alerting.alerts import create_rule  # noqa: E402
from collector.api import create_api  # noqa: E402
from collector.ingest import ingest_events, ingest_run  # noqa: E402
from collector.settings import Settings  # noqa: E402
from collector.store import Store  # noqa: E402

RUN_ID = "fuzz-run"
_DIR = Path(tempfile.mkdtemp(prefix="replayscope-fuzz-"))
STORE = Store.open(f"sqlite:///{_DIR / 'fuzz.db'}", upgrade=True)
ingest_run(STORE, {"run_id": RUN_ID, "name": "fuzz", "source": "runner", "started_at": 1000.0,
                   "backend": "static", "model": "tiny", "device": "cpu", "config": {}})
ingest_events(STORE, RUN_ID, [{"seq": 0, "ts": 1000.0, "kind": "step", "stage": "decode", "mode": "graph",
                               "raw_bs": 4, "graph_bs": 4, "num_tokens": 4, "padded_tokens": 0,
                               "reason": None, "duration_s": 0.01}])
RULE_ID = create_rule(STORE, {"name": "fuzz-rule", "threshold": 0.5})["id"]
# schemathesis calls the app as Host "testserver": a name this collector must be told it serves.
APP = create_api(STORE, Settings(run_services=False, max_body_bytes=256 * 1024, allowed_hosts="testserver"))

schema = schemathesis.openapi.from_asgi("/openapi.json", APP).include(
    path_regex=r"^/v1/(runs(/\{run_id\}/(events|diagnosis|advice))?|alert-rules(/\{rule_id\})?)$")


STATUSES: Counter = Counter()     # (method, path template, status): what the fuzzing reached


def row_counts() -> dict[str, int]:
    with STORE.read() as conn:
        names = sa.inspect(conn).get_table_names()
        return {n: conn.execute(sa.text(f'SELECT count(*) FROM "{n}"')).scalar_one() for n in names}


def aim_at_existing_rows(case) -> None:
    """Half the generated ids are real, so requests get past the 404 into validation."""
    params = case.path_parameters or {}
    if "run_id" in params and zlib.crc32(str(params["run_id"]).encode()) % 2 == 0:
        params["run_id"] = RUN_ID
    if "rule_id" in params and zlib.crc32(str(params["rule_id"]).encode()) % 2 == 0:
        params["rule_id"] = RULE_ID


@schema.parametrize()
@hypothesis.settings(max_examples=40, deadline=None, derandomize=True,
                     suppress_health_check=list(hypothesis.HealthCheck))
def test_no_server_error_and_a_rejected_request_writes_nothing(case):
    aim_at_existing_rows(case)
    before = row_counts()
    response = case.call()
    STATUSES[(case.method, case.operation.path, response.status_code)] += 1
    assert response.status_code < 500, (case.method, case.path, case.body, response.text[:500])
    if response.status_code >= 400:
        assert row_counts() == before, (response.status_code, response.text[:300])
        assert "detail" in response.json()


def test_the_fuzzing_reached_past_validation():
    """Runs after the parametrized cases (file order): some writes were accepted, some refused."""
    if not STATUSES:
        pytest.skip("run with the schemathesis cases")
    codes = {code for (_m, _p, code) in STATUSES}
    assert any(200 <= c < 300 for c in codes) and 422 in codes, STATUSES
