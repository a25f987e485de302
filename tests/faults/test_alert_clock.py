"""One future-stamped event cannot silence a run's alerts. The audit: a heartbeat stamped an
hour ahead, then 1050 eager steps at the real time (ratio 1.0): no alert, and
``alert_state.evaluated_to`` an hour ahead for every rule. Now a run's clock counts each
event at most at its arrival (the collector's clock), the run says so, and the alert fires;
against a real ``replayscope serve``. Issue 36: a future-stamped *first step* did it still
(evaluation started at the run's first second with steps), until its evaluation waits for a
first step within the run's clock."""

from __future__ import annotations

import time

import sqlalchemy as sa

from .conftest import Collector, http_json, migrated_sqlite, wait_for

RULES = [{"name": "eager-60s", "threshold": 0.5, "window_s": 60, "min_steps": 100, "for_s": 0,
          "keep_firing_for_s": 0},
         {"name": "eager-default", "threshold": 0.2}]


def eager(seq0: int, t0: float, n: int, per_s: int = 300) -> list[dict]:
    return [{"seq": seq0 + i, "ts": t0 + i / per_s, "kind": "step", "stage": "decode", "mode": "eager",
             "raw_bs": 64, "graph_bs": None, "num_tokens": 64, "padded_tokens": 0, "reason": "batch_too_large",
             "duration_s": 0.003} for i in range(n)]


def test_a_heartbeat_an_hour_ahead_does_not_silence_the_alerts_of_the_steps_after_it(tmp_path):
    db = migrated_sqlite(tmp_path / "clock.db")
    with Collector(db, env={"REPLAYSCOPE_EVALUATE_EVERY_S": "0.5"}) as collector:
        for rule in RULES:
            assert http_json("POST", collector.url + "/v1/alert-rules", rule)[0] == 201
        now = time.time()
        assert http_json("POST", collector.url + "/v1/runs", {
            "run_id": "skewed", "name": "skewed", "source": "runner", "started_at": now - 10, "backend": "static",
            "model": "tiny", "device": "cpu"})[0] == 201
        assert http_json("POST", collector.url + "/v1/runs/skewed/events",
                         {"events": [{"seq": 0, "ts": now + 3600, "kind": "heartbeat"}]})[0] == 200
        time.sleep(1.5)                          # the evaluator runs with the future heartbeat stored
        t0 = time.time()
        for k in range(7):                        # 1050 eager steps at the real time, as a runner sends them
            start = t0 + k * 0.5
            assert http_json("POST", collector.url + "/v1/runs/skewed/events",
                             {"events": eager(1 + k * 150, start, 150)})[0] == 200
            time.sleep(max(0.0, start + 0.5 - time.time()))
        fired = wait_for(lambda: [a for a in http_json("GET", collector.url + "/v1/alerts?run_id=skewed")[1]
                                  if a["rule_name"] == "eager-60s"], 20, "the eager-ratio alert")
        summary = http_json("GET", collector.url + "/v1/runs/skewed")[1]
        checked_at = time.time()
    assert fired[0]["status"] == "firing" and fired[0]["peak"] == 1.0
    assert int(t0) <= fired[0]["started_at"] <= t0 + 10, "it fired where the eager steps are (whole seconds)"
    assert 3590 < summary["clock_ahead_s"] < 3610, "the run says how far ahead its events were stamped"
    assert summary["last_event_ts"] < checked_at, "its clock is the collector's, not the heartbeat's"
    engine = sa.create_engine(db)
    with engine.connect() as conn:
        furthest = conn.execute(sa.text("SELECT max(evaluated_to) FROM alert_state")).scalar_one()
    engine.dispose()
    assert furthest < checked_at, "no rule's evaluation went ahead of the collector's clock"


def test_a_first_step_an_hour_ahead_does_not_silence_the_alerts_of_the_steps_after_it(tmp_path):
    db = migrated_sqlite(tmp_path / "first.db")
    with Collector(db, env={"REPLAYSCOPE_EVALUATE_EVERY_S": "0.5"}) as collector:
        assert http_json("POST", collector.url + "/v1/alert-rules", RULES[0])[0] == 201
        now = time.time()
        assert http_json("POST", collector.url + "/v1/runs", {
            "run_id": "ahead", "name": "ahead", "source": "runner", "started_at": now - 10, "backend": "static",
            "model": "tiny", "device": "cpu"})[0] == 201
        assert http_json("POST", collector.url + "/v1/runs/ahead/events", {"events": eager(0, now + 3600, 1)})[0] == 200
        time.sleep(1.5)                          # the evaluator runs with only the future step stored
        t0 = time.time()
        for k in range(6):                        # 780 eager steps at the real time
            start = t0 + k * 0.5
            assert http_json("POST", collector.url + "/v1/runs/ahead/events",
                             {"events": eager(1 + k * 130, start, 130)})[0] == 200
            time.sleep(max(0.0, start + 0.5 - time.time()))
        fired = wait_for(lambda: http_json("GET", collector.url + "/v1/alerts?run_id=ahead")[1], 20,
                         "the eager-ratio alert")
    assert fired[0]["status"] == "firing" and fired[0]["peak"] == 1.0
    assert int(t0) <= fired[0]["started_at"] <= t0 + 10, "it fired where the eager steps are (whole seconds)"


def test_the_run_page_says_its_clock_is_the_collectors(tmp_path):
    from replayscope.app.server import create_server
    from replayscope.collector.ingest import ingest_events, ingest_run
    from replayscope.collector.models.queries import run_summary
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    store = Store.open(f"sqlite:///{tmp_path}/page.db")
    try:
        create_server(store, Settings(run_services=False))     # registers the pages
        from replayscope.app.pages.run import header
        now = time.time()
        ingest_run(store, {"run_id": "r", "name": "r", "source": "runner", "started_at": now, "backend": "static",
                           "model": "tiny", "device": "cpu"})
        ingest_events(store, "r", [{"seq": 0, "ts": now + 3600, "kind": "heartbeat"}], now=now)
        text = str(header(run_summary(store, "r")))
    finally:
        store.dispose()
    assert "stamped up to 1 h 00 min ahead of the collector's clock" in text
