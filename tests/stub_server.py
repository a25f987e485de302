"""Standard-library HTTP servers standing in for a collector, a webhook receiver or an
engine's /metrics in the tests: a request handler that reads a JSON body and answers in one
call without logging, served on loopback in a thread."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """A handler that logs no request line (the tests' output stays readable)."""

    def json_body(self):
        """The request's JSON body (None when it has none)."""
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")

    def answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def start_server(handler: type[BaseHTTPRequestHandler], port: int = 0) -> ThreadingHTTPServer:
    """``handler`` served on 127.0.0.1 (``port`` 0: a free one, ``server.server_port``) in a thread."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop_server(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()
