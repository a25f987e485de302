"""Eager-ratio alerts: fire, hold, resolve, webhook; and the heartbeat timeout."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from collector import alerts, queries
from collector.ingest import ingest_events
from collector.services import Evaluator, mark_interrupted_runs
from collector.settings import Settings

from .conftest import step

RULE = {"name": "eager-high", "threshold": 0.25, "window_s": 60, "min_steps": 20}


def steps_at(seq0: int, t0: float, n: int, eager_every: int, reason: str = "batch_too_large") -> list[dict]:
    return [step(seq0 + i, t0 + i * 0.5, mode="eager" if eager_every and i % eager_every == 0 else "graph",
                 reason=reason if eager_every and i % eager_every == 0 else None) for i in range(n)]


def test_an_alert_fires_above_threshold_and_resolves_below(store, run_in):
    run_id = run_in(store)
    alerts.create_rule(store, RULE)
    ingest_events(store, run_id, steps_at(0, 1000.0, 60, eager_every=10))       # 10% eager
    assert alerts.evaluate_alerts(store, now=1030.0) == []
    ingest_events(store, run_id, steps_at(100, 1030.0, 60, eager_every=2))      # 50% eager
    fired = alerts.evaluate_alerts(store, now=1060.0)
    assert [t.status for t in fired] == ["firing"]
    event = queries.alert_events(store)[0]
    assert (event["status"], event["run_id"], event["reason"]) == ("firing", run_id, "batch_too_large")
    assert event["peak"] > 0.25
    assert queries.run_summary(store, run_id)["alerts_firing"] == 1
    assert alerts.evaluate_alerts(store, now=1061.0) == []                     # holds, no new alert
    ingest_events(store, run_id, steps_at(200, 1065.0, 120, eager_every=0))    # all graph
    resolved = alerts.evaluate_alerts(store, now=1125.0)
    assert [t.status for t in resolved] == ["resolved"]
    event = queries.alert_events(store)[0]
    assert event["status"] == "resolved" and event["ended_at"] == 1125.0 and event["started_at"] == 1060.0


def test_too_few_steps_do_not_fire(store, run_in):
    run_id = run_in(store)
    alerts.create_rule(store, RULE)
    ingest_events(store, run_id, steps_at(0, 1000.0, 10, eager_every=1))       # 100% eager, 10 steps
    assert alerts.evaluate_alerts(store, now=1010.0) == []


def test_a_rule_pattern_limits_the_runs(store, run_in):
    run_in(store, "a", name="prod-llama")
    run_in(store, "b", name="bench-llama")
    alerts.create_rule(store, {**RULE, "run_pattern": "prod-*"})
    for run_id in ("a", "b"):
        ingest_events(store, run_id, steps_at(0, 1000.0, 60, eager_every=1))
    fired = alerts.evaluate_alerts(store, now=1030.0)
    assert [t.alert["run_id"] for t in fired] == ["a"]


def test_the_stage_of_a_rule_is_respected(store, run_in):
    run_id = run_in(store)
    alerts.create_rule(store, RULE)
    ingest_events(store, run_id, [step(i, 1000.0 + i * 0.1, mode="eager", stage="prefill", reason="prefill")
                                  for i in range(100)])
    assert alerts.evaluate_alerts(store, now=1010.0) == []


def test_disabling_a_rule_resolves_its_alerts(store, run_in):
    run_id = run_in(store)
    rule = alerts.create_rule(store, RULE)
    ingest_events(store, run_id, steps_at(0, 1000.0, 60, eager_every=1))
    alerts.evaluate_alerts(store, now=1030.0)
    alerts.update_rule(store, rule["id"], {"enabled": False})
    assert queries.alert_events(store)[0]["status"] == "resolved"


@pytest.mark.parametrize("bad, field", [
    ({"name": "x", "threshold": -0.1}, "threshold"),
    ({"name": "x", "threshold": 0.5, "window_s": 0}, "window_s"),
    ({"name": "x", "threshold": 0.5, "min_steps": 0}, "min_steps"),
    ({"name": "x", "threshold": 0.5, "webhook_url": "ftp://x"}, "webhook_url"),
    ({"name": "", "threshold": 0.5}, "name"),
    ({"threshold": 0.5}, "name"),
])
def test_rule_validation_names_the_field(bad, field):
    with pytest.raises(alerts.InvalidRule) as info:
        alerts.validate_rule(bad)
    assert info.value.field == field


class _Hook(BaseHTTPRequestHandler):
    received: list = []
    fail_first = 0

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if _Hook.fail_first > 0:
            _Hook.fail_first -= 1
            self.send_response(503)
            self.end_headers()
            return
        _Hook.received.append(body)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook():
    _Hook.received, _Hook.fail_first = [], 1
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", _Hook
    server.shutdown()
    server.server_close()


def test_the_webhook_gets_alertmanager_json_after_a_retry(sqlite_store, run_in, webhook):
    url, hook = webhook
    run_id = run_in(sqlite_store)
    alerts.create_rule(sqlite_store, RULE)
    ingest_events(sqlite_store, run_id, steps_at(0, 1000.0, 60, eager_every=1, reason="lora_not_captured"))
    transitions = alerts.evaluate_alerts(sqlite_store, now=1030.0)
    results = alerts.notify(transitions, url, retries=3, backoff_s=0.01)
    assert results == [(url, True)]
    (payload,) = hook.received
    assert payload["version"] == "4" and payload["status"] == "firing"
    (alert,) = payload["alerts"]
    assert alert["labels"]["alertname"] == "ReplayscopeEagerRatioHigh"
    assert alert["labels"]["run_id"] == run_id and alert["labels"]["reason"] == "lora_not_captured"
    assert alert["startsAt"].endswith("Z") and alert["endsAt"] == "0001-01-01T00:00:00Z"


def test_an_undeliverable_webhook_gives_up_after_retries():
    transition = alerts.Transition("firing", {"id": 1, "run_id": "r", "run_name": "r", "started_at": 1.0,
                                              "peak": 0.5, "value": 0.5, "reason": None},
                                   {"name": "x", "stage": "decode", "threshold": 0.2, "window_s": 60,
                                    "webhook_url": None})
    assert alerts.notify([transition], "http://127.0.0.1:9/nothing", retries=1, backoff_s=0.01,
                         timeout_s=0.5) == [("http://127.0.0.1:9/nothing", False)]


def test_the_evaluator_tick_marks_silent_runs_interrupted(store, run_in):
    run_id = run_in(store)
    ingest_events(store, run_id, [step(0, 1000.0)], now=5000.0)
    assert mark_interrupted_runs(store, now=5050.0, timeout_s=60) == []
    Evaluator(store, Settings(heartbeat_timeout_s=60)).tick(now=5100.0)
    assert queries.run_summary(store, run_id)["status"] == "interrupted"
    ingest_events(store, run_id, [step(1, 1001.0)], now=5200.0)     # it was only quiet
    assert queries.run_summary(store, run_id)["status"] == "running"


def test_a_finished_run_is_never_marked_interrupted(store, run_in):
    run_id = run_in(store)
    ingest_events(store, run_id, [{"seq": 0, "ts": 1.0, "kind": "run_end", "status": "finished"}], now=10.0)
    assert mark_interrupted_runs(store, now=10_000.0, timeout_s=60) == []


def test_the_app_lifespan_runs_the_evaluator_service(tmp_path):
    import time

    from fastapi.testclient import TestClient

    from collector.api import create_api
    from collector.store import Store

    store = Store.open(f"sqlite:///{tmp_path}/svc.db", upgrade=True)
    app = create_api(store, Settings(evaluate_every_s=0.05))
    with TestClient(app):
        deadline = time.monotonic() + 5
        while app.state.evaluator.ticks < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert app.state.evaluator.ticks >= 2
    store.dispose()
