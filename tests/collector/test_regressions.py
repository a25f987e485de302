"""Regressions: a series of runs of one model and configuration with one injected change is
flagged on that run alone, against a named baseline, and can fire an alert rule."""

from __future__ import annotations

import random

import pytest

from replayscope.collector.alerting import alerts, notifications
from replayscope.collector.analysis import fleet, regressions
from replayscope.collector.models import fleet as fleet_figures, queries
from replayscope.collector.ingest import ingest_events, ingest_run
from tests.live_server import LOOPBACK_BASE

DAY = 86400.0
T0 = 1_790_000_000.0
CONFIG = {"capture_sizes": [1, 2, 4, 8], "max_bs": 8, "padding": True, "workload": {"name": "chat"}, "seed": 0}


def make_run(store, run_id: str, k: int, *, graph_step_s=0.010, eager=10, capture_s=3.0, startup_s=20.0,
             pool=2 << 30, version="v1", config=CONFIG, model="llama-8b", status="finished", noise=0.01,
             base=T0, graph_sample=None):
    """Run k of a series: 200 decode steps (``eager`` of them eager), one capture phase inside
    a startup of ``startup_s``; every figure jittered by ``noise`` (run-to-run spread)."""
    rng = random.Random(k)

    def jitter(x):
        return x * (1 + rng.uniform(-noise, noise))

    t0 = base + k * DAY / 4
    ingest_run(store, {"run_id": run_id, "name": run_id, "source": "runner", "started_at": t0, "backend": "cuda",
                       "model": model, "device": "NVIDIA H200", "torch_version": "2.9", "config": dict(config, seed=k),
                       "version": version, "graph_sample": graph_sample}, now=t0)   # it arrived as it ran
    startup, capture = jitter(startup_s), jitter(capture_s)
    events = [{"seq": 0, "ts": t0 + startup - capture, "kind": "phase", "phase": "load_weights", "start_ts": t0,
               "duration_s": startup - capture},
              {"seq": 1, "ts": t0 + startup, "kind": "phase", "phase": "capture",
               "start_ts": t0 + startup - capture, "duration_s": capture},
              {"seq": 2, "ts": t0 + startup, "kind": "capture", "graph_bs": 8, "stage": "decode", "duration_s": capture,
               "pool_bytes": int(jitter(pool)), "pool_delta_bytes": 1, "status": "ok"}]
    step_s = jitter(graph_step_s)
    for i in range(200):
        is_eager = i < eager
        events.append({"seq": 10 + i, "ts": t0 + startup + 1 + i * 0.05, "kind": "step", "stage": "decode",
                       "mode": "eager" if is_eager else "graph", "raw_bs": 16 if is_eager else 8,
                       "graph_bs": None if is_eager else 8, "num_tokens": 16 if is_eager else 8, "padded_tokens": 0,
                       "reason": "batch_too_large" if is_eager else None, "duration_s": 0.02 if is_eager else step_s})
    if status != "running":
        events.append({"seq": 500, "ts": t0 + startup + 12, "kind": "run_end", "status": status})
    ingest_events(store, run_id, events)


@pytest.fixture
def series(store):
    """Eight ordinary runs, then run-8 with a 30 % slower graph step on version v2."""
    for k in range(8):
        make_run(store, f"run-{k}", k)
    make_run(store, "run-8", 8, graph_step_s=0.013, version="v2")
    return store


def metric_names(findings):
    return [f["metric"] for f in findings]


def test_the_injected_change_is_the_only_regression(series):
    result = regressions.run_regressions(series, "run-8")
    assert result["judged"] and metric_names(result["regressions"]) == ["graph_step_s"]
    finding = result["regressions"][0]
    assert finding["value"] > finding["high"] + finding["margin"]
    assert finding["change"] == pytest.approx(0.3, abs=0.03)
    for k in range(3, 8):
        assert regressions.run_regressions(series, f"run-{k}")["regressions"] == [], f"run-{k}"


def test_the_baseline_is_named(series):
    baseline = regressions.run_regressions(series, "run-8")["baseline"]
    assert baseline["runs"] == [f"run-{k}" for k in range(8)]
    assert baseline["versions"] == ["v1"]
    assert "8 earlier finished runs of llama-8b (cuda on NVIDIA H200, same configuration)" in baseline["text"]
    assert "run-0 … run-7" in baseline["text"]


def test_runs_of_another_configuration_or_model_are_not_the_baseline(series):
    make_run(series, "other-config", 9, config=dict(CONFIG, max_bs=16), graph_step_s=0.02)
    make_run(series, "other-model", 10, model="qwen-7b", graph_step_s=0.02)
    assert regressions.run_regressions(series, "other-config")["baseline"] is None
    assert regressions.run_regressions(series, "other-model")["baseline"] is None


def test_a_seed_is_not_a_different_configuration():
    assert fleet_figures.config_key("m", "cuda", "d", dict(CONFIG, seed=1)) == fleet_figures.config_key("m", "cuda", "d", CONFIG)
    assert fleet_figures.config_key("m", "cuda", "d", dict(CONFIG, max_bs=16)) != fleet_figures.config_key("m", "cuda", "d", CONFIG)


def test_too_few_earlier_runs_are_not_judged(store):
    for k in range(2):
        make_run(store, f"run-{k}", k)
    make_run(store, "run-2", 2, graph_step_s=0.05)
    result = regressions.run_regressions(store, "run-2")
    assert not result["judged"] and result["regressions"] == []


@pytest.mark.parametrize("change, metric", [
    ({"eager": 30}, "eager_ratio"), ({"capture_s": 4.5}, "capture_total_s"),
    ({"startup_s": 30.0}, "startup_s"), ({"pool": 3 << 30}, "pool_bytes"),
])
def test_each_metric_is_watched(store, change, metric):
    for k in range(6):
        make_run(store, f"run-{k}", k)
    make_run(store, "changed", 6, **change)
    assert metric_names(regressions.run_regressions(store, "changed")["regressions"]) == [metric]


def test_a_faster_run_is_an_improvement_not_a_regression(series):
    make_run(series, "faster", 9, graph_step_s=0.007)
    result = regressions.run_regressions(series, "faster")
    assert result["regressions"] == [] and metric_names(result["improvements"]) == ["graph_step_s"]


def test_the_fleet_rows_carry_the_same_findings(series):
    rows = {r["run_id"]: r for r in fleet.fleet_runs(series)}
    assert metric_names(rows["run-8"]["regressions"]) == ["graph_step_s"]
    assert rows["run-8"]["baseline"]["runs"] == [f"run-{k}" for k in range(8)]
    assert all(rows[f"run-{k}"]["regressions"] == [] for k in range(8))


# -- alerting -----------------------------------------------------------------------------------

def regression_rule(store, **overrides):
    return alerts.create_rule(store, {"name": "slower", "kind": "regression", "threshold": 0.1, "min_steps": 100,
                                      "window_s": 7 * 86400, **overrides})


def test_a_regression_rule_fires_once_for_the_regressed_run(series):
    regression_rule(series)
    now = T0 + 9 * DAY / 4
    fired = alerts.evaluate_alerts(series, now)
    assert [(t.status, t.alert["run_id"], t.alert["reason"]) for t in fired] == [("firing", "run-8", "graph_step_s")]
    assert alerts.evaluate_alerts(series, now + 10) == []
    body = notifications.alert_body("firing", fired[0].alert, fired[0].rule, "")
    assert body["labels"]["alertname"] == "ReplayscopeRegression" and body["labels"]["metric"] == "graph_step_s"
    assert "run-0 … run-7" in body["annotations"]["baseline"]
    assert queries.alert_events(series, "run-8")[0]["status"] == "firing"


def test_a_regression_smaller_than_the_threshold_does_not_fire(series):
    regression_rule(series, threshold=0.5)
    assert alerts.evaluate_alerts(series, T0 + 9 * DAY / 4) == []


def test_a_regression_rule_can_watch_one_metric(series):
    regression_rule(series, metric="startup_s")
    assert alerts.evaluate_alerts(series, T0 + 9 * DAY / 4) == []


def test_a_regression_alert_resolves_when_a_newer_run_of_the_configuration_finishes(series):
    regression_rule(series)
    alerts.evaluate_alerts(series, T0 + 9 * DAY / 4)
    make_run(series, "run-9", 9, version="v3")
    resolved = alerts.evaluate_alerts(series, T0 + 10 * DAY / 4)
    assert [(t.status, t.alert["run_id"]) for t in resolved] == [("resolved", "run-8")]


def test_an_eager_ratio_rule_never_watches_a_metric(store):
    with pytest.raises(alerts.InvalidRule) as info:
        alerts.create_rule(store, {"name": "x", "threshold": 0.2, "metric": "startup_s"})
    assert info.value.field == "metric"
    with pytest.raises(alerts.InvalidRule) as info:
        alerts.create_rule(store, {"name": "x", "threshold": 0.2, "kind": "regression", "metric": "speed"})
    assert info.value.field == "metric"
    with pytest.raises(alerts.InvalidRule) as info:
        alerts.create_rule(store, {"name": "x", "threshold": 0.2, "kind": "anomaly"})
    assert info.value.field == "kind"


def test_the_api_serves_a_runs_comparison_and_the_fleet(series):
    from fastapi.testclient import TestClient

    from replayscope.collector.api import create_api
    from replayscope.collector.settings import Settings

    client = TestClient(create_api(series, Settings(run_services=False)), base_url=LOOPBACK_BASE)
    body = client.get("/v1/runs/run-8/regressions").json()
    assert metric_names(body["regressions"]) == ["graph_step_s"] and body["baseline"]["n"] == 8
    assert client.get("/v1/runs/ghost/regressions").status_code == 404
    fleet_body = client.get("/v1/fleet", params={"version": "v2"}).json()
    assert [r["run_id"] for r in fleet_body["runs"]] == ["run-8"]
    assert [g["version"] for g in fleet_body["groups"]] == ["v2"]
