"""One small excerpt per engine version's own wording or prefix (each fixture names the version
and the source file it follows): the facts it states, exactly, and that what it does not state
is absent, never 0."""

from __future__ import annotations

from datetime import datetime, timezone

from collector.importers import parse_sglang_text, parse_vllm_text
from tests.importers.conftest import MTIME, gib, kind, parsed, phases, rank_phases, run_end, the_only_run


def utc(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()


def vllm(name: str):
    return the_only_run(parsed(parse_vllm_text, name))


def sglang(name: str):
    return the_only_run(parsed(parse_sglang_text, name))


def steps(run, event_kind="step"):
    return [(e["stage"], e["mode"], e.get("raw_bs"), e.get("graph_bs"), e.get("reason"), e.get("evidence"))
            for e in kind(run, event_kind)]


# -- vLLM ----------------------------------------------------------------------------------

def test_vllm_in_ci_behind_an_iso_stamp_fails_on_the_first_error_of_a_chained_traceback():
    run = vllm("vllm_ci_stamped_stream_capture.log")
    assert run_end(run) == {
        "status": "failed", "rank": "TP1", "phase": "capture", "graph_bs": 2,
        "error": "torch.AcceleratorError: CUDA error: operation not permitted when stream is capturing"}
    assert run.run["time_provenance"] == "log"                        # the CI stamp has the year
    assert run.run["started_at"] == utc("2025-12-13 19:54:20")
    assert [(c["graph_bs"], c["stage"], c["status"]) for c in kind(run, "capture")] == [(2, "prefill", "failed")]
    assert phases(run) == {}


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
    assert config["graph_mem_bytes"] is None and "kv_tokens" not in config


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
