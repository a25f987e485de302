"""Every proposal is one its engine captures as given, and every flag line parses as the engine reads it.

The engines' parsers are mirrored from their source (vLLM ``vllm/engine/arg_utils.py``:
``--cudagraph-capture-sizes`` / ``--max-cudagraph-capture-size`` ints with ``nargs="+"``,
``--compilation-config`` JSON; SGLang ``server_args.py``: ``--cuda-graph-bs`` /
``--cuda-graph-bs-decode`` ints with ``nargs="+"``); this runner's is the real one.
"""

import argparse
import ast
import importlib.util
import json
import shlex

import pytest
from hypothesis import given, settings, strategies as st

from replayscope.collector.analysis.advisor import engines
from replayscope.collector.analysis.advisor.report import RunFacts, advise
from replayscope.collector.analysis.advisor.steps import StepRow


def vllm_parser():
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--cudagraph-capture-sizes", type=int, nargs="+")
    parser.add_argument("--max-cudagraph-capture-size", type=int)
    parser.add_argument("--compilation-config", type=json.loads)
    parser.add_argument("--enforce-eager", action="store_true")
    return parser


def sglang_parser():
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--cuda-graph-bs", type=int, nargs="+")
    parser.add_argument("--cuda-graph-bs-decode", type=int, nargs="+")
    parser.add_argument("--cuda-graph-backend-decode", choices=("full", "breakable", "tc_piecewise", "disabled"))
    parser.add_argument("--disable-cuda-graph", action="store_true")
    return parser


def sizes_set_by(line: dict) -> list[int] | None:
    """The capture sizes a flag line sets, parsed as its engine parses it (raises if it cannot)."""
    text = line["text"]
    if line["kind"] == "Python":
        call = ast.parse(f"f({text})" if "=" in text else text, mode="eval").body
        if call.keywords:
            (keyword,) = call.keywords
            value = ast.literal_eval(keyword.value)
            return value["cudagraph_capture_sizes"] if keyword.arg == "compilation_config" else None
        assert call.func.id == "CapturePlan"
        return list(ast.literal_eval(call.args[0]))
    argv = shlex.split(text)
    if line["engine"] == "runner":
        from replayscope.app.cli.run import config_from_args
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        from replayscope.app.cli.run import add_parsers
        add_parsers(sub)
        config = config_from_args(parser.parse_args(["run", "--preset", "tiny", *argv]))
        return None if config.backend == "disabled" else list(config.sizes)
    if line["engine"] == "vllm":
        args = vllm_parser().parse_args(argv)
        if args.enforce_eager:
            return []
        if args.cudagraph_capture_sizes is not None:
            assert args.max_cudagraph_capture_size == max(args.cudagraph_capture_sizes)   # vLLM's ValueError otherwise
            return args.cudagraph_capture_sizes
        return args.compilation_config["cudagraph_capture_sizes"]
    args = sglang_parser().parse_args(argv)
    if args.disable_cuda_graph or args.cuda_graph_backend_decode == "disabled":
        return []
    return args.cuda_graph_bs or args.cuda_graph_bs_decode


def vllm_configs():
    return st.fixed_dictionaries({
        "engine": st.just("vllm"),
        "vllm_version": st.sampled_from(["0.10.2", "0.11.0", "0.11.1", "0.13.0", None]),
        "max_num_seqs": st.one_of(st.none(), st.integers(1, 64)),
        "max_num_batched_tokens": st.one_of(st.none(), st.integers(8, 256)),
        "cudagraph_mode": st.sampled_from([None, "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY", "PIECEWISE"]),
        "num_speculative_tokens": st.sampled_from([None, 1, 3]),
        "tensor_parallel_size": st.sampled_from([1, 2, 4]),
        "enable_sp": st.booleans(),
        "capture_sizes": st.just([1, 2, 4, 8]),
    })


def sglang_configs():
    return st.fixed_dictionaries({
        "engine": st.just("sglang"),
        "max_running_requests": st.one_of(st.none(), st.integers(1, 64)),
        "enable_dp_attention": st.booleans(),
        "tp_size": st.sampled_from([1, 2, 4, 8]),
        "dp_size": st.sampled_from([1, 2]),
        "disable_cuda_graph_padding": st.booleans(),
        "capture_sizes": st.just([1, 2, 4, 8]),
    })


def runner_configs():
    return st.fixed_dictionaries({
        "workload": st.fixed_dictionaries({"max_running": st.integers(1, 64)}),
        "padding": st.booleans(),
        "capture_sizes": st.just([1, 2, 4, 8]),
    })


sequences = st.lists(st.tuples(st.integers(1, 120), st.integers(1, 30)), min_size=1, max_size=40)


def facts_of(config, seq, source="runner", backend="cuda"):
    rows = [StepRow(1000.0 + i, "decode", bs, "graph" if bs <= 8 else "eager",
                    None if bs <= 8 else "batch_too_large", n) for i, (bs, n) in enumerate(seq)]
    run = {"run_id": "r", "source": source, "backend": backend, "model": "m", "device": "cpu", "config": config}
    return RunFacts(run=run, rows=rows)


needs_runner_parser = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                         reason="the runner's flag lines are read by its own parser, which needs torch")


@needs_runner_parser
@settings(max_examples=300, deadline=None)
@given(st.one_of(vllm_configs().map(lambda c: (c, "vllm-log")), sglang_configs().map(lambda c: (c, "sglang-log")),
                 runner_configs().map(lambda c: (c, "runner"))), sequences, st.integers(1, 12))
def test_every_proposal_is_captured_as_given_by_its_engine(config_source, seq, budget):
    config, source = config_source
    advice = advise(facts_of(config, seq, source), budget)
    rules = engines.rules_for({"source": source, "backend": "cuda", "config": config})
    proposed = advice["sizes"]
    assert len(proposed) <= budget
    own = advice["validity"][0]
    assert own["own"] and own["problems"] == []
    assert rules.captured(proposed) == proposed
    for line in advice["flags"]:
        if line["engine"] == rules.engine:
            assert sizes_set_by(line) == (proposed or ([] if line["engine"] != "runner" else None))


@needs_runner_parser
@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 4096), min_size=1, max_size=12, unique=True).map(sorted))
def test_every_flag_line_sets_exactly_its_sizes(sizes):
    for engine in engines.ENGINES:
        for line in engines.flag_lines(engines.generic_rules(engine), sizes):
            assert sizes_set_by(line.as_dict()) == sizes, line


def test_a_vllm_proposal_above_the_runs_largest_size_raises_it_with_the_flag():
    # the case: a run capped at 64 whose traffic has 211-token batches
    rules = engines.rules_for({"source": "vllm-log", "config": {"engine": "vllm", "vllm_version": "0.13.0",
                                                               "max_capture_size": 64, "max_num_seqs": 32}})
    (new, old, python) = engines.flag_lines(rules, [1, 2, 5, 37, 70, 211])
    assert new.for_this_run and new.text == ("--cudagraph-capture-sizes 1 2 5 37 70 211 "
                                             "--max-cudagraph-capture-size 211")
    assert not old.for_this_run and old.text == "--compilation-config '{\"cudagraph_capture_sizes\": [1, 2, 5, 37, 70, 211]}'"
    assert rules.problems([1, 2, 5, 37, 70, 211]) == []


def test_vllm_rules_follow_what_the_run_logged():
    rules = engines.rules_for({"source": "vllm-log", "config": {
        "engine": "vllm", "vllm_version": "0.10.2", "max_num_seqs": 16, "max_num_batched_tokens": 2048,
        "cudagraph_mode": "FULL_DECODE_ONLY", "num_speculative_tokens": 3}})
    assert rules.label == "vLLM 0.10.2" and rules.cap == 64 and rules.multiple_of == 4
    assert rules.problems([4, 80]) == ["80 above 64 would serve no batch: under cudagraph_mode FULL_DECODE_ONLY "
                                       "mixed batches run without graphs, and a decode batch holds at most 64 tokens "
                                       "(max_num_seqs 16 x 4 tokens)"]
    assert [f.for_this_run for f in engines.flag_lines(rules, [4, 8])] == [False, True, False]
    assert rules.captured([4, 8, 4096]) == [4, 8, 4096]       # 0.10.x captures a given list as it is
    newer = engines.rules_for({"source": "vllm-log", "config": {"engine": "vllm", "vllm_version": "0.13.0",
                                                               "max_num_batched_tokens": 2048}})
    assert newer.captured([4, 8, 4096]) == [4, 8]             # 0.11.1 and later drop what is above the tokens
    unknown = engines.rules_for({"source": "vllm-log", "config": {"engine": "vllm"}})
    assert unknown.label == "vLLM (version not in the log)" and unknown.cap is None
    assert not any(f.for_this_run for f in engines.flag_lines(unknown, [1, 2]))
    assert any("max_num_batched_tokens" in u for u in unknown.unknown)


def test_sglang_drops_sizes_above_its_running_requests_and_captures_that_number_instead():
    rules = engines.rules_for({"source": "sglang-log", "config": {"engine": "sglang", "max_running_requests": 24,
                                                                 "enable_dp_attention": True, "tp_size": 8,
                                                                 "dp_size": 2}})
    assert rules.cap == 24 and rules.multiple_of == 4
    assert rules.captured([4, 8, 32]) == [4, 8, 24]
    assert "32 above 24" in rules.problems([4, 32])[0]


def test_graphs_off_runs_say_what_turns_graphs_on():
    vllm = engines.rules_for({"source": "vllm-log", "backend": "eager", "config": {"engine": "vllm",
                                                                                   "enforce_eager": True}})
    sglang = engines.rules_for({"source": "sglang-log", "backend": "disabled",
                                "config": {"engine": "sglang", "disable_cuda_graph": True}})
    runner = engines.rules_for({"source": "runner", "backend": "disabled", "config": {}})
    assert "--enforce-eager" in vllm.graphs_off and "--disable-cuda-graph" in sglang.graphs_off
    assert "--backend cuda" in runner.graphs_off
    assert engines.flag_lines(runner, [1, 8])[0].text == "--backend cuda --capture-sizes 1,8 --max-bs 8"


def test_the_engine_of_a_run():
    assert engines.engine_of({"source": "vllm-metrics", "config": {}}) == "vllm"
    assert engines.engine_of({"source": "trace", "config": {"trace": {"recipes": ["sglang-model-runner"]}}}) == "sglang"
    assert engines.engine_of({"source": "library", "config": {}}) == "runner"


def test_a_library_run_gets_a_capture_plan_to_paste():
    rules = engines.rules_for({"source": "library", "config": {}})
    assert engines.flag_lines(rules, [8])[0].text == "CapturePlan((8,))"
    assert engines.flag_lines(rules, [1, 8])[0].text == "CapturePlan((1, 8))"


# --- the engines' own default capture sizes (what a proposal is compared with) -------------------

def test_vllm_default_sizes_follow_vllm_v1():
    sizes = engines.vllm_default_sizes()
    assert sizes[:5] == (1, 2, 4, 8, 16)
    assert [b - a for a, b in zip(sizes[3:], sizes[4:]) if b <= 256] == [8] * 31   # 8..256 by 8
    assert [b - a for a, b in zip(sizes, sizes[1:]) if a >= 256] == [16] * 16      # 256..512 by 16
    assert sizes[-1] == 512 and len(sizes) == 51


def test_vllm_default_sizes_are_capped_at_max_size():
    assert engines.vllm_default_sizes(20) == (1, 2, 4, 8, 16)
    assert max(engines.vllm_default_sizes(300)) == 288


def test_sglang_default_sizes_follow_sglang():
    assert engines.sglang_default_sizes() == (1, 2, 4, 8) + tuple(range(16, 161, 8))
    assert engines.sglang_default_sizes(30) == (1, 2, 4, 8, 16, 24)


def test_a_traced_engine_run_is_advised_with_the_version_its_trace_read():
    """A traced run's record carries the engine's version (``version``): the rules name it; an
    SGLang log (which never prints it) still says it is not known."""
    traced = {"source": "trace", "backend": "trace", "version": "0.5.17",
              "config": {"trace": {"recipes": ["sglang", "sglang output streamer"]}}}
    assert engines.rules_for(traced).label == "SGLang 0.5.17"
    assert not [u for u in engines.rules_for(traced).unknown if "SGLang version" in u]
    logged = engines.rules_for({"source": "sglang-log", "backend": "cuda", "config": {}})
    assert logged.label == "SGLang (version not in the log)"
    assert [u for u in logged.unknown if "SGLang version" in u]
    vllm = {"source": "trace", "backend": "trace", "version": "0.25.0", "config": {"trace": {"recipes": ["vllm"]}}}
    assert engines.rules_for(vllm).label == "vLLM 0.25.0"
