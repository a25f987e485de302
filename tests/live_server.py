"""Serve an ASGI app on a free loopback port in a thread, for tests that need a real server."""

import contextlib
import socket
import threading
import time


# The base URL for Starlette's TestClient: its default Host, "testserver", is not a name a
# collector serves (collector.hosts refuses it, as any name a rebound DNS could send).
LOOPBACK_BASE = "http://127.0.0.1"


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
