"""Small excerpts in the formats users post from real servers: each fixture's facts exactly,
and that what the excerpt does not say is absent (None), never 0."""

from __future__ import annotations

from replayscope.collector.importers import parse_vllm_text
from tests.importers.conftest import gib, kind, phases, rank_phases, run_end, sglang, utc, vllm


def test_a_vllm_log_holding_only_a_tp_failure_is_a_failed_partial_run():
    run = vllm("vllm_failure_only_tp.log")
    assert run.status == "failed"
    assert run.run["partial"] is True                     # the start is not in the excerpt
    # rank 0's root cause is the headline; it failed inside capture_model
    assert run_end(run) == {"status": "failed", "rank": "TP0", "phase": "capture", "graph_bs": None,
                            "error": "RuntimeError: CUDA error: operation failed due to a previous error during capture"}
    failed = {w["rank"]: w["message"] for w in kind(run, "warning") if w.get("code") == "rank_failed"}
    assert failed["TP1"] == ("TP1 failed in capture: RuntimeError: CUDA error: operation not permitted when "
                             "stream is capturing")
    assert failed["DP0"] == "DP0 failed in capture: EngineCore failed to start."
    assert kind(run, "run_end")[0]["ts"] == utc("2025-09-12 14:02:09")   # the last stamp of the excerpt
    assert run.run["time_provenance"] == "inferred"
    assert phases(run) == {} and kind(run, "capture") == []   # no size is named: no capture event
    assert run.run["config"]["capture_sizes"] == [] and run.run["config"]["capture_count"] is None


def test_a_traceback_right_after_sglang_capture_begin_fails_the_run_in_capture():
    run = sglang("sglang_v03_traceback_after_begin.log")
    assert run.status == "failed"                         # not interrupted
    assert run_end(run) == {"status": "failed", "rank": "TP0", "phase": "capture", "graph_bs": None,
                            "error": "RuntimeError: CUDA error: an illegal memory access was encountered"}
    assert run.run["partial"] is True
    assert run.run["config"]["mem_pool_avail_bytes"] == gib(8.38)
    assert phases(run) == {}                              # no capture time in the log: no capture phase


def test_v0_behind_a_compose_prefix_with_a_worker_process():
    run = vllm("vllm_v0_compose_tp2.log")
    assert run.status == "finished"
    assert run.run["model"] == "google/gemma-2-9b-it"
    # no date in the log: the year that puts the stamps closest before the file's date (2026-01-01);
    # vLLM 0.5.4 (mid-2024) does not rule 2025 out
    assert run.run["started_at"] == utc("2025-08-19 07:50:12")
    # "Loading model weights took 2.3463 GB" gives memory, not a duration: that stays unknown
    assert phases(run) == {"load_weights": (None, gib(2.3463)), "capture": (17.0, None)}
    assert rank_phases(run)[("pid 131", "capture")] == (18.0, None)   # the worker's own capture
    config = run.run["config"]
    assert (config["kv_blocks"], config["cpu_blocks"]) == (22982, 6241)
    assert config["tensor_parallel_size"] == 2
    assert "kv_tokens" not in config and "max_concurrency" not in config


def test_kubectl_timestamps_and_data_parallel_ranks_with_causes_of_eager_batches():
    run = sglang("sglang_kubectl_dp2.log")
    assert run.run["started_at"] == utc("2025-06-02 10:00:00")
    assert phases(run) == {"capture": (3.10, gib(0.50))}              # DP0 TP0's
    assert rank_phases(run)[("DP1 TP1", "capture")] == (3.40, gib(0.52))
    steps = [(e["stage"], e["mode"], e["raw_bs"], e["reason"], e.get("evidence")) for e in kind(run, "step")]
    assert steps == [
        ("prefill", "eager", 900, "prefill",   # 900 tokens (#new-token)
         "a prefill batch (cuda graph: False): its variable-length input has no captured graph"),
        ("decode", "eager", 20, "batch_too_large", "#running-req: 20 is above cuda_graph_max_bs (16)"),
        ("decode", "eager", 24, "batch_too_large", "#running-req: 24 is above cuda_graph_max_bs (16)"),
        ("decode", "graph", 7, None, None),
    ]
    assert run.ranks == ["DP0 TP0", "DP1 TP1"]


def test_vllm_json_logging_with_graph_memory_estimate_cap_and_compile_cache():
    run = vllm("vllm_json_logging.log")
    assert run.run["started_at"] == utc("2026-03-08 16:44:20") + 0.1
    assert run.run["time_provenance"] == "log"            # JSON stamps carry the year
    assert phases(run) == {"compile.cache_load_range_1_8192": (0.202, None), "compile": (2.18, None),
                           "kv_cache": (None, gib(17.36)), "capture": (7.0, gib(1.29))}
    config = run.run["config"]
    assert config["graph_mem_bytes"] == gib(1.31)                    # the pool's actual size
    assert config["graph_mem_estimate_bytes"] == gib(1.58)
    assert config["graph_profile"] == {"PIECEWISE": {"graphs": 51, "largest": 512},
                                       "FULL": {"graphs": 35, "largest": 256}}
    assert config["capture_size_cap"] == {"from": 512, "to": 352}
    assert (config["kv_tokens"], config["max_concurrency"]) == (188640, {"tokens_per_request": 131072,
                                                                         "requests": 5.23})
    assert (config["compile_cache_hits"], config["compile_cache_saves"]) == (1, 0)
    assert [w["code"] for w in kind(run, "warning")] == ["capture_sizes_capped"]


def test_a_bar_without_a_description_keeps_the_sizes_with_unknown_times():
    run = sglang("sglang_bar_forms.log")
    assert [(e["graph_bs"], e["duration_s"], e["status"]) for e in kind(run, "capture")] == [
        (8, None, "ok"), (4, None, "ok"), (2, None, "ok"), (1, None, "ok")]
    assert phases(run) == {"capture": (7.23, gib(0.93))}
    config = run.run["config"]
    assert (config["capture_count"], config["capture_timing"]) == (4, "partial")
    assert (config["max_total_num_tokens"], config["max_running_requests"]) == (46611, 256)
    assert config["available_gpu_mem_bytes"] == gib(0.53)


def test_a_compact_bar_names_the_last_size_only_and_the_total_stays_the_sections():
    run = sglang("sglang_compact_bar.log")
    caps = [(e["graph_bs"], e["duration_s"], e["pool_delta_bytes"]) for e in kind(run, "capture")]
    # not "bs 1 took 27 s": the four listed sizes, none with a time of its own
    assert caps == [(8, None, None), (4, None, None), (2, None, None), (1, None, gib(72.47) - gib(72.65))]
    assert phases(run) == {"capture": (27.58, gib(0.45))}
    assert run.run["config"]["capture_count"] == 4


def test_lines_without_years_take_one_from_a_dated_line():
    text = ("(EngineCore_DP0 pid=1) 2024-12-30 23:59:58,000 - INFO - autotuner.py:1 - start\n"
            "(EngineCore_DP0 pid=1) INFO 12-31 00:00:01 [gpu_model_runner.py:1] Graph capturing finished in 3 secs, "
            "took 0.10 GiB\n")
    run = parse_vllm_text(text, mtime=0.0).runs[0]
    assert kind(run, "phase")[0]["ts"] == utc("2024-12-31 00:00:01")
    assert run.run["time_provenance"] == "inferred"


def test_a_bar_fragment_followed_by_a_log_record_on_the_same_line():
    text = ("INFO 05-10 15:53:16 model_runner.py:1434] Capturing cudagraphs for decoding.\n"
            "Capturing CUDA graph shapes:  69%|######9   | 24/35 [00:10<00:05,  2.1it/s](VllmWorkerProcess pid=9) "
            "INFO 05-10 15:54:05 custom_all_reduce.py:226] Registering 4515 cuda graph addresses\n"
            "Capturing CUDA graph shapes: 100%|##########| 35/35 [00:49<00:00,  1.41s/it]\n"
            "INFO 05-10 15:54:05 model_runner.py:1562] Graph capturing finished in 49 secs, took 0.50 GiB\n")
    run = parse_vllm_text(text, mtime=0.0).runs[0]
    assert run.run["config"]["capture_passes"] == [{"pass": "graphs", "graphs_done": 35, "graphs": 35,
                                                           "stage": "decode", "sizes": None}]
    assert phases(run) == {"capture": (49.0, gib(0.50))}
    assert run.ranks == ["pid 9"]


def test_a_pasted_sglang_traceback_alone_is_a_failed_capture_with_the_first_error_as_its_cause():
    run = sglang("sglang_traceback_only_capture_oom.log")
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. "
           "GPU 7 has a total capacity of 95.00 GiB of which 301.50 MiB is free.")
    # the engine's "Capture cuda graph failed: ..." re-raise and its advice yield to the error it wraps
    assert run_end(run) == {"status": "failed", "error": oom, "rank": None, "phase": "capture", "graph_bs": None}
    assert run.run["partial"] is True and run.ranks == []
    assert [s["status"] for s in run.run["config"]["sections"]] == ["failed"]
    assert kind(run, "capture") == [] and phases(run) == {}          # no size, no time in the paste


def test_a_capture_that_hangs_on_data_parallel_ranks_is_interrupted_in_capture():
    run = sglang("sglang_dp_attention_capture_hang.log")
    assert run.status == "interrupted"
    assert run.ranks == ["DP0 TP0", "DP1 TP1"]
    assert "the capture of bs 32 (target.decode) was still running where the log ends" in run.warnings
    assert {w for w in run.warnings if w.startswith("the capture of target")} == {
        "the capture of target.decode on DP0 TP0 was still running where the log ends",
        "the capture of target.decode on DP1 TP1 was still running where the log ends"}
    assert [(s["rank"], s["status"]) for s in run.run["config"]["sections"]] == [
        ("DP0 TP0", "incomplete"), ("DP1 TP1", "incomplete")]
    assert run.run["config"]["capture_sizes"] == [1, 2, 4, 8, 12, 16, 24, 32]
    assert kind(run, "capture") == [] and phases(run) == {}           # nothing finished, nothing invented
