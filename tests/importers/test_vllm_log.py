"""vLLM log import: each fixture's figures, exactly."""

from __future__ import annotations

from replayscope.collector.importers import parse_vllm_text
from tests.importers.conftest import (MTIME, gib, kind, parsed, phases, rank_phases, read_fixture, run_end,
                                      the_only_run, utc)


def parse(name: str):
    return parsed(parse_vllm_text, name)


def only_run(name: str):
    return the_only_run(parse(name))


def test_old_wording_v0():
    run = only_run("vllm_old.log")
    assert run.run["model"] == "mistralai/Mistral-7B-Instruct-v0.3"
    assert run.run["backend"] == "cuda_graph"
    # no year in the stamp: vLLM 0.6 was developed from mid-2024, so Feb 3 is 2025's
    assert run.run["started_at"] == utc("2025-02-03 04:05:06")
    assert run.run["time_provenance"] == "inferred"
    assert run.run["partial"] is False
    assert phases(run) == {
        "load_weights": (4.50, gib(13.5083)),   # "Loading weights took", memory from the V0 line
        "capture": (12.0, None),                # "Graph capturing finished in 12 secs."
    }
    config = run.run["config"]
    assert config["capture_passes"] == [{"pass": "graphs", "graphs_done": 35, "graphs": 35, "stage": "decode",
                                         "sizes": None}]
    assert (config["capture_sizes"], config["capture_count"]) == ([], 35)   # the bar's count; no list printed
    assert (config["kv_blocks"], config["cpu_blocks"]) == (27000, 2048)      # "# GPU blocks: 27000, ..."
    assert config["vllm_version"] == "0.6.3"
    assert kind(run, "capture") == []           # vLLM logs no per-size capture
    assert run.status == "finished"


def test_new_wording_with_process_prefixes():
    run = only_run("vllm_new.log")
    assert (run.run["model"], run.run["device"]) == ("Qwen/Qwen3-8B", "cuda")
    assert run.run["backend"] == "full_and_piecewise"
    assert phases(run) == {
        "load_weights": (6.5, gib(15.27)),      # "Model loading took ... GiB memory and ... seconds"
        "kv_cache": (None, gib(50.25)),         # vLLM does not time the KV cache
        "capture": (3.0, gib(0.45)),
        "engine_init": (12.40, None),           # "(compilation: 0.00 s)": no compile phase
    }
    config = run.run["config"]
    assert config["graph_mem_bytes"] == gib(0.58)            # the pool's actual size wins over "took"
    assert config["graph_mem_estimate_bytes"] == gib(0.60)
    assert config["capture_sizes"] == [1, 2, 4, 8]
    assert config["kv_tokens"] == 365904
    assert config["max_concurrency"] == {"tokens_per_request": 40960, "requests": 8.93}
    assert config["max_capture_size"] == 8
    assert "graph_profile" not in config and "compile_cache_hits" not in config   # not in this log
    assert config["capture_passes"] == [
        {"pass": "mixed prefill-decode, PIECEWISE", "graphs_done": 4, "graphs": 4, "stage": "mixed",
         "sizes": [1, 2, 4, 8]},
        {"pass": "decode, FULL", "graphs_done": 3, "graphs": 3, "stage": "decode", "sizes": [1, 2, 4]}]
    load = kind(run, "phase")[0]
    assert (load["ts"], load["start_ts"]) == (utc("2025-08-20 13:00:10"), utc("2025-08-20 13:00:10") - 6.5)
    assert load["rank"] == "DP0"
    assert run.status == "finished"


def test_compile_phases_total_and_parts():
    run = only_run("vllm_compile.log")
    assert run.run["backend"] == "piecewise"
    assert phases(run) == {
        "load_weights": (5.8, gib(14.99)),
        "compile.dynamo": (4.50, None),
        "compile.range_1_8192": (9.80, None),
        "compile.dynamic_shape": (1.25, None),
        "compile": (15.55, None),               # "torch.compile took 15.55 s in total"
        "kv_cache": (None, gib(48.0)),
        "capture": (2.0, gib(0.25)),
        "engine_init": (23.0, None),
    }
    assert run.run["config"]["compile"] is True


def test_capture_oom_fails_the_size_being_captured_and_the_run():
    run = only_run("vllm_capture_oom.log")
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. "
           "GPU 0 has a total capacity of 79.19 GiB of which 301.00 MiB is free.")
    # sizes [1, 2, 4, 8] are captured largest first; 2 of 4 done -> bs 2 failed
    assert [(c["graph_bs"], c["stage"], c["status"], c["error"]) for c in kind(run, "capture")] == [
        (2, "mixed", "failed", oom)]
    assert phases(run) == {"load_weights": (38.0, gib(65.0)), "kv_cache": (None, gib(3.5))}
    assert run.status == "failed"
    assert run.error == oom
    # the root cause, on the rank that printed it, in the capture phase, at bs 2
    assert run_end(run) == {"status": "failed", "error": oom, "rank": "DP0", "phase": "capture", "graph_bs": 2}


def test_restart_in_one_file_gives_two_runs():
    result = parse("vllm_restart.log")
    first, second = result.runs
    assert (first.run["backend"], second.run["backend"]) == ("eager", "cuda_graph")
    assert phases(first) == {"load_weights": (5.5, gib(14.25)), "kv_cache": (None, gib(40.0)),
                             "engine_init": (3.2, None)}
    assert phases(second) == {"load_weights": (4.75, gib(14.25)), "kv_cache": (None, gib(39.5)),
                              "capture": (5.0, gib(0.31)), "engine_init": (8.8, None)}
    assert (first.status, second.status) == ("finished", "finished")
    assert first.run["started_at"] == utc("2025-04-01 08:00:00")
    assert second.run["started_at"] == utc("2025-04-01 09:05:00")
    assert first.run["run_id"].endswith("-0") and second.run["run_id"].endswith("-1")


def test_multi_rank_log_keeps_every_rank_with_rank_zero_as_the_headline():
    run = only_run("vllm_multirank.log")
    assert phases(run) == {
        "load_weights": (29.2, gib(65.50)),     # Worker_TP0's
        "kv_cache": (None, gib(8.0)),
        "capture": (4.0, gib(0.50)),
        "engine_init": (10.0, None),            # EngineCore_DP0's: TP0 never printed it
    }
    every = rank_phases(run)
    assert every[("TP1", "load_weights")] == (28.9, gib(65.60))   # TP1's own figures are kept
    assert every[("TP1", "capture")] == (5.0, gib(0.52))
    assert every[("TP1", "kv_cache")] == (None, gib(7.90))
    assert run.ranks == ["DP0", "TP0", "TP1"]
    assert run.run["config"]["rank_headline"]["capture"] == "TP0"


def test_ansi_colours_and_carriage_return_progress_bars():
    run = only_run("vllm_ansi_tqdm.log")
    assert run.run["model"] == "google/gemma-2-9b-it"
    assert run.run["backend"] == "full"
    assert phases(run) == {"load_weights": (4.25, gib(17.0)), "kv_cache": (None, gib(30.0)),
                           "capture": (2.0, gib(0.20))}
    assert run.run["config"]["capture_passes"] == [{"pass": "decode, FULL", "graphs_done": 3, "graphs": 3,
                                                            "stage": "decode", "sizes": [1, 2, 4]}]
    assert run.status == "finished"


def test_cudagraph_metrics_tables_become_per_size_step_counts():
    run = only_run("vllm_cudagraph_metrics.log")
    rows = [(e["ts"], e["stage"], e["mode"], e["reason"], e["count"], e["num_tokens"], e["padded_tokens"],
             e["interval_s"], e["raw_bs"], e["graph_bs"]) for e in kind(run, "step_counts")]
    t1, t2 = utc("2026-11-11 11:01:00"), utc("2026-11-11 11:01:10")   # vLLM 0.13: late 2025 on
    assert rows == [
        (t1, "decode", "padded", None, 20, 60, 20, None, 3, 4),       # FULL under FULL_AND_PIECEWISE
        (t1, "decode", "graph", None, 10, 40, 0, None, 4, 4),
        (t1, "mixed", "eager", "batch_too_large", 2, 200, 0, None, 100, None),   # 100 tokens > largest size 8
        (t1, "mixed", "padded", None, 5, 30, 10, None, 6, 8),         # PIECEWISE: decode or mixed, not said
        (t2, "decode", "graph", None, 7, 7, 0, 10.0, 1, 1),
        (t2, "mixed", "eager", "unknown", 4, 12, 0, 10.0, 3, None),
    ]
    too_large = kind(run, "step_counts")[2]
    assert (too_large["provenance"], too_large["evidence"]) == (
        "inferred", "100 tokens is above the largest captured size 8")
    assert "provenance" not in kind(run, "step_counts")[5]          # unknown: nothing inferred
    assert run.summary()["steps"] == {"graph": 17, "padded": 25, "eager": 6}
    assert run.summary()["reasons"] == {"batch_too_large": 2, "unknown": 4}


def test_enforce_eager_table_rows_are_graphs_disabled():
    text = read_fixture("vllm_cudagraph_metrics.log").replace(
        "CUDAGraphMode.FULL_AND_PIECEWISE", "CUDAGraphMode.NONE")
    run = parse_vllm_text(text, mtime=MTIME).runs[0]
    reasons = {e["reason"] for e in kind(run, "step_counts") if e["mode"] == "eager"}
    assert reasons == {"graphs_disabled"}


def test_truncated_vllm_log_is_interrupted():
    text = read_fixture("vllm_compile.log")
    cut = text[:text.index("torch.compile took") + 10]
    run = parse_vllm_text(cut, mtime=MTIME).runs[0]
    assert "compile" not in phases(run)
    assert phases(run)["compile.dynamo"] == (4.50, None)
    assert run.status == "interrupted"
    assert run_end(run)["error"] is None
    assert any("truncated" in w for w in run.warnings)
