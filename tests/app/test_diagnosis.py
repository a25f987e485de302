"""The startup post-mortem: the outcome first, findings against expectations, each number
with its provenance, titles that agree with their evidence."""

import pytest

from replayscope.collector.analysis.diagnosis import RunFacts, capture_summary, diagnose, startup_seconds

GIB = 2**30


def phase(name, duration, start=None, mem=None, ts=None, seq=0, provenance=None):
    if ts is None and start is not None and duration is not None:
        ts = start + duration
    return {"phase": name, "duration_s": duration, "start_ts": start, "mem_bytes": mem, "ts": ts, "seq": seq,
            "provenance": provenance}


def capture(bs, duration, status="ok", error=None, variant="cuda", stage="decode", seq=0, ts=None):
    return {"graph_bs": bs, "stage": stage, "duration_s": duration, "status": status, "error": error,
            "variant": variant, "pool_bytes": None, "pool_delta_bytes": None, "seq": seq, "ts": ts}


def facts(**kw):
    kw.setdefault("backend", "cuda")
    return RunFacts(**kw)


def labels(diagnosis):
    return [f.label for f in diagnosis.findings]


def evidence_text(finding):
    return " | ".join(e.text for e in finding.evidence)


# -- the outcome first --------------------------------------------------------------------

def test_a_failed_run_without_failed_captures_leads_with_its_failure():
    # issue 13: "EngineCore failed to start" after a 0/67 capture bar said "Nothing stands out"
    run = facts(source="vllm-log", status="failed", error="RuntimeError: Engine core initialization failed.",
                failure={"ts": 120.0, "error": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                                                "2.00 GiB", "rank": None, "phase": None, "graph_bs": None},
                config={"capture_passes": [{"pass": "mixed prefill-decode, PIECEWISE", "graphs_done": 0,
                                            "graphs": 67}]},
                phases=[phase("load_weights", 30.0, start=10.0, mem=15 * GIB, provenance="log")])
    first = diagnose(run).findings[0]
    assert first.label == "failure/oom" and first.severity == "error"
    assert first.title == "The run failed: out of memory during capture"
    assert "error: torch.OutOfMemoryError: CUDA out of memory" in evidence_text(first)
    assert first.evidence[0].provenance == "log"
    where = next(e for e in first.evidence if e.text.startswith("where:"))
    assert where.provenance == "inferred"           # from the unfinished capture bar, not stated
    assert "--gpu-memory-utilization" in " ".join(first.actions["vllm"])
    assert "--mem-fraction-static" in " ".join(first.actions["sglang"])


def test_the_failure_says_where_from_the_run_end():
    run = facts(status="failed", failure={"ts": 5.0, "error": "NCCL error: unhandled cuda error", "rank": "TP1",
                                          "phase": "capture", "graph_bs": 24})
    first = diagnose(run).findings[0]
    assert first.title == "The run failed: a collective between ranks failed (NCCL) during capture at bs 24 on TP1"
    assert first.where["rank"] == "TP1"


def test_a_finished_run_with_a_failed_capture_leads_with_it():
    caps = [capture(32, 0.05), capture(16, 0.08, status="failed",
                                       error="AcceleratorError: CUDA error: operation failed due to a previous "
                                             "error during capture"), capture(8, 0.09)]
    degrades = [{"from": "cuda", "to": "eager", "graph_bs": 16, "error": caps[1]["error"]}]
    first = diagnose(facts(captures=caps, degrades=degrades)).findings[0]
    assert first.label == "failure/capture_invalidated"
    assert first.title.endswith("when capturing bs 16; the run dropped it and went on")


def test_a_run_stopped_during_startup_says_so():
    run = facts(source="sglang-log", status="interrupted", steps=0,
                phases=[phase("load_weights", 8.0, start=0.0, mem=15 * GIB, seq=0)],
                captures=[capture(32, 2.0, seq=1, ts=10.0)])
    first = diagnose(run).findings[0]
    assert first.label == "interrupted"
    assert first.title == "The log ends before the server was ready (during capture after bs 32)"


def test_a_run_stopped_after_serving_is_listed_last_as_information():
    run = facts(status="interrupted", steps=500, phases=[phase("load_weights", 60.0, start=0.0, mem=16 * GIB)])
    found = diagnose(run).findings
    assert found[-1].label == "interrupted" and found[-1].severity == "info"
    assert found[0].label == "slow_weight_load"


# -- findings against expectations --------------------------------------------------------

def test_a_tiny_load_that_took_seconds_is_set_up_not_a_large_model():
    # issue 13: the demo's "A very large model" with "0.6 MiB of weights at 0.1 MiB/s"
    run = facts(backend="static", config={"weights": "random"},
                phases=[phase("load_weights", 6.2, start=0.0, mem=625_920)])
    [first] = diagnose(run).findings
    assert first.cause == "load_setup"
    assert first.title == "Model set-up took 6.20 s for 611 KiB of generated weights: the time is set-up, not reading"
    assert "large" not in first.title.lower()


def test_a_plausible_load_is_not_a_finding():
    # issue 13: the bundled H200 run loaded 2.3 GiB at 575.7 MiB/s and was called "Slow weight load"
    run = facts(phases=[phase("load_weights", 4.09, start=0.0, mem=2_471_628_800), phase("capture", 0.6, start=4.1)])
    assert "slow_weight_load" not in labels(diagnose(run))


def test_a_load_slower_than_network_storage_is_slow_with_both_expectations():
    run = facts(phases=[phase("load_weights", 180.0, start=0.0, mem=16 * GIB, provenance="log")], source="vllm-log")
    [first] = diagnose(run).findings
    assert first.title == "Slow weight load: 16.0 GiB at 91.0 MiB/s, slower than network storage"
    assert first.seconds == pytest.approx(180.0 - 3.0 - 8.0)
    assert first.evidence[0].provenance == "log"
    assert first.evidence[1].provenance == "estimated"
    assert "8.00 s at local NVMe speed" in first.evidence[1].text and "1 min 22 s at network-storage" in first.evidence[1].text


def test_sizes_given_only_as_a_count_are_still_many():
    # issue 13: "35 sizes captured in 57 s" was "few sizes" because the bar gave a count
    run = facts(source="vllm-log", config={"capture_passes": [{"pass": "graphs", "graphs_done": 35, "graphs": 35}]},
                phases=[phase("load_weights", 5.0, start=0.0, mem=14 * GIB), phase("capture", 57.0, start=6.0)])
    first = diagnose(run).findings[0]
    assert first.cause == "too_many_sizes"
    assert first.title == "35 capture sizes took 57.0 s"
    assert first.seconds == pytest.approx(57.0 / 35 * 27)
    assert {e.provenance for e in first.evidence} == {"log", "inferred", "estimated"}


def test_unused_sizes_are_named_when_the_traffic_is_known():
    caps = [capture(bs, 1.0) for bs in (1, 2, 4, 8, 16, 32)]
    run = facts(captures=caps, served={"decode": {1, 2, 4}}, phases=[phase("capture", 6.0, start=0.0)])
    [first] = diagnose(run).findings
    assert first.title == "3 of 6 capture sizes never served a step"
    assert first.seconds == 3.0
    assert "8, 16, 32" in evidence_text(first)


def test_compile_is_reported_with_its_own_time():
    run = facts(config={"compile": True},
                phases=[phase("load_weights", 1.0, start=0.0, mem=2 * GIB), phase("compile", 30.0, start=1.0),
                        phase("capture", 31.0, start=1.0)],
                captures=[capture(bs, 7.7, variant="compile+cuda") for bs in (1, 2, 4, 8)])
    first = diagnose(run).findings[0]
    assert first.cause == "torch_compile" and first.title == "torch.compile added 30.0 s to the startup"
    assert "-O.mode=0" in " ".join(first.actions["vllm"])
    assert "--enable-torch-compile" in " ".join(first.actions["sglang"])


def test_one_slow_size_is_found_against_the_others_and_the_expectation():
    caps = [capture(bs, 0.1) for bs in (1, 2, 4, 16)] + [capture(8, 3.0)]
    run = facts(captures=caps, phases=[phase("load_weights", 1.0, start=0.0, mem=GIB), phase("capture", 3.4, start=1.0)])
    first = diagnose(run).findings[0]
    assert first.cause == "slow_size"
    assert first.title == "decode bs 8 took 3.00 s to capture, 30x the median of the other decode sizes (100 ms)"
    assert first.seconds == pytest.approx(3.0 - 0.12)


def test_a_slow_prefill_size_of_an_engine_is_named_in_tokens():
    """SGLang captures its prefill graphs per token count: the finding says tokens, not bs."""
    caps = [capture(n, 0.1, stage="prefill") for n in (512, 1024, 2048, 4096)] + [capture(8192, 3.0, stage="prefill")]
    run = facts(source="sglang-log", captures=caps,
                phases=[phase("load_weights", 1.0, start=0.0, mem=GIB), phase("capture", 3.5, start=1.0)])
    first = diagnose(run).findings[0]
    assert first.cause == "slow_size"
    assert first.title.startswith("prefill 8192 tokens took 3.00 s to capture")
    assert first.evidence[0].text.startswith("prefill 8192 tokens: 3.00 s against a median")


def test_every_capture_slow_for_the_model_size():
    caps = [capture(bs, 2.0) for bs in (1, 2, 4, 8)]
    run = facts(captures=caps, phases=[phase("load_weights", 2.0, start=0.0, mem=2 * GIB), phase("capture", 8.0, start=2.0)])
    first = diagnose(run).findings[0]
    assert first.cause == "slow_captures"
    assert "2.00 s per size" in first.title and "2.00 GiB" in first.title


def test_the_cpu_stand_in_is_not_judged_against_gpu_expectations():
    caps = [capture(bs, 2.0, variant="static") for bs in (1, 2, 4, 8)]
    run = facts(backend="static", captures=caps, phases=[phase("load_weights", 2.0, start=0.0, mem=2 * GIB)])
    d = diagnose(run)
    assert "slow_captures" not in labels(d)
    assert d.stand_in and d.timing_note.startswith("CPU stand-in")


def test_time_between_phases_that_nothing_explains_is_a_finding():
    run = facts(source="vllm-log", started_at=0.0,
                phases=[phase("load_weights", 10.0, start=1.0, mem=15 * GIB), phase("kv_cache", 0.0, start=42.0),
                        phase("capture", 6.0, start=43.0)])
    first = diagnose(run).findings[0]
    assert first.cause == "unaccounted"
    assert first.title == ("Unaccounted: 31.0 s between weight load and KV cache allocation that no log line "
                           "explains")
    assert first.seconds == pytest.approx(31.0)
    assert first.evidence[0].provenance == "inferred"


def test_actual_graph_memory_above_the_estimate_is_an_oom_risk():
    run = facts(source="vllm-log", config={"graph_mem_bytes": 3 * GIB, "graph_mem_estimate_bytes": GIB})
    [finding] = diagnose(run).findings
    assert finding.cause == "graph_memory" and finding.seconds is None
    assert finding.title == ("Graph memory 3.00 GiB against 1.00 GiB estimated: the difference came out of "
                             "the headroom")


def test_findings_rank_by_seconds_over_the_expectation():
    run = facts(started_at=0.0, config={"compile": True},
                phases=[phase("load_weights", 60.0, start=0.0, mem=16 * GIB), phase("compile", 20.0, start=60.0),
                        phase("capture", 1.0, start=80.0)])
    found = diagnose(run).findings
    assert [f.cause for f in found] == ["slow_weight_load", "torch_compile"]
    assert found[0].seconds == pytest.approx(60.0 - 11.0)
    assert found[0].seconds > found[1].seconds


def test_every_evidence_line_names_a_known_provenance():
    from replayscope.contract.wire import PROVENANCES

    run = facts(source="vllm-log", status="failed", error="TimeoutError: RPC call to execute_model timed out.",
                started_at=0.0, config={"capture_passes": [{"graphs": 67, "graphs_done": 67}]},
                phases=[phase("load_weights", 100.0, start=5.0, mem=30 * GIB), phase("capture", 70.0, start=140.0)])
    d = diagnose(run)
    assert d.findings[0].label == "failure/timeout"
    assert all(e.provenance in PROVENANCES for f in d.findings for e in f.evidence)


def test_nothing_to_report_on_a_quick_clean_startup():
    caps = [capture(bs, 0.1) for bs in (1, 2, 4, 8)]
    run = facts(started_at=0.0, captures=caps, served={"decode": {1, 2, 4, 8}},
                phases=[phase("load_weights", 2.0, start=0.0, mem=GIB), phase("capture", 0.4, start=2.0)])
    assert diagnose(run).findings == []


# -- what the log says about the capture --------------------------------------------------

def test_capture_summary_takes_the_logs_total_when_there_are_no_rows():
    run = facts(source="vllm-log", config={"capture_sizes": [1, 2, 4, 8]}, phases=[phase("capture", 6.0)])
    summary = capture_summary(run)
    assert summary["total_s"] == 6.0 and summary["total_provenance"] == "log"
    assert summary["sizes"] == [1, 2, 4, 8] and summary["count"] == 4


def test_capture_summary_of_a_run_that_captured_nothing_is_empty_not_zero():
    summary = capture_summary(facts(source="vllm-log"))
    assert summary["total_s"] is None and summary["count"] == 0 and summary["ok"] is None


def test_startup_seconds_uses_timestamps_when_every_phase_has_them():
    assert startup_seconds([phase("a", 1.0, start=10.0), phase("b", 2.0, start=10.5)], []) == 2.5
    assert startup_seconds([phase("a", 1.0), phase("b", 2.0)], []) == 3.0
    assert startup_seconds([], [capture(1, 0.5)]) == 0.5
    assert startup_seconds([phase("a", None, ts=3.0)], [capture(1, None)]) == 0
