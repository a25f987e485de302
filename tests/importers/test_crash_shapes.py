"""Failures that are not a Python traceback (issue 34): a capture that dies on native
code's error lines, on ``terminate called after throwing ...`` / ``Fatal Python error``
printed at the end of a capture bar's line, and short error blocks (a custom all-reduce's
``CUDACHECK``, PyTorch's NCCL watchdog on ROCm). Every one is a failed run, on any rank and
for either engine; a capture that did not finish has no capture total, only its time so far.

The fixtures are composed line by line from the formats the engines and libraries print:
SGLang's ``[stamp TPn]`` lines and ``Capturing batches (bs=N avail_mem=M GB)`` bar, vLLM's
``Capturing CUDA graph shapes`` / ``Capturing CUDA graphs (mode)`` bars, ``CUDA error (file:line):``
(the ``fprintf(stderr, "CUDA error (%s:%d): %s\\n", ...)`` check macro of CUDA kernels),
``Failed: Cuda error file:line 'msg'`` (``CUDACHECK`` in vLLM's and SGLang's
``custom_all_reduce.cuh``), libstdc++'s ``terminate called after throwing an instance of
'c10::Error'`` / ``what():``, CPython's ``Fatal Python error: Aborted`` with faulthandler's
thread dump, and ``ProcessGroupNCCL.cpp`` watchdog's line (ROCm/hip#3876 shows its layout).
"""

from __future__ import annotations

import pytest

from replayscope.collector.importers import parse_sglang_text, parse_vllm_text
from replayscope.collector.importers.failures import CUT_OFF
from tests.importers.conftest import read_fixture, run_end, sglang, vllm


def test_sglang_cuda_error_lines_after_capture_begin_are_a_failed_capture():
    run = sglang("sglang_crash_cuda_error_lines_after_capture_begin.log")
    end = run_end(run)
    assert run.status == "failed"
    assert end["phase"] == "capture"
    assert end["error"] == ("CUDA error (/sgl-kernel/csrc/allreduce/custom_all_reduce.cuh:479): "
                            "an illegal memory access was encountered")
    s = run.summary()
    assert s["capture_total_s"] is None                     # it never finished
    assert s["capture_unfinished"]["status"] == "failed"


def test_sglang_terminate_inside_the_capture_bar_fails_the_size_after_the_last_done():
    run = sglang("sglang_crash_terminate_inside_capture_bar.log")
    end = run_end(run)
    assert run.status == "failed"
    assert (end["rank"], end["phase"], end["graph_bs"]) == ("TP0", "capture", 144)
    assert end["error"] == "CUDA error: an illegal memory access was encountered"   # what(), not "Aborted"
    s = run.summary()
    assert [(c["graph_bs"], c["status"]) for c in s["captures"]] == [(160, "ok"), (152, "ok"), (144, "failed")]
    assert s["capture_total_s"] is None                     # 2/23 done: 0.0 s is not a total
    assert s["capture_unfinished"] == {"elapsed_s": 0.0, "graphs_done": 2, "graphs": 23,
                                       "pass": "target.decode", "status": "failed"}


def test_sglang_capture_failed_with_an_empty_message_is_not_called_cut_off():
    run = sglang("sglang_capture_failed_empty_message.log")
    end = run_end(run)
    assert run.status == "failed" and end["phase"] == "capture" and end["rank"] == "TP0"
    assert CUT_OFF not in end["error"]
    assert end["error"].startswith("Exception: Capture cuda graph failed")


def test_vllm_terminate_inside_the_capture_bar_is_a_failed_run_without_a_capture_total():
    run = vllm("vllm_crash_terminate_inside_capture_bar.log")
    end = run_end(run)
    assert run.status == "failed"
    assert (end["phase"], end["graph_bs"]) == ("capture", 48)      # 64, 56 done; the third size
    assert end["error"] == "CUDA error: an illegal memory access was encountered"
    s = run.summary()
    assert s["capture_total_s"] is None
    assert s["capture_unfinished"] == {"elapsed_s": 5.0, "graphs_done": 2, "graphs": 11, "pass": "graphs",
                                       "status": "failed"}


@pytest.mark.parametrize("name, error, rank", [
    ("vllm_crash_custom_all_reduce_block.log",
     "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:368 'an illegal memory access was encountered'", None),
    ("vllm_crash_hip_capturing_stream_block.log",
     "HIP error: operation not permitted on an event last recorded in a capturing stream", "rank 0"),
])
def test_vllm_error_blocks_that_name_a_capture_are_failed_runs(name, error, rank):
    run = vllm(name)
    end = run_end(run)
    assert run.status == "failed"
    assert (end["error"], end["rank"], end["phase"]) == (error, rank, "capture")
    assert run.summary()["capture_total_s"] is None


def test_a_crash_line_that_names_no_engine_or_capture_starts_no_run():
    text = "CUDA error (/tmp/x.cu:12): invalid argument\nsome other program's output\n"
    assert parse_vllm_text(text).runs == [] and parse_sglang_text(text).runs == []


def test_a_crash_while_serving_fails_the_run():
    log = read_fixture("sglang_new.log")
    assert parse_sglang_text(log).runs[-1].status == "finished"
    run = parse_sglang_text(log + "Fatal Python error: Segmentation fault\n").runs[-1]
    assert run.status == "failed"
    assert run_end(run)["error"] == "Fatal Python error: Segmentation fault"


def test_the_import_line_says_the_capture_did_not_finish_and_gives_no_total(tmp_path):
    import argparse
    import io

    from replayscope.app.cli import imports as cli

    p = argparse.ArgumentParser()
    cli.add_parsers(p.add_subparsers())
    path = tmp_path / "x.log"
    path.write_text(read_fixture("sglang_crash_terminate_inside_capture_bar.log"))
    args = p.parse_args(["import", "sglang", str(path), "--dry-run"])
    out = io.StringIO()
    args.handler(args, out=out)
    assert "capture not finished (failed at 2/23 after 0 s; no total)" in out.getvalue()


@pytest.mark.parametrize("line, error", [
    ("Segmentation fault (core dumped)", "Segmentation fault (core dumped)"),
    ("!!!!!!! Segfault encountered !!!!!!!", "Segfault encountered"),
    ("*** SIGSEGV received at time=1733212800 on cpu 3 ***", "*** SIGSEGV received at time="),
])
def test_the_signal_that_ended_a_capture_is_a_failed_run(line, error):
    log = read_fixture("sglang_crash_terminate_inside_capture_bar.log").split("\n")[:2]
    bar = "Capturing batches (bs=160 avail_mem=12.21 GB):   4%|▍         | 1/23 [00:00<00:09,  2.31it/s]"
    (run,) = parse_sglang_text("\n".join(log + [bar, line]) + "\n").runs
    assert run.status == "failed" and run_end(run)["phase"] == "capture"
    assert run.error == error


@pytest.mark.parametrize("block, error", [
    ("Failed: Cuda error /sgl-kernel/csrc/allreduce/custom_all_reduce.cuh:368 'an illegal memory access was "
     "encountered'", "Failed: Cuda error /sgl-kernel/csrc/allreduce/custom_all_reduce.cuh:368 'an illegal memory "
                     "access was encountered'"),
    ("[rank1]:[E305 10:11:12.123456789 ProcessGroupNCCL.cpp:1899] [PG ID 2 PG GUID 3 Rank 1] Process group watchdog "
     "thread terminated with exception: HIP error: operation not permitted on an event last recorded in a "
     "capturing stream\nHIP kernel errors might be asynchronously reported at some other API call, so the "
     "stacktrace below might be incorrect.",
     "HIP error: operation not permitted on an event last recorded in a capturing stream"),
])
def test_sglang_error_blocks_during_capture_are_failed_runs_too(block, error):
    head = read_fixture("sglang_crash_cuda_error_lines_after_capture_begin.log").split("\n")[:9]
    (run,) = parse_sglang_text("\n".join(head) + "\n" + block + "\n").runs
    assert run.status == "failed" and run.error == error and run_end(run)["phase"] == "capture"
