"""One small excerpt per engine version's own wording or prefix (each fixture names the version
and the source file it follows): the facts it states, exactly, and that what it does not state
is absent, never 0."""

from __future__ import annotations

from replayscope.collector.importers import parse_sglang_text, parse_vllm_text
from tests.importers.conftest import (MTIME, gib, kind, phases, rank_phases, run_end, sglang, the_only_run, utc,
                                      vllm)


def steps(run, event_kind="step"):
    return [(e["stage"], e["mode"], e.get("raw_bs"), e.get("graph_bs"), e.get("reason"), e.get("evidence"))
            for e in kind(run, event_kind)]


# -- vLLM ----------------------------------------------------------------------------------

def test_vllm_010_worker_tag_with_tp_rank_and_a_capture_oom_in_a_worker():
    run = vllm("vllm_v0101_worker_tp_capture_oom.log")
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. "
           "GPU 1 has a total capacity of 79.19 GiB of which 120.00 MiB is free.")
    assert run.status == "failed" and run.run["partial"] is False
    # the worker's root cause, not the engine core's or the API server's "see above" lines;
    # the bar stood at 2 of the sizes [8, 4, 2, 1] (largest first): bs 2 was being captured
    assert run_end(run) == {"status": "failed", "error": oom, "rank": "TP1", "phase": "capture", "graph_bs": 2}
    assert [(c["graph_bs"], c["status"], c["rank"]) for c in kind(run, "capture")] == [(2, "failed", "TP1")]
    assert run.ranks == ["TP0", "TP1"]
    assert phases(run) == {"load_weights": (61.25, gib(28.56)), "kv_cache": (None, gib(6.25))}
    assert rank_phases(run)[("TP1", "load_weights")] == (62.0, gib(28.56))
    config = run.run["config"]
    assert config["capture_sizes"] == [1, 2, 4, 8] and config["cudagraph_mode"] == "PIECEWISE"
    assert config["kv_tokens"] == 102400
    assert config["max_concurrency"] == {"tokens_per_request": 32768, "requests": 3.12}
    assert config["compile"] is True                                   # compilation level 3
    assert config["capture_passes"] == [{"pass": "graphs", "graphs_done": 2, "graphs": 4,
                                        "stage": "decode", "sizes": [1, 2, 4, 8]}]
    assert "capture" not in phases(run) and config["graph_mem_bytes"] is None   # never finished
    assert run.run["started_at"] == utc("2025-08-28 09:10:00")          # vLLM 0.10: 2025


def test_vllm_in_ci_behind_an_iso_stamp_fails_on_the_first_error_of_a_chained_traceback():
    run = vllm("vllm_ci_stamped_stream_capture.log")
    assert run_end(run) == {
        "status": "failed", "rank": "TP1", "phase": "capture", "graph_bs": 2,
        "error": "torch.AcceleratorError: CUDA error: operation not permitted when stream is capturing"}
    assert run.run["time_provenance"] == "log"                        # the CI stamp has the year
    assert run.run["started_at"] == utc("2025-12-13 19:54:20")
    assert [(c["graph_bs"], c["stage"], c["status"]) for c in kind(run, "capture")] == [(2, "mixed", "failed")]
    assert phases(run) == {}


def test_vllm_v0_on_ray_a_worker_failing_in_capture_at_a_size_the_log_does_not_name():
    run = vllm("vllm_v08_ray_error_executing.log")
    assert run.status == "failed" and run.run["partial"] is True
    assert run_end(run) == {
        "status": "failed", "rank": "pid 206994", "phase": "capture", "graph_bs": None,
        "error": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. "
                 "GPU 6 has a total capacity of 44.53 GiB of which 448.00 KiB is free."}
    assert kind(run, "capture") == []                  # no size to name: no capture event
    assert "a capture failed, but the log does not say at which size" in run.warnings
    assert phases(run) == {"profile": (4.26, None), "kv_cache": (None, gib(21.20))}
    assert rank_phases(run)[("pid 1463574", "profile")] == (4.31, None)   # "[repeated 7x ...]" cut off
    config = run.run["config"]
    assert (config["kv_blocks"], config["cpu_blocks"]) == (17365, 3276)
    assert config["max_concurrency"] == {"tokens_per_request": 32768, "requests": 8.48}
    assert config["capture_sizes"] == [] and config["capture_count"] is None


def test_vllm_enforce_eager_is_one_run_whose_eager_steps_are_graphs_disabled():
    run = vllm("vllm_v011_enforce_eager_metrics.log")
    # the API server's notes before the engine core's banner do not split the start in two
    assert run.status == "finished" and run.run["partial"] is False
    assert run.run["backend"] == "eager"
    assert steps(run, "step_counts") == [
        ("mixed", "eager", 1, None, "graphs_disabled", "graphs are off for this server (enforce_eager=True)"),
        ("mixed", "eager", 512, None, "graphs_disabled", "graphs are off for this server (enforce_eager=True)"),
    ]
    assert all(e["provenance"] == "inferred" for e in kind(run, "step_counts"))
    assert phases(run) == {"load_weights": (25.5, gib(14.25)), "kv_cache": (None, gib(50.0)),
                           "engine_init": (4.1, None)}
    assert run.run["config"]["compile"] is False                       # CompilationMode.NONE


def test_vllm_says_graphs_are_off_without_a_banner_and_its_none_rows_are_graphs_disabled():
    text = ("(APIServer pid=1) INFO 01-20 08:00:01 [vllm.py:762] Cudagraph is disabled under eager mode\n"
            "(APIServer pid=1) INFO 01-20 08:01:00 [loggers.py:248] **CUDAGraph Config Settings:**\n\n"
            "- Capture sizes: []\n\n**CUDAGraph Stats:**\n\n"
            "| Unpadded Tokens | Padded Tokens | Num Paddings | Runtime Mode | Count |\n"
            "|-----------------|---------------|--------------|--------------|-------|\n"
            "| 7               | 7             | 0            | NONE         | 3     |\n")
    run = the_only_run(parse_vllm_text(text, mtime=MTIME))
    assert run.run["backend"] == "eager"
    assert steps(run, "step_counts") == [
        ("mixed", "eager", 7, None, "graphs_disabled",
         "graphs are off for this server ('Cudagraph is disabled under eager mode')")]


def test_vllm_skipping_capture_wording_of_v1_also_means_graphs_off():
    text = ("(EngineCore_DP0 pid=5) WARNING 07-01 10:00:00 [gpu_model_runner.py:2570] Skipping CUDA graph capture. "
            "To turn on CUDA graph capture, ensure `cudagraph_mode` was not manually set to `NONE`\n")
    run = the_only_run(parse_vllm_text(text, mtime=MTIME))
    assert run.run["backend"] == "eager" and phases(run) == {}


def test_vllm_full_decode_only_none_rows_are_prefill_or_too_large_from_the_table():
    run = vllm("vllm_full_decode_only_metrics.log")
    assert run.run["backend"] == "full_decode_only"
    full = "a FULL row under FULL_DECODE_ONLY: vLLM replays FULL graphs only for uniform decode batches in this mode"
    assert steps(run, "step_counts") == [
        ("decode", "padded", 3, 4, None, full),
        ("decode", "graph", 8, 8, None, full),
        ("mixed", "eager", 6, None, "prefill",
         "FULL_DECODE_ONLY captures decode-only batches; a batch with prefill tokens runs eager"),
        ("mixed", "eager", 37, None, "batch_too_large", "37 tokens is above the largest captured size 8"),
    ]
    assert phases(run) == {"capture": (2.0, gib(0.08))}
    assert run.run["config"]["compile"] is True                        # VLLM_COMPILE


def test_vllm_loading_lines_without_memory_or_with_a_time_keep_what_they_say():
    # platform plugins' runners print the time only; some V0 builds the memory and the time
    text = ("INFO 05-01 10:00:00 [api_server.py:1] vLLM API server version 0.9.2\n"
            "(EngineCore_DP0 pid=5) INFO 05-01 10:00:09 [model_runner.py:610] Model loading took 0.840000 seconds\n")
    assert phases(the_only_run(parse_vllm_text(text, mtime=MTIME))) == {"load_weights": (0.84, None)}
    text = ("INFO 05-01 10:00:00 [api_server.py:1] vLLM API server version 0.6.3\n"
            "INFO 05-01 10:00:09 model_runner.py:1072] Loading model weights took 14.9888 GB and 6.500000 seconds\n")
    assert phases(the_only_run(parse_vllm_text(text, mtime=MTIME))) == {"load_weights": (6.5, gib(14.9888))}


def test_vllm_init_engine_line_with_the_encoder_compilation_breakdown():
    text = ("INFO 02-01 10:00:00 [api_server.py:1] vLLM API server version 0.14.0\n"
            "(EngineCore_DP0 pid=5) INFO 02-01 10:02:00 [core.py:281] init engine (profile, create kv cache, "
            "warmup model) took 120.50 s (compilation: 61.00 s \u2014 language_model: 50.00 s, encoder: 11.00 s)\n")
    run = the_only_run(parse_vllm_text(text, mtime=MTIME))
    assert phases(run) == {"engine_init": (120.5, None), "compile": (61.0, None)}


# -- SGLang ------------------------------------------------------------------------------

def test_sglang_03_stamps_with_a_clock_only_take_their_day_from_the_file():
    run = sglang("sglang_v030_clock_stamps.log")
    assert run.status == "finished" and run.run["partial"] is False
    assert run.run["started_at"] == utc("2026-01-01 06:30:00")       # the file's day (MTIME), the log's clock
    assert run.run["time_provenance"] == "inferred"
    assert any(w.startswith("the log's stamps print only a clock") for w in run.warnings)
    assert run.ranks == ["TP0", "TP1"]
    # no elapsed= on this version's weight line: the length is end minus begin, inferred
    loads = {e["rank"]: (e["duration_s"], e.get("mem_bytes"), e.get("provenance"))
             for e in kind(run, "phase") if e["phase"] == "load_weights"}
    assert loads == {"TP0": (7.0, None, "inferred"), "TP1": (7.0, None, "inferred")}
    assert phases(run)["capture"] == (5.11, None)
    assert rank_phases(run)[("TP1", "capture")] == (5.02, None)
    config = run.run["config"]
    assert config["mem_pool_avail_bytes"] == gib(8.20)
    assert config["max_total_num_tokens"] == 420000 and config["max_running_requests"] == 4097
    assert config["capture_sizes"] == [] and config["capture_count"] is None
    assert config["graph_mem_bytes"] is None
    assert config["kv_tokens"] == 420000        # max_total_num_tokens: the KV pool's size in tokens


def test_sglang_behind_compose_with_graphs_disabled_stores_every_eager_batch_as_graphs_disabled():
    run = sglang("sglang_compose_graphs_disabled.log")
    assert run.run["backend"] == "disabled" and run.run["started_at"] == utc("2025-03-01 10:00:00")
    evidence = "the server runs with disable_cuda_graph=True"
    assert steps(run) == [("prefill", "eager", 180, None, "graphs_disabled", evidence),   # 180 tokens
                          ("decode", "eager", 2, None, "graphs_disabled", evidence),
                          ("decode", "eager", 2, None, "graphs_disabled", evidence)]
    assert phases(run) == {"load_weights": (7.0, gib(14.40)), "kv_cache": (None, gib(48.0))}
    assert kind(run, "capture") == [] and run.run["config"]["graph_mem_bytes"] is None


def test_sglang_without_padding_a_size_between_captured_ones_is_not_captured():
    run = sglang("sglang_padding_disabled.log")
    assert steps(run) == [
        ("decode", "eager", 40, None, "not_captured", "padding is disabled and bs 40 is not one of the captured sizes"),
        ("decode", "graph", 48, 48, None, None),
        ("decode", "eager", 70, None, "batch_too_large", "#running-req: 70 is above the largest captured size (64)"),
    ]
    assert run.run["config"]["padding"] is False
    captured = [c["graph_bs"] for c in kind(run, "capture")]
    assert captured == [64, 48] + list(range(32, 0, -1))
    assert all(c["duration_s"] is None for c in kind(run, "capture"))   # no bar: sizes without times


def test_sglang_piecewise_prefill_section_is_its_own_part_of_the_capture():
    run = sglang("sglang_piecewise.log")
    prefill = [(c["graph_bs"], c["stage"], c["duration_s"], c["pool_delta_bytes"])
               for c in kind(run, "capture") if c["stage"] == "prefill"]
    assert prefill == [(512, "prefill", 3.0, gib(19.90) - gib(19.60)), (256, "prefill", 2.0, gib(19.60) - gib(19.50))]
    assert phases(run) == {"capture.target.piecewise": (5.5, gib(0.50)), "capture.target.decode": (3.0, gib(0.20)),
                           "capture": (8.5, gib(0.50) + gib(0.20))}
    assert run.run["config"]["capture_sizes"] == [1, 2, 4]            # the decode sizes; piecewise are tokens


# -- prefixes and stamps that name ranks -------------------------------------------------

def test_sglang_month_day_stamps_and_bare_rank_brackets_keep_their_ranks():
    text = ("[11-03 06:30:00] server_args=ServerArgs(model_path='m', tp_size=2)\n"
            "[11-03 06:30:21 DP0 TP1] Capture cuda graph end. Time elapsed: 5.02 s\n"
            "[TP0] Capture cuda graph end. Time elapsed: 5.11 s\n")
    run = the_only_run(parse_sglang_text(text, mtime=MTIME))
    assert run.ranks == ["TP0", "DP0 TP1"]
    assert rank_phases(run) == {("DP0 TP1", "capture"): (5.02, None), ("TP0", "capture"): (5.11, None)}
    assert run.run["started_at"] == utc("2025-11-03 06:30:00")        # before MTIME (2026-01-01): 2025
    assert run.run["time_provenance"] == "inferred"


def test_vllm_worker_tags_with_pipeline_and_context_parallel_ranks():
    text = ("(VllmWorker PP1_TP0 pid=9) INFO 03-31 10:11:24 [gpu_model_runner.py:1] Graph capturing finished in "
            "4 secs, took 0.20 GiB\n"
            "(Worker_PCP1_TP0 pid=10) INFO 03-31 10:11:25 [gpu_model_runner.py:1] Graph capturing finished in "
            "5 secs, took 0.30 GiB\n")
    run = the_only_run(parse_vllm_text(text, mtime=MTIME))
    assert sorted(run.ranks) == ["PCP1 TP0", "PP1 TP0"]
    assert rank_phases(run) == {("PP1 TP0", "capture"): (4.0, gib(0.20)), ("PCP1 TP0", "capture"): (5.0, gib(0.30))}


def test_a_bare_clock_and_a_level_without_a_stamp_in_front_of_vllm_records():
    text = ("05:21:11 (EngineCore_DP0 pid=75) INFO Profiling CUDA graph memory: PIECEWISE=51 (largest=512), "
            "FULL=35 (largest=256)\n"
            "(EngineCore_DP0 pid=75) INFO [monitor.py:53] torch.compile took 22.16 s in total\n")
    run = the_only_run(parse_vllm_text(text, mtime=MTIME))
    assert run.ranks == ["DP0"]
    assert phases(run) == {"compile": (22.16, None)}
    assert run.run["config"]["graph_profile"] == {"PIECEWISE": {"graphs": 51, "largest": 512},
                                                  "FULL": {"graphs": 35, "largest": 256}}
    assert run.run["started_at"] == utc("2026-01-01 05:21:11") and run.run["time_provenance"] == "inferred"
