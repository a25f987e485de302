"""A local HTTP server standing in for an engine's API in the client tests: a handler base that
answers bytes and keeps quiet, and the server started on a free port for the length of a block."""

from __future__ import annotations

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator


class StubHandler(BaseHTTPRequestHandler):
    def answer(self, data: bytes, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serving(handler: type[StubHandler]) -> Iterator[str]:
    """The server's URL (``http://127.0.0.1:PORT``) while the block runs."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
