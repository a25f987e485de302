"""SGLang log import: each fixture's figures, exactly."""

from __future__ import annotations

import pytest

from replayscope.collector.importers import parse_sglang_text
from tests.importers.conftest import (MTIME, gib, kind, parsed, phases, rank_phases, read_fixture, run_end,
                                      the_only_run, utc)


def parse(name: str):
    return parsed(parse_sglang_text, name)


def only_run(name: str):
    return the_only_run(parse(name))


def captures(run):
    return [(e["graph_bs"], e["stage"], e["duration_s"], e["pool_delta_bytes"], e["pool_bytes"], e["status"])
            for e in kind(run, "capture")]


def test_old_wording_gives_phases_per_size_captures_and_a_finished_run():
    run = only_run("sglang_old.log")
    assert run.run["source"] == "sglang-log"
    assert run.run["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert run.run["backend"] == "cuda_graph"
    assert run.run["device"] == "cuda"
    assert run.run["started_at"] == utc("2024-11-05 08:00:00")
    assert phases(run) == {
        "load_weights": (7.0, gib(15.08)),                 # begin 08:00:05 -> end 08:00:12
        "kv_cache": (None, gib(25.21) + gib(25.21)),       # not timed in this version
        "capture": (5.23, gib(0.60)),
    }
    load = kind(run, "phase")[0]
    assert (load["phase"], load["provenance"]) == ("load_weights", "inferred")   # from the two stamps
    # sizes largest first; time from the bar's elapsed counter, memory from its avail_mem
    assert captures(run) == [
        (8, "decode", 2.0, gib(12.30) - gib(12.10), gib(12.30) - gib(12.10), "ok"),
        (4, "decode", 1.0, gib(12.10) - gib(12.00), gib(12.30) - gib(12.00), "ok"),
        (2, "decode", 1.0, gib(12.00) - gib(11.95), gib(12.30) - gib(11.95), "ok"),
        (1, "decode", 1.0, gib(11.95) - gib(11.90), gib(12.30) - gib(11.90), "ok"),
    ]
    config = run.run["config"]
    assert config["capture_sizes"] == [1, 2, 4, 8]
    assert config["kv_tokens"] == 413000
    assert config["max_total_num_tokens"] == 413000          # "max_total_num_tokens=413000, ..."
    assert config["mem_pool_avail_bytes"] == gib(12.60)      # "Memory pool end. avail mem=12.60 GB"
    assert config["graph_mem_bytes"] == gib(0.60)
    assert "max_running_requests" not in config              # not printed by this version
    assert run.status == "finished"
    assert run_end(run) == {"status": "finished", "error": None, "rank": None, "phase": None, "graph_bs": None}
    assert (run.run["time_provenance"], run.run["partial"]) == ("log", False)
    assert run.warnings == []


def test_early_2025_end_line_with_swapped_fields_reads_the_same():
    run = only_run("sglang_early2025.log")
    assert phases(run)["capture"] == (4.10, gib(1.40))
    assert captures(run) == [
        (4, "decode", 1.0, gib(21.30) - gib(20.80), gib(21.30) - gib(20.80), "ok"),
        (2, "decode", 2.0, gib(20.80) - gib(20.40), gib(21.30) - gib(20.40), "ok"),
        (1, "decode", 1.0, gib(20.40) - gib(20.10), gib(21.30) - gib(20.10), "ok"),
    ]
    assert run.run["config"]["graph_mem_bytes"] == gib(1.40)


def test_new_wording_uses_elapsed_kv_size_startup_timings_and_keeps_every_rank():
    run = only_run("sglang_new.log")
    assert run.run["backend"] == "full"
    assert phases(run) == {
        "load_weights": (4.87, gib(7.54)),          # TP0's figures are the headline
        "kv_cache": (0.44, gib(12.45)),             # duration from the startup timings line
        "capture": (2.58, gib(0.45)),
        "engine_init": (11.20, None),               # scheduler_e2e
    }
    every = rank_phases(run)
    assert every[("TP1", "load_weights")] == (5.40, gib(8.40))       # TP1's own, kept
    assert every[("TP1", "capture")] == (3.01, gib(0.50))           # TP1 captured slower: visible
    assert every[("TP1", "kv_cache")] == (None, gib(12.45))          # the timings line is TP0's
    assert [c[:3] for c in captures(run)] == [(4, "decode", 1.0), (2, "decode", 1.0), (1, "decode", 1.0)]
    assert {c["rank"] for c in kind(run, "capture")} == {"TP0"}      # the bar is drawn on rank 0
    assert captures(run)[-1][3] == gib(57.70) - gib(57.65)
    assert run.ranks == ["TP0", "TP1"]
    assert run.run["config"]["kv_tokens_by_rank"] == {"TP0": 1933682, "TP1": 1933682}
    assert run.run["config"]["startup_timings"]["cuda_graph"]["decode"] == 2.58
    assert run.status == "finished"


def test_target_and_draft_sections_are_parts_of_one_capture_phase():
    run = only_run("sglang_target_draft.log")
    assert run.run["model"] == "meta-llama/Qwen3-32B"
    assert phases(run) == {
        "load_weights.target": (20.0, gib(39.0)),
        "load_weights.draft": (1.5, gib(1.0)),
        "load_weights": (21.5, gib(39.0) + gib(1.0)),
        "kv_cache": (None, gib(9.0) + gib(9.0)),
        "capture.target.verify": (4.56, gib(0.38)),
        "capture.draft.decode": (1.56, gib(-0.02)),       # negative mem usage is kept
        "capture.draft.extend": (0.90, gib(0.10)),
        "capture": (4.56 + 1.56 + 0.90, gib(0.38) + gib(-0.02) + gib(0.10)),
    }
    caps = kind(run, "capture")
    assert [(c["graph_bs"], c["stage"], c["variant"]) for c in caps] == [
        (2, "verify", None), (1, "verify", None), (2, "decode", "draft"), (1, "decode", "draft"),
        (2, "prefill", "draft"), (1, "prefill", "draft")]
    # draft extend has no bar: its sizes were captured, for how long each is not in the log
    assert [c["duration_s"] for c in caps] == [2.0, 2.0, 1.0, 1.0, None, None]
    assert caps[1]["pool_delta_bytes"] == gib(19.60) - gib(19.62)          # negative: memory came back
    assert caps[4]["pool_delta_bytes"] is None
    assert run.run["config"]["capture_timing"] == "partial"


def test_capture_failure_with_advice_lines_fails_the_size_and_the_run():
    run = only_run("sglang_capture_failed.log")
    oom = ("CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.10 GiB "
           "of which 0.45 GiB is free.")
    assert captures(run) == [
        (32, "decode", 3.0, gib(1.90) - gib(1.20), gib(1.90) - gib(1.20), "ok"),
        (24, "decode", 2.0, gib(1.20) - gib(0.50), gib(1.90) - gib(0.50), "ok"),
        (16, "decode", None, None, None, "failed"),
    ]
    assert kind(run, "capture")[-1]["error"] == oom
    assert "capture" not in phases(run)
    assert run.status == "failed"
    # the root cause, from TP0's traceback (its lines continue TP0's record)
    assert run_end(run) == {"status": "failed", "error": "torch.OutOfMemoryError: " + oom, "rank": "TP0",
                            "phase": "capture", "graph_bs": 16}
    assert len(parse("sglang_capture_failed.log").runs) == 1   # the advice lines are nothing


def test_decode_and_prefill_batch_lines_become_steps_with_causes_from_evidence():
    run = only_run("sglang_decode_batches.log")
    steps = [(e["stage"], e["mode"], e["raw_bs"], e["graph_bs"], e["num_tokens"], e["padded_tokens"], e["reason"])
             for e in kind(run, "step")]
    assert steps == [
        ("prefill", "eager", 7, None, 7, 0, "prefill"),   # a prefill batch with cuda graph: False; its batch: 7 tokens
        ("decode", "graph", 1, 1, 1, 0, None),
        ("decode", "padded", 3, 4, 3, 1, None),      # bs 3 replays the captured bs 4 graph
        ("decode", "graph", 8, 8, 8, 0, None),
        ("decode", "eager", 12, None, 12, 0, "batch_too_large"),   # 12 > 8, the largest captured size
    ]
    assert kind(run, "step")[4]["evidence"] == "#running-req: 12 is above the largest captured size (8)"
    assert [e["ts"] for e in kind(run, "step")] == [utc(f"2025-05-05 10:00:{s}") for s in (20, 21, 22, 23, 24)]
    counts = kind(run, "step_counts")                 # a line without #running-req: nothing supports a cause
    assert [(e["stage"], e["mode"], e["reason"], e["count"]) for e in counts] == [("decode", "eager", "unknown", 1)]
    assert run.summary()["steps"] == {"graph": 2, "padded": 1, "eager": 3}
    assert any("without a 'cuda graph:' flag" in w for w in run.warnings)


def test_npu_graph_wording():
    run = only_run("sglang_npu.log")
    assert (run.run["backend"], run.run["device"]) == ("npu_graph", "npu")
    assert phases(run)["capture"] == (3.30, gib(0.60))
    assert [c[:3] for c in captures(run)] == [(2, "decode", 2.0), (1, "decode", 1.0)]
    step = kind(run, "step")[0]
    assert (step["mode"], step["raw_bs"], step["graph_bs"]) == ("graph", 2, 2)


def test_truncated_log_imports_what_it_has_and_is_interrupted():
    run = only_run("sglang_truncated.log")
    assert phases(run) == {"load_weights": (7.0, gib(15.0))}
    assert captures(run) == [(8, "decode", 2.0, gib(11.90) - gib(11.70), gib(11.90) - gib(11.70), "ok")]
    assert run_end(run)["status"] == "interrupted"
    assert run.status == "interrupted"
    assert any("truncated" in w for w in run.warnings)
    assert any("bs 4" in w and "still running" in w for w in run.warnings)


def test_a_new_server_args_banner_after_startup_starts_a_new_run():
    text = read_fixture("sglang_old.log") + read_fixture("sglang_npu.log")
    result = parse_sglang_text(text, path="two.log", mtime=MTIME)
    assert [r.run["backend"] for r in result.runs] == ["cuda_graph", "npu_graph"]
    assert [r.status for r in result.runs] == ["finished", "finished"]
    assert len({r.run["run_id"] for r in result.runs}) == 2


def test_run_ids_depend_on_content_so_reimport_is_idempotent():
    a = parse("sglang_old.log").runs[0].run["run_id"]
    b = parse("sglang_old.log").runs[0].run["run_id"]
    c = parse_sglang_text(read_fixture("sglang_old.log") + "\n", path="x", mtime=MTIME).runs[0].run["run_id"]
    assert a == b != c


@pytest.mark.parametrize("text", ["", "\n\n", "hello world\n", "Traceback (most recent call last):\nValueError: x\n"])
def test_logs_without_a_server_start_give_no_runs(text):
    result = parse_sglang_text(text)
    assert result.runs == []
    assert result.warnings
