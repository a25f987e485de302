"""A real SGLang (0.5.17: FlashAttention 3 from sgl-kernel, decode graphs ``full``, prefill graphs
``breakable``, its overlap scheduler on) on a GPU, traced by ``replayscope trace``, compared with
what the engine says about itself — its log ("Capture target decode CUDA graph begin. ... bs=[...]",
"... end. elapsed=T s, mem usage=M GB", one "Prefill batch" line per prefill batch with its new and
cached tokens), its ``/metrics`` when serving (``sglang:cuda_graph_passes_total``: one per forward
pass, by mode; prompt and generation token totals) — and with what the program asked for (exact
output lengths). Skipped where SGLang is not importable.

Run on the device machine (docs/engines.md says how SGLang is brought there):
``python3 -m pytest -q -m gpu tests/engines/test_sglang_gpu.py``. With ``REPLAYSCOPE_ENGINE_OUT=DIR``
the runs' logs, events and metrics stay in DIR.
"""

from __future__ import annotations


import pytest

from benchmarks import sglang_harness as harness

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not harness.sglang_available(), reason="SGLang is not importable here")]

GIB = 1 << 30


@pytest.fixture(scope="module")
def offline(model, out):
    run = harness.run_offline(model, out, "sglang-offline-traced", True)
    assert run.returncode == 0, run.log.read_text()[-3000:]
    return run, *harness.scheduler_run(run.events)


def steps_of(events, *stages):
    return [e for e in events if e["kind"] == "step" and (not stages or e["stage"] in stages)]


def test_offline_answers_are_exact_and_the_engine_agrees(offline):
    run, _record, _events = offline
    asked, engine = run.report["asked"], run.report["engine"]
    assert run.report["produced"]["exact"]
    assert engine["completion_tokens"] == asked["output_tokens"]
    assert engine["prompt_tokens"] == asked["prompt_tokens"]


def test_offline_prefill_steps_are_the_logs_prefill_batches(offline):
    run, _record, events = offline
    prefill = steps_of(events, "prefill", "mixed")
    assert len(prefill) == run.log_facts["prefill_batches"]
    assert sum(s["num_tokens"] for s in prefill) == run.log_facts["prefill_new_tokens"] \
        == run.report["asked"]["prompt_tokens"] - run.log_facts["prefill_cached_tokens"]


def test_offline_decode_steps_run_the_tokens_asked_for(offline):
    run, _record, events = offline
    decode, asked = steps_of(events, "decode"), run.report["asked"]
    # SGLang logs every decode batch (decode_log_interval=1) with its rows
    assert len(decode) == run.log_facts["decode_batches"]
    assert sum(s["raw_bs"] for s in decode) == run.log_facts["decode_rows"]
    # the first output token of each request comes out of its prefill forward; the overlap
    # scheduler launches batch N+1 before reading batch N's tokens, so a request whose last token
    # came out of batch N is in batch N+1 too: one decode row more per request (recorded on the H200)
    assert run.log_facts["decode_rows"] == asked["decode_tokens"] + asked["requests"]
    assert {s["mode"] for s in decode} <= {"graph", "padded"}
    assert all(s["padded_tokens"] == s["graph_bs"] - s["raw_bs"] for s in decode if s["mode"] == "padded")


def test_offline_captures_are_the_logs_passes_one_per_size(offline):
    run, _record, events = offline
    passes = run.log_facts["capture_passes"]
    captures = [e for e in events if e["kind"] == "capture"]
    assert all(c["status"] == "ok" for c in captures)
    decode = sorted(c["graph_bs"] for c in captures if c["stage"] == "decode")
    assert decode == sorted(passes["target decode"]["sizes"])
    prefill = sorted(c["graph_bs"] for c in captures if c["stage"] != "decode")
    assert prefill == sorted(passes.get("target prefill", {}).get("sizes", []))
    [phase] = [e for e in events if e["kind"] == "phase" and e["phase"] == "capture"]
    # SGLang measures free device memory before minus after each pass, in GiB rounded to 0.01
    logged = sum(p["mem_gb"] for p in passes.values())
    assert abs(phase["mem_bytes"] / GIB - logged) <= 0.006 * len(passes)


def test_the_offline_runs_own_log_imports_as_a_finished_run_agreeing_with_the_trace(offline):
    from replayscope.collector.importers import parse_sglang_text
    run, _record, events = offline
    [imported] = parse_sglang_text(run.log.read_text(errors="replace"), path=str(run.log), mtime=0.0).runs
    assert imported.status == "finished" and imported.run["config"]["offline"] is True
    traced_captures = sorted((c["stage"], c["graph_bs"]) for c in events if c["kind"] == "capture")
    imported_captures = sorted((c["stage"], c["graph_bs"]) for c in imported.events if c["kind"] == "capture")
    assert imported_captures == traced_captures
    fields = ("stage", "mode", "raw_bs", "graph_bs", "num_tokens", "padded_tokens")
    imported_prefill = [tuple(e[f] for f in fields) for e in imported.events
                        if e["kind"] == "step" and e["stage"] == "prefill"]
    assert imported_prefill == [tuple(e[f] for f in fields) for e in steps_of(events, "prefill", "mixed")]
    # Engine.shutdown SIGKILLs the scheduler at the program's normal end: finished, as the log imports
    [end] = [e for e in events if e["kind"] == "run_end"]
    assert end["status"] == "finished"
    assert any(e["kind"] == "warning" and e.get("code") == "stopped_by_parent" for e in events)


def test_graphs_off_every_step_is_eager_as_graphs_disabled(model, out):
    run = harness.run_offline(model, out, "sglang-offline-eager-traced", True, "--disable-cuda-graph")
    assert run.returncode == 0, run.log.read_text()[-3000:]
    _record, events = harness.scheduler_run(run.events)
    steps = steps_of(events)
    assert run.report["produced"]["exact"] and not run.log_facts["capture_passes"]
    assert {(s["mode"], s["reason"]) for s in steps_of(events, "decode")} == {("eager", "graphs_disabled")}
    assert not [e for e in events if e["kind"] == "capture"] and steps


def test_serve_steps_equal_its_counters_and_ctrl_c_ends_the_run(model, out):
    run = harness.run_serve(model, out, "sglang-serve-traced", True)
    _record, events = harness.scheduler_run(run.events)
    steps = steps_of(events)
    engine, window, asked = run.report["engine"], run.report["engine_for_client"], run.report["asked"]
    assert run.report["produced"]["exact"] and not run.report["errors"]
    # one cuda_graph_passes_total increment per forward pass, the server's warm-up included
    assert len(steps) == engine["steps"]
    graph_passes = engine["passes"].get("decode_cuda_graph", 0) + engine["passes"].get("prefill_cuda_graph", 0)
    assert len([s for s in steps if s["mode"] != "eager"]) == graph_passes
    # the counters between the client's two scrapes are its requests alone
    assert window["prompt_tokens"] == asked["prompt_tokens"]
    assert window["generation_tokens"] == asked["output_tokens"]
    ends = [e for e in events if e["kind"] == "run_end"]
    assert [e["status"] for e in ends] == ["interrupted"]
