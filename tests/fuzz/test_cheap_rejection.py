"""Oversized and deeply nested bodies are refused cheaply, over a real socket: a declared
oversized body before a byte of it is read, a deep one before any JSON parser runs."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from replayscope.collector.api import body as collector_json, create_api
from replayscope.collector.ingest import ingest_run
from replayscope.collector.settings import Settings
from replayscope.collector.store import Store
from tests.live_server import free_port
from tests.spying import spy

LIMIT = 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import uvicorn

    store = Store.open(f"sqlite:///{tmp_path_factory.mktemp('cheap') / 'rs.db'}", upgrade=True)
    ingest_run(store, {"run_id": "r", "name": "r", "source": "runner", "started_at": 1.0, "backend": "static",
                       "model": "tiny", "device": "cpu", "config": {}})
    app = create_api(store, Settings(run_services=False, max_body_bytes=LIMIT))
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    yield {"port": port, "store": store}
    srv.should_exit = True
    thread.join(10)
    store.dispose()


@pytest.fixture
def parser_calls(monkeypatch):
    calls = []
    spy(monkeypatch, collector_json, "_loads", lambda body: calls.append(len(body)))
    return calls


def exchange(port: int, head: bytes, body: bytes = b"", timeout: float = 5.0) -> tuple[int, dict, float]:
    """Send a request head (and body), return (status, JSON answer, seconds to the answer)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        start = time.perf_counter()
        conn.sendall(head + body)
        data = b""
        while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + _length(data):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        elapsed = time.perf_counter() - start
    status = int(data.split(b" ", 2)[1])
    return status, json.loads(data.split(b"\r\n\r\n", 1)[1]), elapsed


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


def head(port: int, length: int) -> bytes:
    return (f"POST /v1/runs/r/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\nConnection: close\r\n\r\n").encode()


def test_a_declared_oversized_body_is_413_before_it_is_sent(server, parser_calls):
    # 10 GiB declared, nothing sent: the answer must not wait for the body.
    status, answer, seconds = exchange(server["port"], head(server["port"], 10 * 1024 ** 3))
    assert status == 413 and "REPLAYSCOPE_MAX_BODY_BYTES" in answer["detail"]
    assert seconds < 1.0 and parser_calls == []


@pytest.mark.parametrize("body", [
    b"[" * (LIMIT - 16),                                                  # nothing but depth
    b'{"events": [' + b'{"a": [' * 60_000 + b"1" + b"]}" * 60_000 + b"]}",  # deep inside an event
], ids=["brackets", "nested-event"])
def test_deep_json_is_400_without_running_the_parser(server, parser_calls, body):
    status, answer, seconds = exchange(server["port"], head(server["port"], len(body)), body)
    assert status == 400 and "nested deeper than" in answer["detail"]
    assert parser_calls == [], "the depth check must come before json parsing"
    assert seconds < 1.0, f"took {seconds:.2f}s"


def test_after_hostile_bodies_the_collector_still_ingests(server):
    event = {"seq": 1, "ts": 2.0, "kind": "step", "stage": "decode", "mode": "graph", "raw_bs": 1, "graph_bs": 1,
             "num_tokens": 1, "padded_tokens": 0, "reason": None, "duration_s": 0.001}
    body = json.dumps({"events": [event]}).encode()
    status, answer, _ = exchange(server["port"], head(server["port"], len(body)), body)
    assert status == 200 and answer["accepted"] + answer["duplicates"] == 1
