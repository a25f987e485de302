"""Log excerpts users posted in the engines' trackers, copied line for line (a line the
excerpt cut was left out, never completed), one fixture per format issue 22 names: failures
that are only an ERROR block or a bare traceback, cut or chained, from any rank; capture-size
counts from bars without a size list; KV capacity in tokens and blocks; an excerpt that stops
inside the capture bars. Each test says where its lines came from, and what the excerpt does
not state stays null.
"""

from __future__ import annotations

from replayscope.collector.importers.failures import CUT_OFF
from replayscope.collector.importers import parse_sglang_text, parse_vllm_text
from tests.importers.conftest import gib, kind, phases, rank_phases, run_end, sglang, utc, vllm


def summary(run) -> dict:
    return run.summary()


def no_cause_invented(error: str) -> None:
    """A cut exception never gets a cause the excerpt does not print."""
    assert CUT_OFF in error
    assert "out of memory" not in error.lower() and "oom" not in error.lower().split()


# -- failures -------------------------------------------------------------------------------

def test_v0_worker_error_block_through_capture_without_its_start_or_exception():
    # https://github.com/vllm-project/vllm/issues/7593 (turn 2, nivibilla): VllmWorkerProcess ERROR
    # lines, multiproc_worker_utils.py:226, from capture_model to torch/cuda/graphs.py __exit__
    run = vllm("vllm_issue7593_v0_worker_error_block_capture.log")
    end = run_end(run)
    assert (run.status, end["rank"], end["phase"], end["graph_bs"]) == ("failed", "pid 13108", "capture", None)
    no_cause_invented(end["error"])
    assert "__exit__" in end["error"]                      # what the excerpt does show: where it stops
    assert kind(run, "run_end")[0]["ts"] == utc("2025-08-19 07:51:27")   # the file's date is 2026-01-01


def test_v1_worker_ranks_one_with_the_exception_one_only_failed_to_start():
    # https://github.com/vllm-project/vllm/issues/17756 (turn 3, RWDai): (VllmWorker rank=6) ends with
    # "RuntimeError: NCCL error: unhandled cuda error", (VllmWorker rank=3) only "WorkerProc failed to start."
    run = vllm("vllm_issue17756_v1_worker_ranks_nccl_error.log")
    end = run_end(run)
    assert run.status == "failed" and end["rank"] == "rank 6"     # the rank that says why leads
    assert end["error"] == "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"
    (other,) = [w for w in kind(run, "warning") if w.get("code") == "rank_failed"]
    assert other["rank"] == "rank 3" and "WorkerProc failed to start" in other["message"]
    assert run.ranks == ["rank 3", "rank 6"]


def test_engine_core_failed_to_start_while_the_capture_bar_stood_at_zero():
    # https://github.com/vllm-project/vllm/pull/21747 (turn 1, DarkLight1337): "Capturing CUDA graph
    # shapes: 0/67", then core.py:648 "EngineCore failed to start." and a traceback cut in
    # _initialize_kv_caches -> initialize_from_config
    run = vllm("vllm_pr21747_v1_bar_then_enginecore_failed.log")
    end = run_end(run)
    assert run.status == "failed" and end["phase"] == "capture"   # the bar was being drawn: not kv_cache
    assert end["error"].startswith("EngineCore failed to start: " + CUT_OFF)
    no_cause_invented(end["error"])
    assert summary(run)["capture_sizes"]["count"] == 67 and summary(run)["capture_sizes"]["max"] is None


def test_sglang_stamped_traceback_right_after_capture_begin_cut_before_its_exception():
    # https://github.com/sgl-project/sglang/issues/1751 (description, HuanzhiMao): "[2024-10-22 06:31:49 TP0]
    # Traceback" after "Capture cuda graph begin", frames down to flashinfer's begin_forward, cut
    run = sglang("sglang_issue1751_stamped_traceback_after_capture_begin.log")
    end = run_end(run)
    assert (run.status, end["rank"], end["phase"]) == ("failed", "TP0", "capture")
    assert kind(run, "run_end")[0]["ts"] == utc("2024-10-22 06:31:49")
    no_cause_invented(end["error"])
    assert run.run["config"]["mem_pool_avail_bytes"] == gib(8.38)


def test_sglang_bare_chained_traceback_whose_first_exception_is_cut_off():
    # https://github.com/sgl-project/sglang/pull/3613 (turn 7, lambert0312): the CUDA-error advice, the
    # dynamo hint, "During handling of the above exception, another exception occurred:", then the
    # scheduler's traceback cut in cuda_graph_runner.py __init__; no stamp, no rank
    run = sglang("sglang_pr3613_bare_chained_traceback_cut.log")
    end = run_end(run)
    assert (run.status, end["rank"], end["phase"]) == ("failed", None, "capture")
    no_cause_invented(end["error"])
    assert run.run["partial"] is True


# -- counts ---------------------------------------------------------------------------------

def test_v1_kv_tokens_and_the_piecewise_bar_count_without_a_size_list():
    # https://github.com/vllm-project/vllm/issues/32611 (turn 1, jasonyanwenl): EngineCore_DP0 startup to
    # "GPU KV cache size: 524,416 tokens" and "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):
    # 100%| 51/51"; the FULL bar after it is cut in the excerpt
    run = vllm("vllm_issue32611_v1_kv_tokens_and_bar_count.log")
    s = summary(run)
    assert s["kv_cache"] == {"tokens": 524416, "gpu_blocks": None, "cpu_blocks": None, "tokens_by_rank": None,
                             "gpu_blocks_by_rank": None,
                             "max_concurrency": {"tokens_per_request": 2048, "requests": 256.06}}
    assert s["compile_cache"] == {"hits": 1, "saves": 0}
    assert s["capture_sizes"] == {"count": 51, "max": None, "sizes": None, "capped_from": None}
    assert s["captures"] == [] and s["capture_total_s"] is None      # no per-size rows, no total: not printed
    assert phases(run)["compile"] == (3.88, None)
    assert phases(run)["load_weights"] == (1.037989, gib(0.24))
    assert run.status == "interrupted"


def test_v0_bar_count_and_capture_total_without_a_size_list():
    # https://github.com/vllm-project/vllm/pull/11349 (description, mgoin): "Capturing CUDA graph shapes:
    # 100%| 35/35" and "Graph capturing finished in 14 secs, took 0.21 GiB"
    run = vllm("vllm_pr11349_v0_bar_without_sizes.log")
    s = summary(run)
    assert s["capture_sizes"]["count"] == 35 and s["capture_sizes"]["max"] is None
    assert (s["capture_total_s"], s["graph_mem_bytes"]) == (14.0, gib(0.21))


def test_sglang_kv_tokens_and_the_printed_size_list():
    # https://github.com/sgl-project/sglang/issues/7227 (turn 5, RodriMora): "KV Cache is allocated.
    # #tokens: 132681" and "Capture cuda graph bs [1, 2, 4, 8]"; the excerpt stops there
    run = sglang("sglang_issue7227_kv_tokens_and_capture_list.log")
    s = summary(run)
    assert s["kv_cache"]["tokens"] == 132681 and s["kv_cache"]["gpu_blocks"] is None
    assert s["capture_sizes"] == {"count": 4, "max": 8, "sizes": [1, 2, 4, 8], "capped_from": None}
    assert phases(run)["load_weights"] == (None, gib(8.81))     # no elapsed= in this version: unknown
    assert s["capture_total_s"] is None and s["captures"] == []


def test_sglang_excerpt_that_stops_inside_the_capture_bar_has_no_total_and_no_invented_size():
    # https://github.com/sgl-project/sglang/pull/11275 (description, trevor-m): capture begin on DP0 TP0,
    # the 52 sizes, the bar at bs=512 0/52, then only "Registering 0 cuda graph addresses" (the hang
    # the PR is about); the DP5 line is cut in the excerpt
    run = sglang("sglang_pr11275_stops_inside_capture_bar.log")
    s = summary(run)
    assert s["capture_sizes"]["count"] == 52 and s["capture_sizes"]["max"] == 512
    assert s["capture_total_s"] is None and s["graph_mem_bytes"] is None and s["captures"] == []
    assert run.status == "interrupted"
    assert any("still running where the log ends" in w for w in run.warnings)
    assert rank_phases(run) == {}


def test_kv_blocks_from_the_lines_vllm_prints_them_in():
    # Not found in a tracker excerpt, so written from vLLM's format strings: the API server's
    # vllm/v1/metrics/loggers.py log_engine_initialized ("Engine %03d: vllm cache_config_info with
    # initialization after num_gpu_blocks is: %d") and early V1's executor ("# GPU blocks: %d", no CPU
    # blocks); V0's "# cuda blocks: N, # CPU blocks: M" is in vllm_old.log / the corpus
    api = ("(APIServer pid=1) INFO 08-27 21:03:30 [loggers.py:142] Engine 000: vllm cache_config_info with "
           "initialization after num_gpu_blocks is: 9853\n")
    early = "INFO 02-20 10:00:00 [abstract.py:78] # GPU blocks: 27000\n"
    for text, blocks in ((api, 9853), (early, 27000)):
        (run,) = parse_vllm_text(text).runs
        assert summary(run)["kv_cache"]["gpu_blocks"] == blocks
        assert summary(run)["kv_cache"]["cpu_blocks"] is None and summary(run)["kv_cache"]["tokens"] is None


def test_scheduler_exception_keeps_the_exceptions_text_not_an_empty_capture_failed():
    # Written from SGLang's cuda_graph_runner.py: raise Exception(f"Capture cuda graph failed: {e}\n"
    # "Possible solutions:\n" ...) under "Scheduler hit an exception: Traceback"; an exception whose text
    # is empty leaves "Capture cuda graph failed: " with nothing after it
    head = ("[2025-03-01 10:00:00 TP0] Capture cuda graph begin. This can take up to several minutes. "
            "avail mem=10.00 GB\n"
            "[2025-03-01 10:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 239, '
            'in __init__\n'
            "    raise Exception(\n")
    advice = "Possible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    (run,) = parse_sglang_text(head + "RuntimeError: CUDA error: an illegal memory access was encountered\n\n"
                               "During handling of the above exception, another exception occurred:\n\n"
                               + head + "Exception: Capture cuda graph failed: \n" + advice).runs
    assert run.error == "RuntimeError: CUDA error: an illegal memory access was encountered"
    (run,) = parse_sglang_text(head + "Exception: Capture cuda graph failed: \n" + advice).runs
    # the exception line is in the log: its empty message is said, never "cut off" (issue 34)
    assert run.status == "failed"
    assert run.error == "Exception: Capture cuda graph failed (the exception's message is empty)"
    assert "capture failed: capture failed" not in run.error
    (run,) = parse_sglang_text(head + "Exception: Capture cuda graph failed: CUDA error: out of memory\n" + advice).runs
    assert run.error == "capture failed: CUDA error: out of memory"
    assert run_end(run)["phase"] == "capture"


def test_a_process_vllm_watches_dying_is_a_failure_that_yields_to_a_real_exception():
    # vLLM's own lines (multiproc_executor.py "Worker proc %s died unexpectedly, shutting down executor.",
    # core_client.py "Engine core proc %s died unexpectedly, shutting down client.") and the wrapper
    # "RuntimeError: Worker failed with error '', please check the stack trace above for the root cause"
    died = ("(EngineCore_DP0 pid=137324) ERROR 10-29 08:32:36 [multiproc_executor.py:154] Worker proc VllmWorker-0 "
            "died unexpectedly, shutting down executor.\n")
    (run,) = parse_vllm_text(died).runs
    assert run.status == "failed" and "died unexpectedly" in run.error and run_end(run)["rank"] == "DP0"
    wrapped = ("(EngineCore_DP0 pid=137324) ERROR 10-29 08:32:36 [core.py:708] RuntimeError: Worker failed with "
               "error '', please check the stack trace above for the root cause\n" + died)
    (run,) = parse_vllm_text(wrapped).runs
    assert run.status == "failed" and run.error.startswith("RuntimeError: Worker failed with error")


def test_the_error_line_logger_exception_prints_above_its_traceback_is_the_failures_text():
    # https://github.com/nlzy/vllm-gfx906/issues/22 (description, iEddie-cmd; a fork's tracker, vLLM's own
    # V0 format: engine.py run_mp_engine's logger.exception(e) prints the exception's text, then the
    # traceback, here cut): the capture bar at 0/7 when it failed
    run = vllm("vllm_gfx906fork22_v0_logger_exception_message.log")
    end = run_end(run)
    assert run.status == "failed" and end["phase"] == "capture"
    assert end["error"].startswith("size_k must divisible by BLOCK_SIZE_K: " + CUT_OFF)
    assert summary(run)["capture_sizes"]["count"] == 7
