"""Collector processes for the benchmarks: each an ``api`` on uvicorn in its own process,
the way a deployment runs them, started on a free loopback port and waited for.

    python -m benchmarks.collectors DB_URL PORT [--services] [--migrate]   # one collector (internal)
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_BODY_BYTES = 64 * 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(db_url: str, port: int, *, services: bool, migrate: bool) -> None:
    import uvicorn

    from replayscope.collector.api import create_api
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    store = Store.open(db_url, upgrade=migrate)
    app = create_api(store, Settings(db=db_url, run_services=services, max_body_bytes=MAX_BODY_BYTES))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def start(db_url: str, *, services: bool = False, migrate: bool = False,
          timeout_s: float = 60.0) -> tuple[int, subprocess.Popen]:
    """A collector process answering /healthz on a free port: (port, process)."""
    port = free_port()
    argv = [sys.executable, "-m", "benchmarks.collectors", db_url, str(port)]
    argv += ["--services"] if services else []
    argv += ["--migrate"] if migrate else []
    proc = subprocess.Popen(argv, cwd=REPO)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("a collector process exited early")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return port, proc
        except OSError:
            time.sleep(0.1)
    proc.terminate()
    raise RuntimeError("a collector did not start")


def stop(*procs: subprocess.Popen, timeout_s: float = 20.0) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(timeout=timeout_s)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("db_url")
    parser.add_argument("port", type=int)
    parser.add_argument("--services", action="store_true", help="run the background services too")
    parser.add_argument("--migrate", action="store_true", help="upgrade the store first")
    args = parser.parse_args()
    serve(args.db_url, args.port, services=args.services, migrate=args.migrate)
