"""A webhook receiver for the tests: a standard-library HTTP server on loopback that keeps
every JSON body it is sent, can answer slowly or with an error, and can be taken down
and brought back on the same port."""

from __future__ import annotations

import base64
import threading
import time
from http.server import ThreadingHTTPServer

from tests.live_server import free_port
from tests.stub_server import QuietHandler, start_server, stop_server

# What a collector needs in REPLAYSCOPE_WEBHOOK_ALLOW to post to a receiver on loopback.
LOOPBACK_ALLOW = "127.0.0.1"


class Receiver:
    def __init__(self, port: int | None = None, *, delay_s: float = 0.0, status: int = 200,
                 answer: bytes = b"ok", basic_auth: str | None = None):
        self.port = port or free_port()
        self.delay_s = delay_s
        self.status = status
        self.answer = answer                   # the body it answers with (a receiver's own secrets)
        self.basic_auth = basic_auth           # "user:password": anything else is answered 401
        self.received: list[dict] = []         # bodies it answered 2xx to
        self.bodies: list[dict] = []           # every body that arrived, answered or not yet
        self.authorizations: list[str | None] = []
        self.requests = 0                      # POSTs that arrived (answered or not yet)
        self.arrived = threading.Event()
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> "Receiver":
        receiver = self

        class Handler(QuietHandler):
            def do_POST(self):
                body = self.json_body()
                authorization = self.headers.get("Authorization")
                with receiver.lock:
                    receiver.requests += 1
                    receiver.bodies.append(body)
                    receiver.authorizations.append(authorization)
                receiver.arrived.set()
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)
                if receiver.basic_auth is not None and authorization != "Basic " + base64.b64encode(
                        receiver.basic_auth.encode()).decode():
                    self.send_response(401)
                    self.end_headers()
                    return
                with receiver.lock:
                    receiver.received.append(body)
                try:
                    self.send_response(receiver.status)
                    self.send_header("Content-Type", "text/plain")
                    self.end_headers()
                    self.wfile.write(receiver.answer)
                except (BrokenPipeError, ConnectionResetError):
                    pass                       # the sender stopped waiting (its timeout)

        self._server = start_server(Handler, self.port)
        return self

    def stop(self) -> None:
        if self._server is not None:
            stop_server(self._server)
            self._server = None

    def __enter__(self) -> "Receiver":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def alerts(self) -> list[tuple[str, str]]:
        """(status, fingerprint) of each webhook alert received, in order."""
        with self.lock:
            return [(a["status"], a["fingerprint"]) for body in self.received for a in body["alerts"]]
