"""What a real SGLang 0.5.17 did on an H200, kept: the traced runs of ``test_sglang_gpu.py``
(2026-12-03, ``fixtures/sglang-0.5.17-*-traced.*``, as recorded: the trace's events, the engine's
own log, the program's report, and for the server its ``/metrics`` before and after the client's
32 requests and the client's report). FA3 attention, decode graphs ``full`` (sizes in requests),
prefill graphs ``breakable`` (sizes in tokens), the overlap scheduler on; the server was stopped
with Ctrl-C after serving every request.

On the CPU, every run of the suite checks the trace, the log import and the scrape of the same
run against what SGLang said about itself in that run: its "Prefill batch" / "Decode batch"
lines, its capture passes ("Capture target decode CUDA graph begin. ... bs=[...]", "... end.
elapsed=T s, mem usage=M GB"), its counters (``sglang:cuda_graph_passes_total`` by mode,
``sglang:realtime_tokens_total``) and what the program asked for.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.sglang_harness import log_facts, metrics_delta, metrics_facts
from replayscope.collector.importers import parse_sglang_text
from replayscope.contract.events_file import read_events_file
from tests.engines.http_stub import StubHandler, serving
from tests.importers.test_scrape_vllm import just_started

FIXTURES = Path(__file__).parent / "fixtures"
GIB = 1 << 30
STEP_FIELDS = ("stage", "mode", "raw_bs", "graph_bs", "num_tokens", "padded_tokens")
# SGLang's pass names (its log's "Capture <name> CUDA graph begin") -> the trace's capture stage
PASS_STAGE = {"target decode": "decode", "target prefill": "prefill"}


def fixture(name: str) -> Path:
    return FIXTURES / f"sglang-0.5.17-{name}"


def recorded(name: str):
    events = read_events_file(fixture(f"{name}.jsonl"))
    return events.run, events.events, fixture(f"{name}.log").read_text()


def steps_of(events, *stages):
    return [e for e in events if e["kind"] == "step" and (not stages or e["stage"] in stages)]


def captures_by_stage(events) -> dict[str, list[int]]:
    stages: dict[str, list[int]] = {}
    for c in events:
        if c["kind"] == "capture":
            stages.setdefault(c["stage"], []).append(c["graph_bs"])
    return {stage: sorted(sizes) for stage, sizes in stages.items()}


def logged_capture_sizes(facts) -> dict[str, list[int]]:
    return {PASS_STAGE[name]: sorted(p["sizes"]) for name, p in facts["capture_passes"].items()}


def padded_as_sglang_pads(steps, sizes: list[int]) -> None:
    """Each step ran the smallest graph the log says was captured for its stage that holds it."""
    for s in steps:
        assert s["graph_bs"] == min(size for size in sizes if size >= s["raw_bs"]), s
        assert s["padded_tokens"] == s["graph_bs"] - s["raw_bs"]
        assert s["mode"] == ("graph" if s["padded_tokens"] == 0 else "padded")


def capture_memory_agrees(events, facts) -> None:
    """The trace's capture phase against SGLang's "mem usage" of each pass (free device memory
    before minus after, in GB of 2^30 bytes rounded to 0.01)."""
    [phase] = [e for e in events if e["kind"] == "phase" and e["phase"] == "capture"]
    logged = sum(p["mem_gb"] for p in facts["capture_passes"].values())
    assert abs(phase["mem_bytes"] / GIB - logged) <= 0.006 * len(facts["capture_passes"])


def test_the_traced_offline_run_is_sglangs_own_batches_and_capture_passes():
    _run, events, log = recorded("offline-traced")
    report = json.loads(fixture("offline-traced.report.json").read_text())
    asked, facts = report["asked"], log_facts(log)
    assert report["produced"]["exact"] and report["engine"]["prompt_tokens"] == asked["prompt_tokens"]
    prefill, decode = steps_of(events, "prefill", "mixed"), steps_of(events, "decode")
    assert len(prefill) == facts["prefill_batches"] == 1
    assert sum(s["num_tokens"] for s in prefill) == facts["prefill_new_tokens"] \
        == asked["prompt_tokens"] - facts["prefill_cached_tokens"]
    # decode_log_interval=1: every decode batch is a log line with its rows
    assert len(decode) == facts["decode_batches"] == 58
    assert sum(s["raw_bs"] for s in decode) == facts["decode_rows"] == asked["decode_tokens"] + asked["requests"]
    sizes = logged_capture_sizes(facts)
    padded_as_sglang_pads(decode, sizes["decode"])
    padded_as_sglang_pads(prefill, sizes["prefill"])
    assert captures_by_stage(events) == sizes
    assert len(sizes["prefill"]) == 58 and len(sizes["decode"]) == 36
    assert facts["capture_passes"]["target prefill"]["unit"] == "tokens"
    assert all(c["status"] == "ok" for c in events if c["kind"] == "capture")
    capture_memory_agrees(events, facts)
    # Engine.shutdown SIGKILLs the scheduler at the program's normal end
    assert [e["status"] for e in events if e["kind"] == "run_end"] == ["finished"]
    assert any(e["kind"] == "warning" and e.get("code") == "stopped_by_parent" for e in events)


def test_the_traced_served_run_is_sglangs_own_passes_batches_and_tokens():
    _run, events, log = recorded("serve-traced")
    facts = log_facts(log)
    before = metrics_facts(fixture("serve-traced.metrics-before.txt").read_text())
    after = metrics_facts(fixture("serve-traced.metrics.txt").read_text())
    client = json.loads(fixture("serve-traced.client.json").read_text())
    steps = steps_of(events)
    # one cuda_graph_passes_total increment per forward pass, by mode; no pass ran without a graph
    assert Counter(s["stage"] for s in steps) == {"prefill": after["passes"]["prefill_cuda_graph"],
                                                  "decode": after["passes"]["decode_cuda_graph"]}
    assert len(steps) == after["steps"] == 101 and not [s for s in steps if s["mode"] == "eager"]
    # the scrape before the client's requests had counted the server's own warm-up request: the
    # first steps of the trace; the rest are the client's, as the counters' increase says
    warm_up, served = steps[:before["steps"]], steps[before["steps"]:]
    assert Counter(s["stage"] for s in warm_up) == {"prefill": before["passes"]["prefill_cuda_graph"],
                                                    "decode": before["passes"]["decode_cuda_graph"]}
    window = metrics_delta(before, after)
    assert Counter(s["stage"] for s in served) == {"prefill": window["passes"]["prefill_cuda_graph"],
                                                   "decode": window["passes"]["decode_cuda_graph"]}
    assert sum(s["num_tokens"] for s in steps_of(served, "prefill")) + window["tokens"]["prefill_cache"] \
        == window["prompt_tokens"] == client["asked"]["prompt_tokens"]
    # every prefill batch is a log line ("Prefill batch"); decode lines are 1 in decode_log_interval
    prefill, decode = steps_of(events, "prefill"), steps_of(events, "decode")
    assert len(prefill) == facts["prefill_batches"]
    assert sum(s["num_tokens"] for s in prefill) == facts["prefill_new_tokens"] == after["tokens"]["prefill_compute"]
    assert sum(s["raw_bs"] for s in decode) == after["tokens"]["decode"]
    sizes = logged_capture_sizes(facts)
    assert captures_by_stage(events) == sizes
    padded_as_sglang_pads(decode, sizes["decode"])
    padded_as_sglang_pads(prefill, sizes["prefill"])
    assert Counter((s["stage"], s["mode"]) for s in steps) == {("decode", "graph"): 49, ("decode", "padded"): 34,
                                                               ("prefill", "graph"): 15, ("prefill", "padded"): 3}
    capture_memory_agrees(events, facts)
    # Ctrl-C: SGLang's launcher kills its scheduler (kill_process_tree), which never ends its run
    assert [e["status"] for e in events if e["kind"] == "run_end"] == ["interrupted"]


@pytest.mark.parametrize("name", ["offline-traced", "serve-traced"])
def test_each_logs_import_agrees_with_the_trace_of_the_same_run(name):
    _run, events, log = recorded(name)
    [imported] = parse_sglang_text(log, path=f"{name}.log", mtime=0.0).runs
    # the offline program ended normally; the server was ready, served every request and was
    # stopped by Ctrl-C: a stop that was asked for, not a failure (docs/importing.md)
    assert imported.status == "finished" and imported.error is None
    assert bool(imported.run["config"].get("offline")) == (name == "offline-traced")
    assert not [e for e in imported.events if e["kind"] == "warning"]
    assert sorted((c["stage"], c["graph_bs"]) for c in imported.events if c["kind"] == "capture") \
        == sorted((c["stage"], c["graph_bs"]) for c in events if c["kind"] == "capture")
    # every prefill batch is a log line: the same steps, field by field
    def fields(steps):
        return [tuple(s[f] for f in STEP_FIELDS) for s in steps]
    assert fields(steps_of(imported.events, "prefill")) == fields(steps_of(events, "prefill", "mixed"))
    logged_decode, traced_decode = fields(steps_of(imported.events, "decode")), fields(steps_of(events, "decode"))
    interval = imported.run["config"]["decode_log_interval"]
    if interval == 1:
        assert logged_decode == traced_decode
    else:                                  # 1 decode batch in `interval` logged: each one the trace ran
        assert set(logged_decode) <= set(traced_decode) and len(logged_decode) == len(traced_decode) // interval
    # the start-up phases both have: each capture pass holds the trace's captures of its stage
    # (SGLang stamps whole seconds and times the pass from its begin line), and its memory
    phases = {e["phase"]: e for e in imported.events if e["kind"] == "phase"}
    for stage in ("prefill", "decode"):
        section = phases[f"capture.target.{stage}"]
        captures = [c for c in events if c["kind"] == "capture" and c["stage"] == stage]
        assert section["start_ts"] <= min(c["ts"] - c["duration_s"] for c in captures)
        assert max(c["ts"] for c in captures) < section["ts"] + 1
    [traced_phase] = [e for e in events if e["kind"] == "phase" and e["phase"] == "capture"]
    assert abs(phases["capture"]["mem_bytes"] - traced_phase["mem_bytes"]) <= 0.006 * 2 * GIB


class _Metrics(StubHandler):
    """SGLang's /metrics as it answered in the recorded run: just started (every counter at 0),
    before the client's requests, after them."""
    pages: list[str] = []

    def do_GET(self):
        self.answer(self.pages.pop(0).encode())


@pytest.fixture
def store(tmp_path):
    """A store the dashboard serves (its pages registered), and its URL."""
    from replayscope.app.server import create_server
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    url = f"sqlite:///{tmp_path / 'rs.db'}"
    opened = Store.open(url, upgrade=True)
    create_server(opened, Settings(run_services=False))
    yield opened, url
    opened.dispose()


def test_a_scrape_of_the_served_runs_metrics_counts_the_steps_the_trace_recorded(store):
    from replayscope.app.cli import main
    from replayscope.app.pages import run as run_page
    from replayscope.collector.models import queries

    store, db = store
    _run, events, _log = recorded("serve-traced")
    before = fixture("serve-traced.metrics-before.txt").read_text()
    after = fixture("serve-traced.metrics.txt").read_text()
    _Metrics.pages = [just_started(before), before, after]
    with serving(_Metrics) as url:
        assert main(["scrape", url, "--interval", "0.01", "--count", "3", "--db", db]) == 0
    [scraped] = queries.list_runs(store)
    steps = steps_of(events)
    assert scraped["source"] == "sglang-metrics" and scraped["steps"] == len(steps) == 101
    assert scraped["stage_steps"] == dict(Counter(s["stage"] for s in steps))
    # a graph pass, padded or not: the counter does not say which
    assert scraped["modes"] == {"graph": len(steps), "padded": 0, "eager": 0, "unknown": 0}
    assert scraped["decode_padded_ratio"] is None and scraped["padded_ratio"] is None
    data = run_page.page_data(store, scraped["run_id"])
    [note] = [part.children for part in run_page.header(data["summary"])
              if getattr(part, "id", None) == "run-source-note"]
    assert "Scraped from sglang's /metrics, which cannot show padding, why a step ran eager or each step's " \
           "batch size" in note
    assert data["stats"]["run-padded"] == "not in /metrics"
    assert 'those read "not in /metrics" or "not measured" here' in note        # as the padding tile reads
    # how each pass ran is SGLang's own count: no pass without a graph, as the trace saw
    assert data["stats"]["run-eager"] == "0.0%" and data["stats"]["run-steps"] == "101"


@pytest.fixture
def pages(store):
    from replayscope.app.pages import run, startup
    from tests.stores import ingest_events_file

    opened, _url = store

    def shown(name: str):
        run_id = read_events_file(fixture(f"{name}.jsonl")).run["run_id"]
        ingest_events_file(opened, fixture(f"{name}.jsonl"))
        return run.page_data(opened, run_id), startup.page_data(opened, run_id)
    return shown


def test_the_run_and_startup_pages_of_the_traced_server_say_what_sglang_did(pages):
    from replayscope.app.pages import run, startup
    data, start = pages("serve-traced")
    _run, events, log = recorded("serve-traced")
    facts = log_facts(log)
    assert data["summary"]["modes"] == {"graph": 64, "padded": 37, "eager": 0, "unknown": 0}
    assert data["stats"]["run-steps"] == "101"
    assert str(run.reason_cards(data["reasons"], data["evidence"])) == str(run.reason_cards([], data["evidence"]))
    header = str(run.header(data["summary"]))
    assert "Traced by replayscope trace" in header and "Run interrupted" in header
    rows = startup.capture_rows(start["captures"], start["unknown"], start["size_name"])
    sizes = {stage: [r["size"] for r in rows if r["stage"] == stage] for stage in ("prefill", "decode")}
    # prefill graphs are captured per token count, decode graphs per batch of requests
    assert sorted(sizes["prefill"], key=lambda s: int(s.split()[0])) \
        == [f"{n} tokens" for n in facts["capture_passes"]["target prefill"]["sizes"]]
    assert sorted(sizes["decode"], key=lambda s: int(s.split()[1])) \
        == [f"bs {n}" for n in facts["capture_passes"]["target decode"]["sizes"]]
    assert start["stats"]["startup-captures"] == str(len(rows)) == "64"
    # stopped by Ctrl-C after serving: the finding says what the trace recorded of its end, and
    # gives no start-up advice to a server that had started
    [end] = [e for e in events if e["kind"] == "run_end"]
    [stopped] = [f for f in start["findings"] if f["cause"] == "interrupted"]
    assert stopped["title"] == "The run was stopped after 101 steps"
    assert [e["text"] for e in stopped["evidence"]] == [f"status: interrupted: {end['error']}"]
    assert not any("startup" in action for actions in stopped["actions"].values() for action in actions)
