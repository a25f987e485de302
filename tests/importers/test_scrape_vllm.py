"""``replayscope scrape`` of vLLM's /metrics as vLLM 0.25 serves it (``vllm/v1/metrics/loggers.py``):
``vllm:iteration_tokens_total`` with its fixed buckets, observed once per engine step with the
step's tokens, and the engine's token and request counters. Issue 33's run: 104 steps, 914
tokens, one of 58 tokens above the largest capture size 32."""

from __future__ import annotations

import argparse
import io

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from replayscope.app.cli import imports as cli
from replayscope.collector.importers.scrape import Scraper
from replayscope.contract.errors import ReplayscopeError
from replayscope.contract.wire import validate_event, validate_run

# vLLM 0.25's buckets (loggers.py), whatever the capture sizes
VLLM_025_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
# Issue 33's 104 steps, 914 tokens: one of 58 (above 32), one of 30 (in the bucket 17-32)
ISSUE_33_STEPS = [58] + [12] * 40 + [30] + [6] * 37 + [5] * 24 + [4]
MODEL = "Qwen/Qwen3-0.6B"


class FakeVLLM:
    """vLLM 0.25's iteration-tokens histogram and counters for DP engines, served by
    prometheus_client's own HTTP server."""

    def __init__(self):
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.hist = Histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                              labels, buckets=VLLM_025_BUCKETS, registry=self.registry)
        self.prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels,
                              registry=self.registry)
        self.generated = Counter("vllm:generation_tokens", "Number of generation tokens processed.", labels,
                                 registry=self.registry)
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               labels + ["finished_reason"], registry=self.registry)
        for metric in (self.hist, self.prompt, self.generated):    # vLLM labels each engine's at start
            metric.labels(model_name=MODEL, engine="0")
        self.server, self.thread = start_http_server(0, addr="127.0.0.1", registry=self.registry)
        self.url = f"http://127.0.0.1:{self.server.server_port}/metrics"

    def step(self, tokens: int, engine: str = "0") -> None:
        self.hist.labels(model_name=MODEL, engine=engine).observe(tokens)

    def serve(self, steps: list[int], prompt: int, generated: int, requests: int, engine: str = "0") -> None:
        for tokens in steps:
            self.step(tokens, engine)
        self.prompt.labels(model_name=MODEL, engine=engine).inc(prompt)
        self.generated.labels(model_name=MODEL, engine=engine).inc(generated)
        self.success.labels(model_name=MODEL, engine=engine, finished_reason="length").inc(requests)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def vllm():
    server = FakeVLLM()
    yield server
    server.close()


def two_polls(server: FakeVLLM, **sizes) -> list[dict]:
    clock = iter([10.0, 20.0])
    scraper = Scraper(server.url, clock=lambda: next(clock), **sizes)
    server.serve([8, 3], prompt=10, generated=1, requests=0)        # before the first poll: the baseline
    assert scraper.poll() == []
    validate_run(scraper.run)
    server.serve(ISSUE_33_STEPS, prompt=288, generated=626, requests=24)
    events = scraper.poll()
    for e in events:
        validate_event(e)
    return events


def test_steps_and_tokens_are_the_histograms_count_and_sum_and_no_mode_is_invented(vllm):
    """Without capture sizes nothing says how a step ran: 104 steps of mode unknown holding
    vLLM's own 914 tokens (not 104 graph steps and 1,335 tokens from the buckets' bounds)."""
    (event,) = two_polls(vllm)
    assert (event["stage"], event["mode"], event["reason"], event["count"], event["num_tokens"]) == \
        ("mixed", "unknown", None, 104, 914)
    assert event["padded_tokens"] == 0 and "raw_bs" not in event and "graph_bs" not in event
    assert "288 prompt tokens, 626 generated tokens, 24 requests finished" in event["evidence"]


def test_a_bucket_wholly_above_the_largest_capture_size_is_eager_the_rest_unknown(vllm):
    """--max-cudagraph-capture-size 32: the step of 58 (bucket 33-64) is batch_too_large; the
    step of 30 (bucket 17-32) may be either side of a size, like every other: unknown."""
    events = two_polls(vllm, max_capture_size=32)
    assert [(e["mode"], e["reason"], e["count"], e["provenance"]) for e in events] == [
        ("eager", "batch_too_large", 1, "inferred"), ("unknown", None, 103, "measured")]
    assert sum(e["count"] for e in events) == 104 and sum(e["num_tokens"] for e in events) == 914
    assert "above 32" in events[0]["evidence"]


def test_a_bucket_that_straddles_the_largest_size_stays_unknown(vllm):
    """Largest size 24: the bucket 17-32 holds 30 (eager) and maybe 20 (a graph): unknown;
    only 33-64 is wholly above."""
    events = two_polls(vllm, capture_sizes=[1, 2, 4, 8, 16, 24])
    assert [(e["mode"], e["count"]) for e in events] == [("eager", 1), ("unknown", 103)]


def test_data_parallel_engines_add_up_and_a_restart_counts_from_zero(vllm):
    clock = iter([1.0, 2.0, 3.0])
    scraper = Scraper(vllm.url, clock=lambda: next(clock))
    vllm.serve([5] * 10, prompt=5, generated=45, requests=1)
    scraper.poll()
    vllm.serve([7] * 3, prompt=0, generated=21, requests=0, engine="0")
    vllm.serve([9] * 2, prompt=0, generated=18, requests=0, engine="1")
    (event,) = scraper.poll()
    assert (event["count"], event["num_tokens"]) == (5, 39)
    vllm.registry.unregister(vllm.hist)                      # the server restarted: its histogram anew
    vllm.hist = Histogram("vllm:iteration_tokens_total", "x", ["model_name", "engine"],
                          buckets=VLLM_025_BUCKETS, registry=vllm.registry)
    vllm.step(11)
    (event,) = scraper.poll()
    assert (event["count"], event["num_tokens"]) == (1, 11)


def scrape_into_store(server: FakeVLLM, tmp_path, url: str | None = None, **flags) -> tuple[int, str, str]:
    url = url or f"sqlite:///{tmp_path / 'scrape.db'}"
    args = argparse.Namespace(url=server.url, interval=0.01, count=2, db=url, collector=None, token=None,
                              cudagraph_capture_sizes=None, max_cudagraph_capture_size=None, migrate=True)
    vars(args).update(flags)
    out = io.StringIO()
    server.serve([8, 3], prompt=10, generated=1, requests=0)
    code = cli.run_scrape(args, out=out, sleep=lambda s: server.serve(ISSUE_33_STEPS, 288, 626, 24))
    return code, url, out.getvalue()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'scrape.db'}"
        return
    from tests.postgres import temporary_database
    with temporary_database("scrape case") as url:
        yield url


def test_the_store_and_the_api_hold_the_engines_counts_and_say_what_is_unknown(vllm, tmp_path, store_url):
    from fastapi.testclient import TestClient

    from replayscope.collector.api import create_api
    from replayscope.collector.models import queries
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store
    from tests.live_server import LOOPBACK_BASE

    code, url, out = scrape_into_store(vllm, tmp_path, store_url, max_cudagraph_capture_size=32)
    assert code == 0
    assert "poll 2: mixed/eager +1 (batch_too_large 1), mixed/unknown +103" in out
    store = Store.open(url)
    try:
        (run,) = queries.list_runs(store)
        assert run["modes"] == {"graph": 0, "padded": 0, "eager": 1, "unknown": 103}
        assert (run["steps"], run["num_tokens"]) == (104, 914)
        # what /metrics cannot give is null, not 0 % (issue 34)
        assert (run["eager_ratio"], run["padded_ratio"], run["decode_padded_ratio"]) == (None, None, None)
        assert {"modes", "padding", "reasons"} <= set(run["not_measured"])
        client = TestClient(create_api(store, Settings(run_services=False)), base_url=LOOPBACK_BASE)
        summary = client.get(f"/v1/runs/{run['run_id']}").json()
        assert summary["modes"]["unknown"] == 103 and summary["decode_padded_ratio"] is None
        assert summary["config"]["max_capture_size"] == 32
        # the engine's own counts over the scrape, as /metrics gave them
        assert summary["config"]["engine_counts"] == {"steps": 104, "tokens": 914, "prompt_tokens": 288,
                                                      "generated_tokens": 626, "requests_finished": 24}
        timeline = client.get(f"/v1/runs/{run['run_id']}/timeline").json()
        assert sum(p["unknown"] for p in timeline) == 103 and sum(p["steps"] for p in timeline) == 104
    finally:
        store.dispose()


@pytest.mark.parametrize("flags, message", [
    ({"cudagraph_capture_sizes": ["1,2,x"]}, "--cudagraph-capture-sizes: 'x' is not an integer"),
    ({"cudagraph_capture_sizes": ["1", "8"], "max_cudagraph_capture_size": 16}, "differs from the largest"),
    ({"max_cudagraph_capture_size": 0}, "at least 1"),
])
def test_bad_capture_sizes_are_one_clear_error_and_write_nothing(vllm, tmp_path, flags, message):
    with pytest.raises(ReplayscopeError, match=message):
        scrape_into_store(vllm, tmp_path, **flags)
    assert not (tmp_path / "scrape.db").exists()


def test_the_command_line_takes_vllms_flag_spellings_and_exits_2_on_bad_ones(tmp_path, capsys):
    from replayscope.app.cli import main

    code = main(["scrape", "http://127.0.0.1:9/metrics", "--cudagraph-capture-sizes", "1", "2", "0",
                 "--db", f"sqlite:///{tmp_path / 'x.db'}"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["replayscope scrape: error: --cudagraph-capture-sizes: batch sizes go from 1 to 4096, got 0"]


def test_the_fleet_counts_a_scraped_runs_steps_of_unknown_mode_as_unknown(vllm, tmp_path):
    """The fleet's figures of a scraped run: its eager share and padding null, its unknown
    steps counted; a group of it weighs only what is known (no 1 eager in 104 = 1 %)."""
    from replayscope.collector.analysis import fleet
    from replayscope.collector.store import Store

    code, url, _ = scrape_into_store(vllm, tmp_path, max_cudagraph_capture_size=32)
    store = Store.open(url)
    try:
        shown = fleet.fleet(store)
        (run,) = shown["runs"]
        assert run["modes"] == {"graph": 0, "padded": 0, "eager": 1, "unknown": 103}
        assert (run["eager_ratio"], run["decode_padded_ratio"]) == (None, None)
        (group,) = shown["groups"]
        assert (group["eager_ratio"], group["decode_padded_ratio"]) == (None, None)
    finally:
        store.dispose()


def fixture_log(name: str) -> str:
    from tests.importers.conftest import FIXTURES
    return str(FIXTURES / name)


def test_the_servers_log_gives_the_sizes_or_that_graphs_are_off(vllm, tmp_path):
    """--engine-log: vllm_new.log captures 1, 2, 4, 8: the 40 steps of 12 (bucket 9-16), the one
    of 30 and the one of 58 are above 8; an --enforce-eager log makes every step eager."""
    from replayscope.collector.importers.scrape import Scraper

    sizes, largest, off = cli.scrape_capture_sizes(argparse.Namespace(engine_log=fixture_log("vllm_new.log")))
    assert (sizes, largest, off) == ([1, 2, 4, 8], 8, None)
    events = two_polls(vllm, capture_sizes=sizes, max_capture_size=largest)
    assert [(e["mode"], e["reason"], e["count"]) for e in events] == [
        ("eager", "batch_too_large", 42), ("unknown", None, 62)]

    args = argparse.Namespace(engine_log=fixture_log("vllm_v011_enforce_eager_metrics.log"))
    sizes, largest, off = cli.scrape_capture_sizes(args)
    assert (sizes, largest) == (None, None) and "enforce_eager=True" in off
    clock = iter([1.0, 2.0])
    scraper = Scraper(vllm.url, clock=lambda: next(clock), graphs_off=off)
    scraper.poll()
    vllm.serve(ISSUE_33_STEPS, 288, 626, 24)
    (event,) = scraper.poll()
    assert (event["mode"], event["reason"], event["count"], event["num_tokens"]) == \
        ("eager", "graphs_disabled", 104, 914)
    assert scraper.run["config"]["not_measured"] == ["batch_sizes"]


@pytest.mark.parametrize("flags, message", [
    ({"engine_log": "vllm_old.log"}, "states no capture sizes"),
    ({"engine_log": "vllm_new.log", "max_cudagraph_capture_size": 8}, "not both"),
    ({"engine_log": "no_such.log"}, "no_such.log"),
])
def test_a_log_without_sizes_or_with_the_flags_is_one_clear_error(vllm, tmp_path, flags, message):
    flags = dict(flags, engine_log=fixture_log(flags["engine_log"]))
    with pytest.raises(ReplayscopeError, match=message):
        scrape_into_store(vllm, tmp_path, **flags)
    assert not (tmp_path / "scrape.db").exists()


# vLLM 0.25.0's own /metrics, recorded from a real `vllm serve` (H200, model runner V2,
# FULL_AND_PIECEWISE, capture sizes 1, 2, 4, 8, 16, 24, 32; max_num_seqs 16) after 32 requests:
# 92 engine steps (_count), 1,221 tokens (_sum) = 384 prompt + 837 generated.
REAL_METRICS = "vllm_v025_serve_metrics.txt"


def real_metrics() -> str:
    from tests.importers.conftest import FIXTURES
    return (FIXTURES / REAL_METRICS).read_text()


def just_started(text: str) -> str:
    """The same server's /metrics before its first request: every series there, at 0 (vLLM
    labels each engine's series at start), with the same ``_created`` times."""
    out = []
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if line and not line.startswith("#") and not name.endswith("_created"):
            line = line.rsplit(" ", 1)[0] + " 0.0"
        out.append(line)
    return "\n".join(out) + "\n"


def real_scrape(**sizes) -> tuple[Scraper, list[dict]]:
    pages = iter([just_started(real_metrics()), real_metrics()])
    clock = iter([100.0, 115.0])
    scraper = Scraper("http://vllm:8000/metrics", fetch_text=lambda url: next(pages), clock=lambda: next(clock),
                      **sizes)
    assert scraper.poll() == []
    events = scraper.poll()
    for e in events:
        validate_event(e)
    return scraper, events


def test_a_real_vllm_025_metrics_page_stores_its_count_as_steps_and_its_sum_as_tokens():
    text = real_metrics()
    assert 'vllm:iteration_tokens_total_count{engine="0",model_name="m"} 92.0' in text
    assert 'vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 1221.0' in text
    scraper, events = real_scrape()
    (event,) = events
    assert (event["mode"], event["reason"], event["count"], event["num_tokens"]) == ("unknown", None, 92, 1221)
    assert "384 prompt tokens, 837 generated tokens, 32 requests finished" in event["evidence"]
    assert (scraper.run["source"], scraper.run["model"]) == ("vllm-metrics", "m")
    assert scraper.final_run()["config"]["engine_counts"] == {
        "steps": 92, "tokens": 1221, "prompt_tokens": 384, "generated_tokens": 837, "requests_finished": 32}


def test_a_real_vllm_025_metrics_page_with_its_capture_sizes_has_5_steps_above_32():
    """Its buckets: 87 steps up to 32 tokens (either side of a size: unknown), 5 in 33-64."""
    _, events = real_scrape(capture_sizes=[1, 2, 4, 8, 16, 24, 32])
    assert [(e["mode"], e["reason"], e["count"]) for e in events] == [
        ("eager", "batch_too_large", 5), ("unknown", None, 87)]
    assert sum(e["num_tokens"] for e in events) == 1221
