"""A real vLLM (0.25.0, model runner V2, its defaults: asynchronous scheduling, FlashAttention,
FULL_AND_PIECEWISE graphs) on a GPU, traced by ``replayscope trace``, compared with what the engine
says about itself — its ``vllm:iteration_tokens_total`` (one observation per engine step: steps and
tokens), its log lines (capture passes and counts, "Graph capturing finished in N secs, took X GiB")
— and with what the program asked for (exact output lengths). Skipped where vLLM is not importable.

Run on the device machine (docs/engines.md says how vLLM is brought there):
``python3 -m pytest -q -m gpu tests/engines``. With ``REPLAYSCOPE_ENGINE_OUT=DIR`` the runs' logs,
events and metrics stay in DIR (the CPU tests in tests/importers import those logs).
"""

from __future__ import annotations


import pytest

from benchmarks import vllm_harness as harness

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not harness.vllm_available(), reason="vLLM is not importable here")]

GIB = 1 << 30


@pytest.fixture(scope="module")
def offline(model, out):
    run = harness.run_offline(model, out, "offline-traced", True)
    assert run.returncode == 0, run.log.read_text()[-3000:]
    return run, *harness.engine_core_run(run.events)


def steps_of(events):
    return [e for e in events if e["kind"] == "step"]


def test_offline_steps_and_tokens_are_the_engines_own(offline):
    run, _record, events = offline
    steps = steps_of(events)
    assert run.report["produced"]["exact"]
    # the engine's own count of its steps; its token sum counts each request's first sampled
    # token too (prompt + generated): the forwards ran that minus one token per request
    assert len(steps) == run.report["engine"]["iteration_steps"]
    assert sum(s["num_tokens"] for s in steps) == run.report["asked"]["forward_tokens"] \
        == run.report["engine"]["iteration_tokens"] - run.report["asked"]["requests"]


def test_offline_captures_are_the_logs_passes_one_per_mode_and_size(offline):
    run, _record, events = offline
    captures = [e for e in events if e["kind"] == "capture"]
    by_mode: dict[str, list] = {}
    for c in captures:
        by_mode.setdefault(c["variant"].split(",")[0].removeprefix("vllm "), []).append(c)
    assert {mode: len(cs) for mode, cs in by_mode.items()} == run.log_facts["capture_passes"]
    assert {c["stage"] for c in by_mode["PIECEWISE"]} == {"mixed"}
    assert {c["stage"] for c in by_mode["FULL"]} == {"decode"}
    assert all(c["status"] == "ok" for c in captures)
    [phase] = [e for e in events if e["kind"] == "phase" and e["phase"] == "capture"]
    # measured as vLLM measures it (free device memory before minus after): its log rounds to 0.01 GiB
    assert abs(phase["mem_bytes"] / GIB - run.log_facts["capture_gib"]) <= 0.006


def test_offline_every_eager_step_has_the_dispatchers_reason_and_every_piecewise_step_a_note(offline):
    _run, _record, events = offline
    steps = steps_of(events)
    captures = [e for e in events if e["kind"] == "capture"]
    largest_mixed = max(c["graph_bs"] for c in captures if c["stage"] == "mixed")
    eager = [s for s in steps if s["mode"] == "eager"]
    assert eager and all(s["reason"] == "batch_too_large" and s["raw_bs"] > largest_mixed for s in eager)
    piecewise = [s for s in steps if s["mode"] != "eager" and s["stage"] == "mixed"]
    assert all(s["evidence"].startswith("PIECEWISE, not FULL") for s in piecewise)
    decode = [s for s in steps if s["stage"] == "decode"]
    assert decode and {s["mode"] for s in decode} <= {"graph", "padded"}
    assert all(s["padded_tokens"] == s["graph_bs"] - s["raw_bs"] for s in decode if s["mode"] == "padded")


def test_batches_above_the_largest_capture_size_run_eager_as_batch_too_large(model, out):
    run = harness.run_offline(model, out, "offline-cap16-traced", True, "--max-capture-size", "16")
    assert run.returncode == 0, run.log.read_text()[-3000:]
    _record, events = harness.engine_core_run(run.events)
    steps = steps_of(events)
    assert len(steps) == run.report["engine"]["iteration_steps"]
    above = [s for s in steps if s["raw_bs"] > 16]
    assert above and all(s["mode"] == "eager" and s["reason"] == "batch_too_large" for s in above)
    assert all(s["mode"] != "eager" for s in steps if s["raw_bs"] <= 16)


def test_enforce_eager_steps_are_graphs_disabled_and_nothing_is_captured(model, out):
    run = harness.run_offline(model, out, "offline-eager-traced", True, "--enforce-eager")
    assert run.returncode == 0, run.log.read_text()[-3000:]
    _record, events = harness.engine_core_run(run.events)
    steps = steps_of(events)
    assert len(steps) == run.report["engine"]["iteration_steps"]
    assert {(s["mode"], s["reason"]) for s in steps} == {("eager", "graphs_disabled")}
    assert not [e for e in events if e["kind"] == "capture"]


def test_serve_steps_equal_its_metrics_and_ctrl_c_ends_the_run(model, out):
    run = harness.run_serve(model, out, "serve-traced", True)
    _record, events = harness.engine_core_run(run.events)
    steps = steps_of(events)
    engine = run.report["engine"]
    assert run.report["produced"]["exact"] and not run.report["errors"]
    assert len(steps) == engine["iteration_steps"]
    assert sum(s["num_tokens"] for s in steps) == run.report["asked"]["forward_tokens"] \
        == engine["iteration_tokens"] - run.report["asked"]["requests"]
    ends = [e for e in events if e["kind"] == "run_end"]
    assert [e["status"] for e in ends] == ["interrupted"]


def test_offline_start_up_phases_are_the_ones_vllm_logs(offline):
    """The worker's start-up timed by the trace against vLLM's own lines: "Model loading took …
    and X seconds" (the model runner's load, inside the worker's) and "init engine (profile,
    create kv cache, warmup model) took X s" (the EngineCore's, from the profile to the warm-up)."""
    run, _record, events = offline
    phases = {e["phase"]: e for e in events if e["kind"] == "phase"}
    assert {"load_weights", "profile", "kv_cache", "warmup", "engine_init", "capture"} <= set(phases)
    facts = run.log_facts
    assert facts["model_loading_s"] - 0.05 <= phases["load_weights"]["duration_s"] <= facts["model_loading_s"] + 1.0
    assert abs(phases["engine_init"]["duration_s"] - facts["init_engine_s"]) <= max(0.5, 0.05 * facts["init_engine_s"])
    assert phases["kv_cache"]["mem_bytes"] > 0              # the KV cache it allocated, measured as free memory
