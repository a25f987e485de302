"""Collector fixtures: stores on SQLite and, when REPLAYSCOPE_TEST_PG_URL is set, PostgreSQL.

Without that variable the PostgreSQL cases are skipped, unless CI is set: then they fail.
Each PostgreSQL case gets a database of its own, dropped afterwards.
"""

from __future__ import annotations

import pytest

from replayscope.collector.ingest import ingest_run
from tests.postgres import temporary_database
from tests.stores import opened_store, store  # noqa: F401 (the store fixture, on db_url)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    """An empty database URL on each dialect."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/store.db"
        return
    with temporary_database("store tests") as url:
        yield url


# A PostgreSQL-only case: the db_url above (and the store on it) on PostgreSQL alone.
postgresql_only = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


@pytest.fixture
def sqlite_store(tmp_path):
    with opened_store(f"sqlite:///{tmp_path}/store.db") as s:
        yield s


def run_record(run_id: str = "run-1", name: str = "demo", **overrides) -> dict:
    record = {"run_id": run_id, "name": name, "source": "runner", "started_at": 1000.0,
              "backend": "static", "model": "tiny", "device": "cpu", "torch_version": "2.5",
              "config": {"capture_sizes": [1, 2, 4, 8], "padding": True}}
    record.update(overrides)
    return record


def step(seq: int, ts: float, mode: str = "graph", raw_bs: int = 4, stage: str = "decode",
         reason: str | None = None, duration_s: float | None = 0.01) -> dict:
    graph_bs = {"graph": raw_bs, "padded": raw_bs + 1, "eager": None}[mode]
    if mode == "eager" and reason is None:
        reason = "batch_too_large"
    return {"seq": seq, "ts": ts, "kind": "step", "stage": stage, "mode": mode, "raw_bs": raw_bs,
            "graph_bs": graph_bs, "num_tokens": raw_bs, "padded_tokens": 1 if mode == "padded" else 0,
            "reason": reason, "duration_s": duration_s}


@pytest.fixture
def run_in(request):
    def make(store, run_id="run-1", **overrides):
        ingest_run(store, run_record(run_id, **overrides))
        return run_id
    return make
