"""GET /v1/runs/{id}/diagnosis and /v1/runs/{id}/advice: the post-mortem and the advisor over HTTP."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from replayscope.collector import schemas
from replayscope.collector.api import create_api
from replayscope.collector.settings import Settings
from replayscope.collector.store import Store
from tests.live_server import LOOPBACK_BASE

from .conftest import run_record, step


@pytest.fixture
def client(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path}/api.db", upgrade=True)
    yield TestClient(create_api(store, Settings(run_services=False)), base_url=LOOPBACK_BASE)
    store.dispose()


def post_run(client, run_id="run-1", events=(), **record):
    assert client.post("/v1/runs", json=run_record(run_id, **record)).status_code == 201
    if events:
        assert client.post(f"/v1/runs/{run_id}/events", json={"events": list(events)}).status_code == 200


def test_a_failed_run_is_diagnosed_with_its_failure_first(client):
    post_run(client, backend="cuda", events=[
        {"seq": 0, "ts": 1004.0, "kind": "phase", "phase": "load_weights", "duration_s": 4.0, "start_ts": 1000.0,
         "mem_bytes": 2**31},
        {"seq": 1, "ts": 1005.0, "kind": "run_end", "status": "failed", "phase": "capture", "graph_bs": 512,
         "error": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}])
    response = client.get("/v1/runs/run-1/diagnosis")
    assert response.status_code == 200
    body = schemas.Diagnosis.model_validate(response.json())
    first = body.findings[0]
    assert (first.cause, first.failure_class, first.severity) == ("failure", "oom", "error")
    assert first.title == "The run failed: out of memory during capture at bs 512"
    assert first.evidence[0].text.startswith("error: torch.OutOfMemoryError") and first.evidence[0].provenance == "measured"
    assert set(first.actions) == {"replayscope", "vllm", "sglang"}
    assert body.status == "failed" and body.stand_in is False


def test_the_cpu_stand_in_is_flagged_in_the_diagnosis(client):
    post_run(client, events=[step(0, 1000.0)])            # run_record's backend is static
    body = client.get("/v1/runs/run-1/diagnosis").json()
    assert body["stand_in"] is True and "CPU timings" in body["timing_note"]


def test_diagnosis_of_an_unknown_run_is_404(client):
    response = client.get("/v1/runs/nope/diagnosis")
    assert response.status_code == 404 and "nope" in response.json()["detail"]


def test_advice_follows_the_budget_and_gives_each_engines_flags(client):
    sizes = [1, 1, 2, 3, 4, 7, 8, 12, 16, 16, 24, 32]
    post_run(client, events=[step(i, 1000.0 + i, raw_bs=bs) for i, bs in enumerate(sizes)])
    response = client.get("/v1/runs/run-1/advice", params={"budget": 3})
    assert response.status_code == 200
    body = schemas.Advice.model_validate(response.json())
    assert len(body.sizes) <= 3 and body.budget == 3 and body.budget_basis == "given"
    spaced = " ".join(map(str, body.sizes))
    texts = {f["label"]: f["text"] for f in body.flags}
    assert texts["vLLM 0.11.1 and later"] == f"--cudagraph-capture-sizes {spaced} --max-cudagraph-capture-size {body.sizes[-1]}"
    assert texts["SGLang before PR #23906 (later main: a deprecated alias)"] == f"--cuda-graph-bs {spaced}"
    assert body.decode_steps == len(sizes) and body.note is None
    assert [p.name for p in body.plans] == ["current", "proposed"]


def test_advice_without_decode_steps_says_there_is_nothing_to_choose_from(client):
    post_run(client)
    body = client.get("/v1/runs/run-1/advice").json()
    assert body["decode_steps"] == 0 and body["sizes"] == [] and "no decode steps" in body["note"]
    assert schemas.Advice.model_validate(body)


@pytest.mark.parametrize("params", [{"budget": 0}, {"budget": "many"}, {"budget": 10**6},
                                    {"eager_weight": -1}, {"eager_weight": "nan"}])
def test_bad_advice_parameters_are_422(client, params):
    post_run(client, events=[step(0, 1000.0)])
    assert client.get("/v1/runs/run-1/advice", params=params).status_code == 422


def test_advice_for_an_unknown_run_is_404(client):
    assert client.get("/v1/runs/nope/advice").status_code == 404
