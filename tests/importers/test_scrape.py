"""The /metrics scraper against real Prometheus expositions served locally: SGLang with two
tensor-parallel ranks and a restart, both SGLang spellings (vLLM's: test_scrape_vllm.py)."""

from __future__ import annotations

import argparse

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from replayscope.app.cli import imports as cli
from replayscope.collector.importers.scrape import Scraper
from replayscope.contract.errors import ReplayscopeError
from replayscope.contract.wire import validate_event, validate_run
from tests.live_server import free_port
from tests.stub_server import QuietHandler, start_server, stop_server

NAME = "sglang:cuda_graph_passes"


class FakeSGLang:
    """A registry with SGLang's counter for two TP ranks (each counts every step), served by
    prometheus_client's own HTTP server."""

    def __init__(self, name: str = NAME):
        self.name = name
        self.registry = CollectorRegistry()
        self.counter = self._counter()
        self.server, self.thread = start_http_server(0, addr="127.0.0.1", registry=self.registry)
        self.url = f"http://127.0.0.1:{self.server.server_port}/metrics"

    def _counter(self) -> Counter:
        return Counter(self.name, "Forward passes by CUDA-graph mode", ["mode", "model_name", "tp_rank"],
                       registry=self.registry)

    def inc(self, mode: str, n: int) -> None:
        for rank in ("0", "1"):
            self.counter.labels(mode=mode, model_name="Qwen/Qwen3-8B", tp_rank=rank).inc(n)

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
    # two TP ranks report the same steps: counted once
    assert counts(events) == {("decode", "graph", None): 40, ("decode", "eager", "unknown"): 2,
                              ("prefill", "eager", "prefill"): 5, ("prefill", "graph", None): 1}
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
    from replayscope.collector.models import queries
    from replayscope.collector.store import Store

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
    assert run["modes"] == {"graph": 35, "padded": 0, "eager": 10, "unknown": 0}
    assert run["status"] == "finished"
    # SGLang's counter says how each pass ran, not its padding: not 0 %, unknown
    assert "padding" in run["not_measured"] and run["decode_padded_ratio"] is None
    assert run["eager_ratio"] == 10 / 45
    store.dispose()



def test_unreachable_endpoint_is_one_clear_error():
    port = free_port()
    with pytest.raises(ReplayscopeError, match="cannot reach"):
        Scraper(f"http://127.0.0.1:{port}/metrics").poll()


def assert_scraping_refused(server, message: str) -> None:
    """A poll of ``server``'s /metrics is one clear error matching ``message``; the server is stopped after."""
    try:
        with pytest.raises(ReplayscopeError, match=message):
            Scraper(f"http://127.0.0.1:{server.server_port}/metrics").poll()
    finally:
        stop_server(server)


class _Html(QuietHandler):
    def do_GET(self):
        self.answer(200, b"<html><body>not metrics</body></html>", "text/html")


def test_a_page_that_is_not_prometheus_text_is_one_clear_error():
    assert_scraping_refused(start_server(_Html), "not Prometheus text")


def test_prometheus_text_without_sglang_counters_is_an_error():
    registry = CollectorRegistry()
    Counter("something_else", "x", registry=registry).inc()
    server, _ = start_http_server(0, addr="127.0.0.1", registry=registry)
    assert_scraping_refused(server, "--enable-metrics, or vLLM")


def test_a_url_that_is_not_http_is_refused():
    with pytest.raises(ReplayscopeError, match="not an http"):
        cli.metrics_url("localhost:30000")


def test_the_underscore_spelling_is_read_too():
    server = FakeSGLang("sglang_cuda_graph_passes")
    try:
        clock = iter([1.0, 2.0])
        scraper = Scraper(server.url, clock=lambda: next(clock))
        server.inc("decode_cuda_graph", 5)
        scraper.poll()
        server.inc("decode_cuda_graph", 3)
        assert counts(scraper.poll()) == {("decode", "graph", None): 3}
    finally:
        server.close()
