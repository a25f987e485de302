"""``recording`` events (Inductor's recordings of compiled functions, from ``replayscope trace``):
validated against the wire contract, stored, read back in order through the query layer and the
API, on both dialects."""

import pytest

from replayscope.collector.models import queries
from replayscope.collector.ingest import InvalidBatch, ingest_events, ingest_run
from tests.collector.conftest import run_record

FIRST = {"seq": 1, "ts": 1001.0, "kind": "recording", "function": "forward (frame 0)", "cause": "first",
         "evidence": "inputs (4, 64)", "graph_bs": 4, "recordings": 1, "rerecords": 0, "rerecord_limit": 128,
         "rank": "pid 7"}
MOVED = {"seq": 2, "ts": 1002.0, "kind": "recording", "function": "forward (frame 0)", "cause": "static_input_moved",
         "evidence": "Inductor's check before replay failed", "graph_bs": None, "recordings": 2, "rerecords": 1,
         "rerecord_limit": None}


def test_recordings_are_stored_and_read_back_in_order(store):
    ingest_run(store, run_record(source="trace"))
    result = ingest_events(store, "run-1", [MOVED, FIRST])
    assert result.accepted == 2
    rows = queries.recordings(store, "run-1")
    assert [(r["seq"], r["cause"], r["recordings"], r["rerecords"], r["rerecord_limit"]) for r in rows] == [
        (1, "first", 1, 0, 128), (2, "static_input_moved", 2, 1, None)]
    assert rows[0]["function"] == "forward (frame 0)" and rows[0]["graph_bs"] == 4 and rows[0]["rank"] == "pid 7"


@pytest.mark.parametrize("bad, field", [({"cause": "because"}, "cause"), ({"recordings": 0}, "recordings"),
                                        ({"function": None}, "function")])
def test_a_recording_that_breaks_the_contract_is_rejected_and_nothing_is_written(sqlite_store, bad, field):
    ingest_run(sqlite_store, run_record(source="trace"))
    with pytest.raises(InvalidBatch) as raised:
        ingest_events(sqlite_store, "run-1", [FIRST, {**MOVED, **bad}])
    assert field in str(raised.value)
    assert queries.recordings(sqlite_store, "run-1") == []


def test_the_api_serves_a_runs_recordings(sqlite_store):
    from fastapi.testclient import TestClient
    from tests.live_server import LOOPBACK_BASE

    from replayscope.collector.api import create_api
    from replayscope.collector.settings import Settings

    ingest_run(sqlite_store, run_record(source="trace"))
    ingest_events(sqlite_store, "run-1", [FIRST])
    client = TestClient(create_api(sqlite_store, Settings()), base_url=LOOPBACK_BASE)
    response = client.get("/v1/runs/run-1/recordings")
    assert response.status_code == 200
    assert response.json()[0]["cause"] == "first"
    assert client.get("/v1/runs/nope/recordings").status_code == 404
