"""Serve an ASGI app on a free loopback port in a thread, for tests that need a real server;
wait for a server started in another process to answer."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
import urllib.request
from typing import Callable


# The base URL for Starlette's TestClient: its default Host, "testserver", is not a name a
# collector serves (replayscope.collector.api.hosts refuses it, as any name a rebound DNS could send).
LOOPBACK_BASE = "http://127.0.0.1"


def wait_answering(url: str, process: subprocess.Popen | None, timeout_s: float, what: str, *,
                   exited: Callable[[], str] | None = None, interval_s: float = 0.1) -> None:
    """Return once a GET of ``url`` answers (2xx or 3xx). Fail if ``process`` exits first (with
    ``exited()`` as the message, where given) or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            if process is not None and process.poll() is not None:
                raise AssertionError(exited() if exited else f"{what} exited with {process.returncode}")
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what} did not answer {url} within {timeout_s:g} s")
            time.sleep(interval_s)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(app, timeout_s: float = 20.0):
    """Yield the base URL while uvicorn serves ``app`` on 127.0.0.1."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + timeout_s
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
