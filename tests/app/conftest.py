"""Fixtures for the dashboard tests: a migrated SQLite store filled through replayscope.collector.ingest."""

import pytest

from tests.app import synthetic


@pytest.fixture
def store(tmp_path):
    from replayscope.collector.store import Store

    s = Store.open(f"sqlite:///{tmp_path / 'rs.db'}", upgrade=True)
    yield s
    s.dispose()


@pytest.fixture
def filled(store):
    synthetic.fill(store, "syn-1", steps=600)
    synthetic.fill(store, "syn-base", name="baseline", steps=200, slow_size=16, failed_size=32)
    return store
