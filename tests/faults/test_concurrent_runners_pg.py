"""Two runners streaming at once into one collector on PostgreSQL: every event of both
stored once, and the rollups the dashboard reads agree with the runners' own files."""

from __future__ import annotations

from collections import Counter

import pytest

from replayscope.contract.events_file import read_events_file
from replayscope.contract.wire import STEP_COUNT_MODES
from tests.faults.conftest import Collector, start_runner, stop_process, stored_seqs

pytestmark = pytest.mark.postgres


def expected_summary(events: list[dict]) -> dict:
    steps = [e for e in events if e["kind"] == "step"]
    return {
        "steps": len(steps),
        "modes": {m: sum(e["mode"] == m for e in steps) for m in STEP_COUNT_MODES},
        "reasons": dict(Counter(e["reason"] for e in steps if e["mode"] == "eager")),
        "num_tokens": sum(e["num_tokens"] for e in steps),
        "padded_tokens": sum(e["padded_tokens"] for e in steps),
    }


def expected_histogram(events: list[dict]) -> dict:
    out: Counter = Counter()
    for e in events:
        if e["kind"] == "step" and e["stage"] == "decode":
            out[(e["raw_bs"], e["mode"])] += 1
    return dict(out)


def test_two_concurrent_runners_on_postgresql_are_stored_whole_with_correct_rollups(pg_url, tmp_path):
    collector = Collector(pg_url, log=tmp_path / "collector.log").start()
    runs = {"pg-a": 0, "pg-b": 1}
    procs = {run_id: start_runner(collector.url, tmp_path / f"{run_id}.jsonl", steps=300, run_id=run_id,
                                  name=run_id, extra=["--seed", str(seed)], log=tmp_path / f"{run_id}.log")
             for run_id, seed in runs.items()}
    try:
        for run_id, proc in procs.items():
            assert proc.wait(180) == 0, (tmp_path / f"{run_id}.log").read_text()[-3000:]
    finally:
        for proc in procs.values():
            stop_process(proc)
        collector.stop()

    from replayscope.collector.models import queries
    from replayscope.collector.store import Store

    store = Store.open(pg_url)
    try:
        a, b = (queries.run_summary(store, run_id) for run_id in runs)
        assert a["started_at"] < b["ended_at"] and b["started_at"] < a["ended_at"], "the runs overlapped"
        for run_id in runs:
            _record, events, _ = read_events_file(tmp_path / f"{run_id}.jsonl")
            assert stored_seqs(pg_url, run_id) == Counter(e["seq"] for e in events)
            summary = queries.run_summary(store, run_id)
            expected = expected_summary(events)
            assert {k: summary[k] for k in expected} == expected, run_id
            assert summary["status"] == "finished"
            histogram = {(r["raw_bs"], r["mode"]): r["steps"] for r in queries.batch_histogram(store, run_id, stage="decode")}
            assert histogram == expected_histogram(events)
            timeline = queries.mode_timeline(store, run_id, bucket_s=1)
            assert sum(p["graph"] + p["padded"] + p["eager"] for p in timeline) == expected["steps"]
    finally:
        store.dispose()
