"""A runner SIGKILLed mid-run (no run_end): the run becomes ``interrupted`` after the
heartbeat timeout, and the dashboard's runs and run pages say so."""

from __future__ import annotations

import signal
import time

from tests.faults.conftest import Collector, http_json, migrated_sqlite, start_runner, stop_process, wait_for

HEARTBEAT_TIMEOUT_S = 2.0


def test_a_runner_killed_without_run_end_is_marked_interrupted_on_the_dashboard(tmp_path):
    db = migrated_sqlite(tmp_path / "store.db")
    collector = Collector(db, log=tmp_path / "collector.log",
                          env={"REPLAYSCOPE_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_TIMEOUT_S),
                               "REPLAYSCOPE_EVALUATE_EVERY_S": "0.25"}).start()
    runner = start_runner(collector.url, tmp_path / "events.jsonl", steps=20_000, run_id="dies",
                          log=tmp_path / "runner.log")
    run_url = collector.url + "/v1/runs/dies"
    try:
        def streaming():
            status, body, _ = http_json("GET", run_url)
            return status == 200 and body["steps"] >= 30 and body
        assert wait_for(streaming, 60, "the runner's steps")["status"] == "running"
        time.sleep(HEARTBEAT_TIMEOUT_S + 0.5)     # a live runner is never timed out
        assert http_json("GET", run_url)[1]["status"] == "running"

        runner.send_signal(signal.SIGKILL)
        runner.wait(10)
        killed_at = time.monotonic()
        body = wait_for(lambda: (b := http_json("GET", run_url)[1])["status"] == "interrupted" and b,
                        HEARTBEAT_TIMEOUT_S + 15, "the heartbeat timeout to mark the run interrupted")
        assert time.monotonic() - killed_at >= HEARTBEAT_TIMEOUT_S - 0.5
    finally:
        stop_process(runner)
        collector.stop()
    assert body["ended_at"] == body["last_event_ts"], "it ended at its last event, not at detection"

    from replayscope.app.server import create_server
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    store = Store(db)
    try:
        create_server(store, Settings(db=db, run_services=False))   # binds the store, registers the pages
        from replayscope.app.pages import run as run_page
        from replayscope.app.pages import runs as runs_page

        row = next(r for r in runs_page.page_data(store) if r["run_id"] == "dies")
        assert row["status"] == "interrupted" and row["steps"] == body["steps"]
        data = run_page.page_data(store, "dies")
        assert data["stats"]["run-status"] == "interrupted"
    finally:
        store.dispose()
