"""The SGLang /metrics scraper against a real Prometheus exposition served locally."""

from __future__ import annotations

import argparse
import http.server
import threading

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from collector.importers import cli
from collector.importers.sglang_metrics import Scraper
from runner.errors import ReplayscopeError
from runner.wire import validate_event, validate_run
from tests.live_server import free_port

NAME = "sglang:cuda_graph_passes"


class FakeSGLang:
    """A registry with SGLang's counter, served by prometheus_client's own HTTP server."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.counter = self._counter()
        self.server, self.thread = start_http_server(0, addr="127.0.0.1", registry=self.registry)
        self.url = f"http://127.0.0.1:{self.server.server_port}/metrics"

    def _counter(self) -> Counter:
        return Counter(NAME, "Forward passes by CUDA-graph mode", ["mode", "model_name"], registry=self.registry)

    def inc(self, mode: str, n: int) -> None:
        self.counter.labels(mode=mode, model_name="Qwen/Qwen3-8B").inc(n)

    def restart(self) -> None:
        """The server restarted: its counters start again from zero."""
        self.registry.unregister(self.counter)
        self.counter = self._counter()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sglang():
    server = FakeSGLang()
    yield server
    server.close()


def counts(events):
    return {(e["stage"], e["mode"], e["reason"]): e["count"] for e in events}


def test_deltas_between_polls_become_step_counts_and_a_reset_is_handled(sglang):
    clock = iter([100.0, 110.0, 125.0, 140.0, 150.0])
    scraper = Scraper(sglang.url, clock=lambda: next(clock))
    sglang.inc("decode_cuda_graph", 50)
    sglang.inc("decode_none", 3)
    assert scraper.poll() == []                           # the baseline
    validate_run(scraper.run)
    assert (scraper.run["source"], scraper.run["model"], scraper.run["started_at"]) == \
        ("sglang-metrics", "Qwen/Qwen3-8B", 100.0)

    sglang.inc("decode_cuda_graph", 40)
    sglang.inc("decode_none", 2)
    sglang.inc("prefill_none", 5)
    sglang.inc("prefill_cuda_graph", 1)
    events = scraper.poll()
    for e in events:
        validate_event(e)
    assert counts(events) == {("decode", "graph", None): 40, ("decode", "eager", "unknown"): 2,
                              ("prefill", "eager", "unknown"): 5, ("prefill", "graph", None): 1}
    assert {(e["ts"], e["interval_s"]) for e in events} == {(110.0, 10.0)}

    assert scraper.poll() == []                           # nothing new

    sglang.restart()
    sglang.inc("decode_cuda_graph", 7)
    sglang.inc("decode_none", 1)
    events = scraper.poll()
    assert counts(events) == {("decode", "graph", None): 7, ("decode", "eager", "unknown"): 1}
    assert scraper.resets == 1
    end = scraper.end()
    assert (end["kind"], end["status"]) == ("run_end", "finished")
    seqs = [e["seq"] for e in events] + [end["seq"]]
    assert seqs == sorted(set(seqs))


def test_scrape_command_writes_one_run_into_the_store(sglang, tmp_path):
    from collector import queries
    from collector.store import Store

    url = f"sqlite:///{tmp_path / 'scrape.db'}"
    plan = iter([lambda: (sglang.inc("decode_cuda_graph", 30), sglang.inc("decode_none", 10)),
                 lambda: (sglang.restart(), sglang.inc("decode_cuda_graph", 5))])
    sglang.inc("decode_cuda_graph", 1000)
    args = argparse.Namespace(url=sglang.url.removesuffix("/metrics"), interval=0.01, count=3, db=url,
                              collector=None, token=None)
    assert cli.run_scrape(args, out=open("/dev/null", "w"), sleep=lambda s: next(plan)()) == 0
    store = Store.open(url)
    (run,) = queries.list_runs(store)
    assert run["source"] == "sglang-metrics"
    assert run["modes"] == {"graph": 35, "padded": 0, "eager": 10}
    assert run["status"] == "finished"
    store.dispose()



def test_unreachable_endpoint_is_one_clear_error():
    port = free_port()
    with pytest.raises(ReplayscopeError, match="cannot reach"):
        Scraper(f"http://127.0.0.1:{port}/metrics").poll()


class _Html(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"<html><body>not metrics</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_page_that_is_not_prometheus_text_is_one_clear_error():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Html)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(ReplayscopeError, match="not Prometheus text"):
            Scraper(f"http://127.0.0.1:{server.server_port}/metrics").poll()
    finally:
        server.shutdown()
        server.server_close()


def test_prometheus_text_without_sglang_counters_is_an_error():
    registry = CollectorRegistry()
    Counter("something_else", "x", registry=registry).inc()
    server, _ = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        with pytest.raises(ReplayscopeError, match="--enable-metrics"):
            Scraper(f"http://127.0.0.1:{server.server_port}/metrics").poll()
    finally:
        server.shutdown()
        server.server_close()


def test_a_url_that_is_not_http_is_refused():
    with pytest.raises(ReplayscopeError, match="not an http"):
        cli.metrics_url("localhost:30000")
