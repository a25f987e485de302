"""Fault-test harness: real ``replayscope serve`` and ``replayscope run`` processes on loopback.

Every process is started by the test and ended by its own pid; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
from tests.live_server import free_port
from tests.postgres import temporary_database

REPO = Path(__file__).resolve().parents[2]



def wait_for(predicate, timeout_s: float, what: str, interval_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")


def _lower(headers) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def http_json(method: str, url: str, payload=None, timeout: float = 10.0, headers: dict | None = None):
    """(status, decoded body, lower-cased headers) without raising on HTTP errors."""
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
            return response.status, (json.loads(raw) if raw else None), _lower(response.headers)
    except urllib.error.HTTPError as error:
        raw = error.read()
        return error.code, (json.loads(raw) if raw else None), _lower(error.headers)


class Collector:
    """``replayscope serve --no-dashboard`` as a subprocess on a fixed port."""

    def __init__(self, db_url: str, port: int | None = None, env: dict | None = None, log: Path | None = None,
                 dashboard: bool = False):
        self.db_url = db_url
        self.port = port or free_port()
        self.env = {**os.environ, **(env or {})}
        self.log = log
        self.dashboard = dashboard
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> "Collector":
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "replayscope", "serve", *([] if self.dashboard else ["--no-dashboard"]),
             "--host", "127.0.0.1", "--port", str(self.port), "--db", self.db_url],
            cwd=REPO, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        wait_for(self._healthy, timeout_s, f"the collector on {self.url}")
        return self

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the collector exited with {self.proc.returncode}"
                                 + (f": {self.log.read_text()[-2000:]}" if self.log else ""))
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: no shutdown handler, no flush, an in-flight transaction simply dies."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def __enter__(self) -> "Collector":
        return self.start()

    def __exit__(self, *_exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_runner(collector_url: str, events: Path, *, steps: int, run_id: str, spool: Path | None = None,
                 name: str | None = None, extra: list[str] = (), log: Path | None = None) -> subprocess.Popen:
    command = [sys.executable, "-m", "replayscope", "run", "--backend", "static", "--preset", "tiny",
               "--workload", "mixed", "--steps", str(steps), "--collector", collector_url,
               "--events", str(events), "--run-id", run_id, "--quiet", *extra]
    if spool is not None:
        command += ["--spool", str(spool)]
    if name is not None:
        command += ["--name", name]
    out = open(log, "ab") if log else subprocess.DEVNULL
    # One intra-op thread, as tests/e2e does: on a 2-core machine shared with other processes,
    # torch's two OpenMP threads wait on each other at every op, and a 1500-step CPU run takes
    # minutes instead of seconds (the runner at 100% CPU in libgomp, long past any wait).
    return subprocess.Popen(command, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


# Every table keyed (run_pk, seq): each event the runner writes lands in exactly one.
SEQ_TABLES = ("steps", "step_counts", "phases", "captures", "degrades", "parity_checks", "run_marks")


def stored_seqs(db_url: str, run_id: str) -> Counter:
    """seq -> how many rows hold it, over every event table of the run."""
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            run_pk = conn.execute(sa.text("SELECT id FROM runs WHERE run_id = :r"), {"r": run_id}).scalar_one()
            union = " UNION ALL ".join(f"SELECT seq FROM {t} WHERE run_pk = :pk" for t in SEQ_TABLES)
            return Counter(row[0] for row in conn.execute(sa.text(union), {"pk": run_pk}))
    finally:
        engine.dispose()


def row_counts(db_url: str) -> dict[str, int]:
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            names = sa.inspect(conn).get_table_names()
            return {n: conn.execute(sa.text(f'SELECT count(*) FROM "{n}"')).scalar_one()
                    for n in names if n != "alembic_version"}
    finally:
        engine.dispose()


def migrated_sqlite(path: Path) -> str:
    from replayscope.collector.store import Store

    url = f"sqlite:///{path}"
    Store.open(url, upgrade=True).dispose()
    return url


@pytest.fixture
def pg_url():
    """A fresh, migrated PostgreSQL database (skipped without REPLAYSCOPE_TEST_PG_URL, unless CI)."""
    from replayscope.collector.store import Store

    with temporary_database("fault tests") as url:
        Store.open(url, upgrade=True).dispose()
        yield url


class RoundRobinProxy:
    """A load balancer in front of several collectors: each request to the next one in turn
    (a plain HTTP/1.1 forwarder on loopback, in a thread of the test process)."""

    def __init__(self, backends: list[str]):
        import http.client
        import itertools
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit

        turns = itertools.cycle([urlsplit(b) for b in backends])
        lock = threading.Lock()
        self.forwarded = Counter()

        proxy = self

        class Forward(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self):
                with lock:
                    backend = next(turns)
                proxy.forwarded[backend.port] += 1
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                conn = http.client.HTTPConnection(backend.hostname, backend.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                response = conn.getresponse()
                payload = response.read()
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                conn.close()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

            def log_message(self, *_args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Forward)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "RoundRobinProxy":
        self.thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)
