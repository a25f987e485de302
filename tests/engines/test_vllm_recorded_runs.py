"""What a real vLLM 0.25.0 did on an H200, kept: the traced runs of ``test_vllm_gpu.py`` (2026-12-03,
``fixtures/vllm-0.25.0-*``: the trace's events, the engine's own log, its ``/metrics`` and what the
program asked for). On the CPU, every run of the suite checks that the trace, the log import and
the scrape of the same run agree with each other and with the engine's own counts, and that the
run page shows each eager step's reason and each PIECEWISE step's note as the trace recorded them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.vllm_harness import log_facts, metrics_facts
from replayscope.collector.importers.parser import parse_text
from replayscope.collector.importers.scrape import Scraper
from replayscope.collector.importers.vllm_log import ENGINE as VLLM
from replayscope.contract.events_file import read_events_file
from tests.importers.test_scrape_vllm import just_started

FIXTURES = Path(__file__).parent / "fixtures"
GIB = 1 << 30


def recorded(name: str):
    events = read_events_file(FIXTURES / f"vllm-0.25.0-{name}.jsonl")
    log = (FIXTURES / f"vllm-0.25.0-{name}.log").read_text()
    return events.run, events.events, log


def steps_of(events):
    return [e for e in events if e["kind"] == "step"]


def captures_by_mode(events) -> dict[str, list[int]]:
    modes: dict[str, list[int]] = {}
    for c in events:
        if c["kind"] == "capture":
            modes.setdefault(c["variant"].split(",")[0].removeprefix("vllm "), []).append(c["graph_bs"])
    return {mode: sorted(sizes) for mode, sizes in modes.items()}


def test_the_traced_offline_run_is_the_engines_own_count_and_its_logs_passes():
    _run, events, log = recorded("offline-traced")
    report = json.loads((FIXTURES / "vllm-0.25.0-offline-traced.report.json").read_text())
    steps = steps_of(events)
    assert len(steps) == report["engine"]["iteration_steps"] == 59
    assert sum(s["num_tokens"] for s in steps) == report["asked"]["forward_tokens"] == 1528
    facts = log_facts(log)
    assert {mode: len(sizes) for mode, sizes in captures_by_mode(events).items()} == facts["capture_passes"] \
        == {"PIECEWISE": 19, "FULL": 11}
    [phase] = [e for e in events if e["kind"] == "phase" and e["phase"] == "capture"]
    assert round(phase["mem_bytes"] / GIB, 2) == facts["capture_gib"] == 0.10


def test_the_logs_import_agrees_with_the_trace_of_the_same_run():
    _run, events, log = recorded("offline-traced")
    [imported] = parse_text(VLLM, log, path="offline-traced.log", mtime=0, digest=None).runs
    assert [e["status"] for e in imported.events if e["kind"] == "run_end"] == ["finished"]
    traced = captures_by_mode(events)
    passes = {p["pass"]: p for p in imported.run["config"]["capture_passes"]}
    for mode, sizes in traced.items():
        assert passes[mode]["sizes"] == sizes
    stages = {(c["stage"], c["graph_bs"]) for c in imported.events if c["kind"] == "capture"}
    assert stages == {(c["stage"], c["graph_bs"]) for c in events if c["kind"] == "capture"}
    graph_mem = imported.run["config"]["graph_mem_bytes"]
    [phase] = [e for e in events if e["kind"] == "phase" and e["phase"] == "capture"]
    assert abs(graph_mem - phase["mem_bytes"]) <= 0.005 * GIB          # the log rounds to 0.01 GiB


def test_a_scrape_of_the_served_runs_metrics_counts_the_steps_the_trace_recorded():
    _run, events, _log = recorded("serve-traced")
    metrics = (FIXTURES / "vllm-0.25.0-serve-traced.metrics.txt").read_text()
    client = json.loads((FIXTURES / "vllm-0.25.0-serve-traced.client.json").read_text())
    engine = metrics_facts(metrics)
    steps = steps_of(events)
    assert len(steps) == engine["iteration_steps"] == 90
    assert sum(s["num_tokens"] for s in steps) == client["asked"]["forward_tokens"] \
        == engine["iteration_tokens"] - client["asked"]["requests"]
    pages, clock = iter([just_started(metrics), metrics]), iter([100.0, 115.0])
    scraper = Scraper("http://vllm:8000/metrics", fetch_text=lambda url: next(pages), clock=lambda: next(clock))
    assert scraper.poll() == []
    scraped = scraper.poll()
    assert sum(e["count"] for e in scraped) == len(steps)
    assert sum(e["num_tokens"] for e in scraped) == engine["iteration_tokens"]
    [end] = [e for e in events if e["kind"] == "run_end"]
    assert end["status"] == "interrupted"          # Ctrl-C: vLLM's API server killed its engine core


@pytest.fixture
def page(tmp_path):
    from replayscope.app.server import create_server
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store
    from replayscope.collector.analysis.diagnosis import diagnose_run
    from tests.stores import ingest_events_file

    store = Store.open(f"sqlite:///{tmp_path / 'rs.db'}", upgrade=True)
    create_server(store, Settings(run_services=False))
    from replayscope.app.pages import run

    def shown(name: str):
        run_id = read_events_file(FIXTURES / f"vllm-0.25.0-{name}.jsonl").run["run_id"]
        ingest_events_file(store, FIXTURES / f"vllm-0.25.0-{name}.jsonl")
        data = run.page_data(store, run_id)
        data["diagnosis"] = diagnose_run(store, run_id)
        return data, str(run.reason_cards(data["reasons"], data["evidence"]))
    yield shown
    store.dispose()


def run_header(data):
    from replayscope.app.pages import run
    return run.header(data["summary"])


def test_the_run_page_of_a_traced_vllm_shows_the_dispatchers_reasons_and_notes(page):
    data, cards = page("serve-traced")
    assert [cost["reason"] for cost, _text in data["reasons"]] == ["batch_too_large"]
    assert "the largest graph for it holds 32 tokens" in cards
    assert "PIECEWISE, not FULL (prefill): 16 steps (padded)" in cards           # 18 PIECEWISE steps,
    assert "PIECEWISE, not FULL (prefill): 2 steps (graph)" in cards             # all mixed batches
    assert cards.index("vLLM") < cards.index("replayscope")      # the engine's own flags first
    assert "Traced by replayscope trace" in str(run_header(data))
    evidence = [e.text for f in data["diagnosis"].findings for e in f.evidence]
    assert any(text.startswith("replayscope trace records the program's CUDA-graph captures") for text in evidence)
    data, cards = page("offline-cap16-traced")
    assert "the largest graph for it holds 16 tokens" in cards
