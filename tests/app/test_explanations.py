"""Every fallback reason is explained, with vLLM and SGLang equivalents where they exist."""

import pytest

from collector.explanations import EXPLANATIONS, cost_sentence, explain, reason_costs
from runner.wire import REASONS, custom_reason


@pytest.mark.parametrize("reason", REASONS)
def test_every_wire_reason_has_a_full_explanation(reason):
    e = explain(reason)
    assert e.reason == reason
    assert e.title and e.what and e.why and e.change
    assert e.vllm and e.sglang


def test_no_explanation_for_a_reason_outside_the_vocabulary():
    assert set(EXPLANATIONS) == set(REASONS)


def test_unknown_says_the_engine_did_not_report_a_cause():
    assert "did not report" in explain("unknown").title.lower() + explain("unknown").what.lower()


def test_flags_name_the_engines_equivalents():
    assert "--cuda-graph-max-bs" in " ".join(explain("batch_too_large").sglang)
    assert "--cudagraph-capture-sizes" in " ".join(explain("batch_too_large").vllm)
    assert "--max-num-seqs" in " ".join(explain("batch_too_large").vllm)
    assert "--disable-cuda-graph-padding" in " ".join(explain("not_captured").sglang)
    assert "--enforce-eager" in " ".join(explain("graphs_disabled").vllm)
    assert "--disable-cuda-graph" in " ".join(explain("graphs_disabled").sglang)
    assert "cudagraph_mode" in " ".join(explain("prefill").vllm)
    assert "--lora-graph-adapters" in " ".join(explain("lora_not_captured").change)


def test_a_custom_reason_is_explained_in_the_callers_words():
    e = explain(custom_reason("tokenizer hiccup"))
    assert "tokenizer hiccup" in e.title and "tokenizer hiccup" in e.what


def test_cost_on_a_run_comes_from_the_breakdown_and_step_times():
    breakdown = [{"reason": "batch_too_large", "steps": 100, "duration_s": 0.5, "share": 0.1}]
    step_times = [{"stage": "decode", "mode": "graph", "steps": 900, "total_s": 0.9, "mean_s": 0.001},
                  {"stage": "decode", "mode": "eager", "steps": 100, "total_s": 0.5, "mean_s": 0.005}]
    [cost] = reason_costs(breakdown, step_times)
    assert cost["steps"] == 100 and cost["time_s"] == 0.5
    assert cost["extra_s"] == pytest.approx(0.4)
    assert cost["explanation"]["title"].startswith("Batch larger")
    assert cost_sentence(cost) == ("100 eager steps (10.0% of eager steps); 0.500 s spent eager; "
                                   "about 0.400 s more than graph replay would have taken.")


def test_cost_without_replayed_steps_has_no_estimate():
    [cost] = reason_costs([{"reason": "graphs_disabled", "steps": 5, "duration_s": 0.1, "share": 1.0}],
                          [{"stage": "decode", "mode": "eager", "steps": 5, "total_s": 0.1}])
    assert cost["extra_s"] is None


def test_prefill_has_no_graph_comparison():
    [cost] = reason_costs([{"reason": "prefill", "steps": 5, "duration_s": 0.1, "share": 1.0}],
                          [{"stage": "decode", "mode": "graph", "steps": 5, "total_s": 0.01}])
    assert cost["extra_s"] is None
