"""End-to-end fixtures: a real collector (FastAPI app on uvicorn) over a SQLite store."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import uvicorn

from replayscope.collector.api import create_api
from replayscope.collector.settings import Settings
from replayscope.collector.store import Store
from tests.live_server import free_port, wait_answering
from tests.stores import store  # noqa: F401 (the store fixture, on db_url)

SERVE_SCRIPT = """
import sys, uvicorn
from replayscope.collector.api import create_api
from replayscope.collector.settings import Settings
from replayscope.collector.store import Store
db, port = sys.argv[1], int(sys.argv[2])
store = Store.open(db, upgrade=True)
uvicorn.run(create_api(store, Settings(db=db, run_services=False)), host="127.0.0.1", port=port,
            log_level="warning")
"""


class ThreadCollector:
    """The collector app served by uvicorn in a thread of the test process."""

    def __init__(self, store: Store, port: int, settings: Settings | None = None):
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(create_api(store, settings or Settings(run_services=False)), host="127.0.0.1",
                                port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> "ThreadCollector":
        self.thread.start()
        wait_answering(f"{self.url}/healthz", None, 30.0, "the collector", interval_s=0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


class ProcessCollector:
    """The collector in a subprocess, so that it can be stopped and restarted on one port."""

    def __init__(self, db_url: str, port: int):
        self.db_url, self.port = db_url, port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "ProcessCollector":
        self.proc = subprocess.Popen([sys.executable, "-c", SERVE_SCRIPT, self.db_url, str(self.port)],
                                     env={**os.environ, "OMP_NUM_THREADS": "1"})
        wait_answering(f"{self.url}/healthz", self.proc, 30.0, "the collector", interval_s=0.05)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


@pytest.fixture
def db_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/collector.db"


@pytest.fixture
def collector(store):
    """A running collector in this process; yields (url, store)."""
    server = ThreadCollector(store, free_port()).start()
    yield server
    server.stop()
