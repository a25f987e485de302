"""The database cannot take writes (locked by another connection, or its disk full):
ingest answers 503 with a clear message and writes nothing, the runner's sink spools,
nothing acknowledged is lost, and ingest resumes when the database can write again."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from replayscope.contract.sinks import HttpSink
from tests.faults.conftest import Collector, http_json, migrated_sqlite, row_counts, stored_seqs


def step_events(seq0: int, n: int, t0: float = 1_000.0) -> list[dict]:
    return [{"seq": seq0 + i, "ts": t0 + (seq0 + i) * 0.01, "kind": "step", "stage": "decode",
             "mode": "graph", "raw_bs": 8, "graph_bs": 8, "num_tokens": 8, "padded_tokens": 0,
             "reason": None, "duration_s": 0.002} for i in range(n)]


def run_record(run_id: str) -> dict:
    return {"run_id": run_id, "name": run_id, "source": "runner", "started_at": 1_000.0, "backend": "static",
            "model": "tiny", "device": "cpu", "config": {}}


def sink_for(collector: Collector, tmp_path: Path, run_id: str) -> HttpSink:
    # The runner's own sink; one attempt per write keeps the test short (the runner uses 3).
    sink = HttpSink(collector.url, spool_path=str(tmp_path / f"spool-{run_id}.jsonl"), retries=1,
                    backoff_s=0.05, timeout_s=30)
    sink.open(run_record(run_id))
    return sink


def assert_refused_cleanly(collector: Collector, db: str, run_id: str, *, words: tuple[str, ...],
                           within_s: float = 30.0) -> None:
    before = row_counts(db)
    started = time.monotonic()
    status, body, headers = http_json("POST", f"{collector.url}/v1/runs/{run_id}/events",
                                      {"events": step_events(10_000, 3000)}, timeout=30)
    answered_s = time.monotonic() - started
    assert status == 503, body
    assert answered_s <= within_s, f"answered in {answered_s:.2f} s"
    detail = body["detail"]
    assert "nothing was written" in detail and "retry later" in detail, detail
    assert any(w in detail for w in words), detail
    assert headers.get("retry-after") == "1"
    assert row_counts(db) == before


def test_a_locked_database_is_503_the_sink_spools_and_ingest_resumes(tmp_path):
    db = migrated_sqlite(tmp_path / "store.db")
    collector = Collector(db, log=tmp_path / "collector.log").start()
    try:
        sink = sink_for(collector, tmp_path, "locked")
        sink.write(step_events(0, 100))
        assert sink.sent == 100 and sink.spooled == 0

        assert http_json("GET", collector.url + "/healthz")[0] == 200
        blocker = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")      # another process holds the write lock
        try:
            # At once (it hung ~10 s): the sink retries a 503 and spools, so nothing is lost.
            assert_refused_cleanly(collector, db, "locked", words=("locked",), within_s=1.0)
            status, body, headers = http_json("GET", collector.url + "/healthz")
            assert status == 503 and "degraded" in body["detail"] and "locked" in body["detail"], body
            assert headers.get("retry-after") == "1"
            sink.write(step_events(100, 100))
            assert sink.spooled == 100 and sink.sent == 100
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()

        sink.write(step_events(200, 100))      # drains the spool first, then sends these
        sink.close()
        assert sink.spooled == 0 and sink.sent == 300
        assert not Path(sink.spool_path).exists()
        assert http_json("GET", collector.url + "/healthz")[0] == 200, "a write committed: healthy again"
    finally:
        collector.stop()
    assert stored_seqs(db, "locked") == Counter(range(300))


@contextlib.contextmanager
def small_filesystem(path: Path, size: str = "6m"):
    """A tmpfs of ``size`` at ``path`` (needs root and mount permission)."""
    path.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                            capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        reason = f"cannot mount a tmpfs to fill ({(result.stderr or result.stdout).strip()})"
        if os.environ.get("CI"):
            pytest.fail(reason + "; CI must run the disk-full test as root with mount permission")
        pytest.skip(reason)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill(directory: Path) -> Path:
    """Write a file until the filesystem says ENOSPC."""
    filler = directory / "filler"
    with open(filler, "wb") as handle:
        chunk = b"\0" * 65536
        try:
            while True:
                handle.write(chunk)
                handle.flush()
        except OSError as error:
            assert error.errno == errno.ENOSPC
    return filler


def test_a_full_disk_is_503_the_sink_spools_and_ingest_resumes_when_space_returns(tmp_path):
    with small_filesystem(tmp_path / "small") as small:
        db = migrated_sqlite(small / "store.db")
        collector = Collector(db, log=tmp_path / "collector.log").start()
        try:
            sink = sink_for(collector, tmp_path, "disk-full")
            sink.write(step_events(0, 500))
            assert sink.sent == 500

            filler = fill(small)
            assert_refused_cleanly(collector, db, "disk-full", words=("full", "disk"))
            sink.write(step_events(500, 3000))
            assert sink.spooled == 3000, "the runner keeps what the collector could not store"
            status, body, _ = http_json("GET", collector.url + "/healthz")
            assert status == 503 and "degraded" in body["detail"], "every write fails: not healthy"
            assert http_json("GET", collector.url + "/v1/runs/disk-full")[0] == 200, "reads keep working"

            filler.unlink()                      # space returns
            sink.write(step_events(3500, 500))
            sink.close()
            assert sink.spooled == 0 and sink.sent == 4000
            collector.kill()                     # acknowledged means durable: survive a crash too
            collector.start()
            status, body, _ = http_json("GET", collector.url + "/v1/runs/disk-full")
            assert status == 200 and body["steps"] == 4000
        finally:
            collector.stop()
        assert stored_seqs(db, "disk-full") == Counter(range(4000))
        from sqlalchemy import create_engine, text

        engine = create_engine(db)
        try:
            with engine.connect() as conn:
                assert conn.execute(text("PRAGMA integrity_check")).scalar_one() == "ok"
        finally:
            engine.dispose()
