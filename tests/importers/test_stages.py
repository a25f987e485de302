"""How each engine's batches become stages (collector/importers/stages.py), on the engines'
real log formats: vLLM's --cudagraph-metrics rows by the server's cudagraph mode, SGLang's
Decode/Prefill batch lines, and SGLang's 1-in-N decode lines said as a sample."""

from __future__ import annotations

from collections import Counter

import pytest

from replayscope.collector.importers.stages import SGLANG_DECODE_LOG_INTERVAL, log_sample, vllm_row_stage
from replayscope.contract.wire import DECODE_STAGES, STEP_STAGES

from .conftest import MTIME, kind, read_fixture, sglang, the_only_run, vllm

SERVING = "vllm_v013_cudagraph_metrics_serving.log"
SGLANG_SERVING = "sglang_v046_decode_sample_serving.log"


# vLLM's CUDAGraphMode (vllm/config/compilation.py) and the runtime modes the dispatcher returns
# for it (vllm/v1/cudagraph_dispatcher.py): FULL graphs hold only uniform decode batches where
# decode has a FULL routine of its own (separate_routine(), decode_mode() FULL).
@pytest.mark.parametrize("mode, runtime_mode, stage", [
    ("FULL_AND_PIECEWISE", "FULL", "decode"),
    ("FULL_AND_PIECEWISE", "PIECEWISE", "mixed"),   # the mixed routine (and, on V1, a uniform batch no FULL graph fits)
    ("FULL_AND_PIECEWISE", "NONE", "mixed"),        # above the largest size: prefill-heavy or not, not said
    ("FULL_DECODE_ONLY", "FULL", "decode"),
    ("FULL_DECODE_ONLY", "NONE", "mixed"),
    ("FULL", "FULL", "mixed"),                      # one FULL routine for every batch
    ("FULL", "NONE", "mixed"),
    ("PIECEWISE", "PIECEWISE", "mixed"),
    ("PIECEWISE", "NONE", "mixed"),
    ("NONE", "NONE", "mixed"),
    (None, "FULL", "mixed"),                        # the mode was not printed: no evidence of decode-only
])
def test_a_vllm_row_is_decode_only_where_the_mode_keeps_full_graphs_for_uniform_decode(mode, runtime_mode, stage):
    got, evidence = vllm_row_stage(mode, runtime_mode)
    assert got == stage and got in STEP_STAGES
    assert (evidence is not None) == (stage == "decode")          # the inferred stage says why
    if evidence:
        assert mode in evidence and "uniform decode" in evidence


def _by_stage(run) -> dict[tuple[str, str], int]:
    out: Counter = Counter()
    for e in kind(run, "step_counts"):
        out[(e["stage"], e["mode"])] += e["count"]
    return dict(out)


def test_a_vllm_serving_log_splits_into_decode_rows_and_mixed_ones():
    run = vllm(SERVING)
    rows = kind(run, "step_counts")
    assert {(e["stage"], e["mode"]) for e in rows} == {("decode", "padded"), ("decode", "graph"),
                                                      ("mixed", "padded"), ("mixed", "eager")}
    for e in rows:
        assert e["stage"] in DECODE_STAGES
        if e["stage"] == "decode":                   # a FULL row: 7, 12, 16 or 30 tokens, padded to a size
            assert e["raw_bs"] in (7, 12, 16, 30) and e["evidence"].startswith("a FULL row under FULL_AND_PIECEWISE")
        elif e["mode"] == "eager":                   # NONE: more tokens than the largest size, 512
            assert e["raw_bs"] in (1100, 2048) and e["reason"] == "batch_too_large"
        else:                                        # PIECEWISE
            assert e["raw_bs"] in (140, 500) and e.get("evidence") is None
    # 18 tables: the FULL rows' counts (180-3i, 96+i, 64, 40+2i), PIECEWISE 25 + 12, NONE 8+3 then 150+60
    assert _by_stage(run) == {("decode", "padded"): sum(180 - 3 * i + 96 + i + 40 + 2 * i for i in range(18)),
                              ("decode", "graph"): 64 * 18,
                              ("mixed", "padded"): 37 * 18,
                              ("mixed", "eager"): 5 * 11 + 13 * 210}


def test_a_vllm_table_under_mode_full_says_no_row_is_decode_only():
    text = read_fixture(SERVING).replace("- Mode: FULL_AND_PIECEWISE", "- Mode: FULL").replace(
        "CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)", "CUDAGraphMode.FULL: 2")
    from replayscope.collector.importers import parse_vllm_text

    run = the_only_run(parse_vllm_text(text, path=SERVING, mtime=MTIME))
    assert {e["stage"] for e in kind(run, "step_counts")} == {"mixed"}


def test_vllm_full_decode_only_and_eager_servers():
    decode_only = vllm("vllm_full_decode_only_metrics.log")
    assert _by_stage(decode_only) == {("decode", "padded"): 50, ("decode", "graph"): 20, ("mixed", "eager"): 5}
    eager = vllm("vllm_v011_enforce_eager_metrics.log")       # mode NONE: nothing says decode-only
    assert _by_stage(eager) == {("mixed", "eager"): 42}
    assert {e["reason"] for e in kind(eager, "step_counts")} == {"graphs_disabled"}


def test_sglang_decode_and_prefill_lines_keep_their_stage():
    run = sglang(SGLANG_SERVING)
    stages = Counter((e["stage"], e["mode"]) for e in kind(run, "step"))
    assert set(stages) == {("decode", "graph"), ("decode", "padded"), ("decode", "eager"), ("prefill", "eager")}
    text = read_fixture(SGLANG_SERVING)
    assert sum(n for (stage, _), n in stages.items() if stage == "decode") == text.count("Decode batch.")
    assert stages[("prefill", "eager")] == text.count("Prefill batch.")
    eager_decode = {e["reason"] for e in kind(run, "step") if e["stage"] == "decode" and e["mode"] == "eager"}
    assert eager_decode == {"batch_too_large"}                     # #running-req above cuda_graph_max_bs 32


def test_sglang_decode_lines_are_a_sample_of_the_interval_the_log_prints():
    run = sglang(SGLANG_SERVING)                                   # server_args print decode_log_interval=40
    assert log_sample("sglang-log", run.run["config"]) == {"stage": "decode", "every": 40, "provenance": "log"}
    unprinted = sglang("sglang_padding_disabled.log")              # no server_args line: SGLang's default
    assert "decode_log_interval" not in unprinted.run["config"]
    assert log_sample("sglang-log", unprinted.run["config"]) == {
        "stage": "decode", "every": SGLANG_DECODE_LOG_INTERVAL, "provenance": "inferred"}
    assert log_sample("sglang-log", {"decode_log_interval": 1}) is None          # every batch logged
    assert log_sample("vllm-log", run.run["config"]) is None                     # vLLM's tables count all
    assert log_sample("sglang-metrics", {}) is None                              # counters count all
