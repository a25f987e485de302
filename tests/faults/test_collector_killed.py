"""The collector SIGKILLed mid-ingest and restarted on the same port: nothing lost, nothing doubled."""

from __future__ import annotations

import time
from collections import Counter

from replayscope.contract.events_file import read_events_file
from tests.faults.conftest import (Collector, http_json, migrated_sqlite, start_runner,
                                   stop_process, stored_seqs, wait_for)


def test_every_event_is_stored_exactly_once_across_a_collector_kill(tmp_path):
    db = migrated_sqlite(tmp_path / "store.db")
    collector = Collector(db, log=tmp_path / "collector.log").start()
    events, spool = tmp_path / "events.jsonl", tmp_path / "spool.jsonl"
    runner = start_runner(collector.url, events, steps=1500, run_id="killed-collector", spool=spool,
                          log=tmp_path / "runner.log")
    try:
        def stored_steps():
            status, body, _ = http_json("GET", collector.url + "/v1/runs/killed-collector")
            return status == 200 and body["steps"] >= 50 and body["steps"]

        before_kill = wait_for(stored_steps, 60, "the runner's first steps in the collector")
        collector.kill()
        assert runner.poll() is None, "the runner must still be streaming when the collector dies"
        # The runner keeps running and spools what it cannot send.
        wait_for(spool.exists, 20, "the runner to spool while the collector is down", 0.05)
        time.sleep(0.5)
        collector.start()
        assert runner.wait(120) == 0, (tmp_path / "runner.log").read_text()[-3000:]
    finally:
        stop_process(runner)
        collector.stop()

    record, produced, _ = read_events_file(events)
    assert record["run_id"] == "killed-collector"
    expected = Counter(e["seq"] for e in produced)
    assert len(expected) == len(produced) > before_kill
    stored = stored_seqs(db, "killed-collector")
    assert stored == expected, (f"missing {sorted(set(expected) - set(stored))[:10]}, "
                                f"doubled {[s for s, n in stored.items() if n > 1][:10]}")
    assert not spool.exists(), "the spool is drained once the collector is back"
    from replayscope.collector.models import queries
    from replayscope.collector.store import Store

    store = Store(db)
    try:
        summary = queries.run_summary(store, "killed-collector")
    finally:
        store.dispose()
    steps = [e for e in produced if e["kind"] == "step"]
    assert summary["steps"] == len(steps)
    assert summary["modes"] == {m: sum(e["mode"] == m for e in steps) for m in ("graph", "padded", "eager", "unknown")}
    assert summary["status"] == "finished"
