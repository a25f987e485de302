"""Prometheus exposition: parseable, bounded labels, one registry per app."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from replayscope.collector.api import create_api
from replayscope.collector.settings import Settings
from replayscope.collector.store import Store
from tests.live_server import LOOPBACK_BASE

from .conftest import run_record, step


def _families(client):
    return {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}


def _client(tmp_path, name):
    store = Store.open(f"sqlite:///{tmp_path}/{name}.db", upgrade=True)
    client = TestClient(create_api(store, Settings(run_services=False)), base_url=LOOPBACK_BASE)
    client.post("/v1/runs", json=run_record())
    return client


def test_ingest_is_counted_by_mode_and_bounded_reason(tmp_path):
    client = _client(tmp_path, "m")
    client.post("/v1/runs/run-1/events", json={"events": [
        step(0, 1.0), step(1, 2.0, mode="padded"), step(2, 3.0, mode="eager", reason="custom:my own words"),
        {"seq": 3, "ts": 4.0, "kind": "capture", "graph_bs": 8, "stage": "decode", "duration_s": 0.02,
         "pool_bytes": 1 << 20, "pool_delta_bytes": 1 << 20, "status": "ok"},
    ]})
    client.post("/v1/runs/run-1/events", json={"events": [step(0, 1.0)]})
    client.post("/v1/runs/run-1/events", json={"events": [dict(step(9, 1.0), mode="bad")]})
    families = _families(client)
    steps = {(s.labels["mode"], s.labels.get("reason", "")): s.value
             for s in families["replayscope_steps"].samples if s.name == "replayscope_steps_total"}
    assert steps == {("graph", ""): 1, ("padded", ""): 1, ("eager", "custom"): 1}
    for sample in families["replayscope_steps"].samples:
        assert set(sample.labels) <= {"source", "model", "stage", "mode", "reason"}
    ingest = {s.labels["result"]: s.value for s in families["replayscope_ingest_events"].samples
              if s.name == "replayscope_ingest_events_total"}
    assert ingest == {"accepted": 4, "duplicate": 1, "rejected": 1}
    padded = [s.value for s in families["replayscope_padded_tokens"].samples
              if s.name == "replayscope_padded_tokens_total"]
    assert padded == [1]
    capture = {s.labels.get("le"): s.value for s in families["replayscope_capture_duration_seconds"].samples
               if s.name.endswith("_bucket")}
    assert capture["0.01"] == 0 and capture["0.025"] == 1 and "300.0" in capture
    assert [s.value for s in families["replayscope_graph_pool_bytes"].samples] == [1 << 20]
    assert "replayscope_alerts_firing" in families


def test_each_app_has_its_own_registry(tmp_path):
    first, second = _client(tmp_path, "a"), _client(tmp_path, "b")
    first.post("/v1/runs/run-1/events", json={"events": [step(0, 1.0)]})
    assert "replayscope_steps_total{" in first.get("/metrics").text
    assert "replayscope_steps_total{" not in second.get("/metrics").text


def test_per_run_metrics_carry_the_runs_model(tmp_path):
    client = _client(tmp_path, "model")                  # run-1 is model "tiny"
    client.post("/v1/runs/run-1/events", json={"events": [
        step(0, 1.0), step(1, 2.0, mode="padded"),
        {"seq": 2, "ts": 3.0, "kind": "capture", "graph_bs": 8, "stage": "decode", "duration_s": 0.02,
         "pool_bytes": 1 << 20, "pool_delta_bytes": 1 << 20, "status": "ok"},
    ]})
    families = _families(client)
    for name in ("replayscope_steps", "replayscope_tokens", "replayscope_padded_tokens",
                 "replayscope_capture_duration_seconds", "replayscope_graph_pool_bytes"):
        samples = [s for s in families[name].samples if not s.name.endswith("_created")]
        assert samples and {s.labels["model"] for s in samples} == {"tiny"}, name
    tokens = {s.labels["stage"]: s.value for s in families["replayscope_tokens"].samples
              if s.name == "replayscope_tokens_total"}
    assert tokens == {"decode": 8}                     # 4 + 4 real tokens; the pad is counted apart
    for name in ("replayscope_ingest_events", "replayscope_ingest_batches"):
        assert all("model" not in s.labels for s in families[name].samples)


def test_the_model_label_is_bounded_in_number_and_length():
    from replayscope.collector.api.metrics import MODEL_LABEL_CHARS, OTHER_MODELS, ModelLabels

    label = ModelLabels(limit=2)
    assert [label("a"), label("b"), label("c"), label("a")] == ["a", "b", OTHER_MODELS, "a"]
    assert len(ModelLabels()("m" * 1000)) == MODEL_LABEL_CHARS
    assert ModelLabels()("") == "unknown"
