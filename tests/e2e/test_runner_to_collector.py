"""The runner's events over HTTP into a real collector: delivery, spooling while it is down,
and `replayscope run --collector` surviving a collector restart with every event stored once."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time

import sqlalchemy as sa

from replayscope.collector.models import queries
from replayscope.collector.tables import runs, steps
from replayscope.runner.emitter import Emitter
from replayscope.contract.sinks import HttpSink
from replayscope.contract.events_file import read_events_file

from tests.e2e.conftest import ProcessCollector, ThreadCollector
from tests.live_server import free_port
from tests.waiting import wait_until


def run_record(run_id):
    return {"run_id": run_id, "name": "e2e", "source": "library", "started_at": time.time(),
            "backend": "static", "model": "tiny", "device": "cpu"}


def emit_steps(emitter, n, start=0):
    for i in range(start, start + n):
        if i % 3 == 2:
            emitter.step("decode", "eager", 40, None, 40, 0, "batch_too_large", 0.002)
        else:
            emitter.step("decode", "padded", 3, 4, 3, 1, None, 0.001)


def stored_step_seqs(store, run_id):
    with store.read() as conn:
        return [seq for (seq,) in conn.execute(
            sa.select(steps.c.seq).join(runs, runs.c.id == steps.c.run_pk).where(runs.c.run_id == run_id))]


def test_http_sink_delivers_every_event_to_a_running_collector(collector, store, tmp_path):
    spool = tmp_path / "spool.jsonl"
    emitter = Emitter(HttpSink(collector.url, spool_path=str(spool)), run_record("http-1"),
                      flush_interval_s=0.02).start()
    emitter.emit("phase", phase="load_weights", duration_s=0.3)
    emitter.emit("capture", graph_bs=4, stage="decode", duration_s=0.1, status="ok")
    emit_steps(emitter, 300)
    emitter.close()

    summary = queries.run_summary(store, "http-1")
    assert summary["status"] == "finished"
    assert summary["steps"] == 300 and summary["modes"] == {"graph": 0, "padded": 200, "eager": 100, "unknown": 0}
    assert summary["reasons"] == {"batch_too_large": 100}
    assert [c["graph_bs"] for c in queries.captures(store, "http-1")] == [4]
    assert not spool.exists()


def test_an_unreachable_collector_gets_the_spooled_events_once_it_is_back(store, tmp_path):
    port = free_port()
    spool = tmp_path / "spool.jsonl"
    sink = HttpSink(f"http://127.0.0.1:{port}", spool_path=str(spool), retries=2, backoff_s=0.01, timeout_s=2)
    emitter = Emitter(sink, run_record("spool-1"), flush_interval_s=0.02, heartbeat_s=60).start()
    emit_steps(emitter, 60)
    # the spool as its writer process leaves it (the sink in this process is not the one writing)
    assert wait_until(lambda: spool.exists() and spool.read_text().count('"kind": "step"') == 60, 10.0,
                      interval_s=0.02)

    run, spooled, _ = read_events_file(spool)           # the spool is itself a valid events file
    assert run["run_id"] == "spool-1"
    assert [e["seq"] for e in spooled] == list(range(60))
    assert queries.run_summary(store, "spool-1") is None

    server = ThreadCollector(store, port).start()
    try:
        emit_steps(emitter, 40, start=60)
        emitter.close()
    finally:
        server.stop()
    assert sorted(stored_step_seqs(store, "spool-1")) == list(range(100))
    summary = queries.run_summary(store, "spool-1")
    assert summary["steps"] == 100 and summary["status"] == "finished"
    assert not spool.exists() and sink.spooled == 0


def test_a_collector_restart_in_the_middle_of_a_run_loses_and_duplicates_nothing(db_url, store, tmp_path):
    """Issue 3 item 7: stop the collector during `replayscope run --collector`, restart it, and
    find every event the runner produced stored exactly once."""
    run_id = "restart-1"
    events_file, spool = tmp_path / "run.jsonl", tmp_path / "spool.jsonl"
    collector = ProcessCollector(db_url, free_port()).start()
    runner = subprocess.Popen(
        [sys.executable, "-m", "replayscope", "run", "--backend", "static", "--preset", "tiny", "--workload", "mixed",
         "--steps", "5000", "--seed", "3", "--run-id", run_id, "--collector", collector.url,
         "--spool", str(spool), "--events", str(events_file), "--quiet"],
        env={**os.environ, "OMP_NUM_THREADS": "1"}, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: (queries.run_summary(store, run_id) or {}).get("steps", 0) > 0, 60.0, interval_s=0.02), \
            "no step reached the collector"
        collector.stop()
        down_at = time.time()
        time.sleep(1.0)
        collector.start()
        up_at = time.time()
        assert runner.poll() is None, "the run ended before the collector came back; raise --steps"
        _, err = runner.communicate(timeout=120)
        assert runner.returncode == 0, err
    finally:
        if runner.poll() is None:
            runner.kill()
        collector.stop()

    produced = read_events_file(events_file).events
    produced_steps = [e for e in produced if e["kind"] == "step"]
    assert len(produced_steps) == 5000
    stored = stored_step_seqs(store, run_id)
    assert len(stored) == len(set(stored)), "a step was stored twice"
    assert sorted(stored) == sorted(e["seq"] for e in produced_steps)

    summary = queries.run_summary(store, run_id)
    assert summary["steps"] == 5000 and summary["status"] == "finished"
    stored_modes = {m: n for m, n in summary["modes"].items() if n}
    assert stored_modes == dict(collections.Counter(e["mode"] for e in produced_steps))
    assert summary["reasons"] == dict(collections.Counter(e["reason"] for e in produced_steps if e["reason"]))
    assert len(queries.captures(store, run_id)) == sum(e["kind"] == "capture" for e in produced)
    # The outage was real: steps produced while the collector was down were delivered afterwards.
    assert any(down_at <= e["ts"] <= up_at for e in produced_steps)
    assert not spool.exists()
