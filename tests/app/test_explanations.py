"""Every fallback reason is explained, with vLLM and SGLang equivalents where they exist."""

import pytest

from replayscope.collector.analysis.explanations import cost_sentence, reason_costs, size_band
from replayscope.collector.analysis.reasons import EXPLANATIONS, explain
from replayscope.contract.wire import REASONS, custom_reason


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


def batch(stage, raw_bs, mode, steps, seconds, reason=None, timed=None):
    return {"stage": stage, "raw_bs": raw_bs, "mode": mode, "reason": reason, "steps": steps,
            "timed_steps": steps if timed is None else timed, "duration_s": seconds}


def test_cost_compares_eager_with_replays_of_the_same_stage_and_size_band():
    breakdown = [{"reason": "lora_not_captured", "steps": 100, "duration_s": 0.5, "share": 0.5}]
    rows = [batch("decode", 8, "eager", 100, 0.5, "lora_not_captured"),
            batch("decode", 12, "graph", 400, 0.4),       # same band (8-15): 1 ms per replay
            batch("decode", 2, "graph", 900, 0.09)]       # another band: ignored
    [cost] = reason_costs(breakdown, rows)
    assert cost["steps"] == 100 and cost["time_s"] == 0.5
    assert cost["compared"]["replay_s"] == pytest.approx(0.1)
    assert cost["compared"]["extra_s"] == pytest.approx(0.4)
    assert cost["compared"]["bands"] == ["decode bs 8\u201315"]
    assert cost["not_compared"] == []
    assert cost["explanation"]["title"].startswith("LoRA")
    assert cost_sentence(cost) == (
        "100 eager steps (50.0% of eager steps); 500 ms spent eager over 100 timed steps. "
        "Against graph replays measured at the same sizes in this run (decode bs 8\u201315): 100 steps "
        "took 500 ms eager, replay would have taken about 100 ms: 400 ms more than replay.")


def test_a_batch_above_every_graph_has_no_replay_to_compare_with():
    # the "about 0.000 s more than graph replay": no replay of bs 33-63 was measured
    breakdown = [{"reason": "batch_too_large", "steps": 40, "duration_s": 0.2, "share": 1.0}]
    rows = [batch("decode", 40, "eager", 40, 0.2, "batch_too_large"), batch("decode", 8, "graph", 10, 0.01)]
    [cost] = reason_costs(breakdown, rows)
    assert cost["compared"] is None
    text = cost_sentence(cost)
    assert "0.000" not in text and "more than" not in text
    assert "40 steps (decode bs 32\u201363): no cost against graphs, no graph replay of these sizes " \
           "was measured in this run." in text


def test_untimed_steps_say_their_time_was_not_measured():
    breakdown = [{"reason": "unknown", "steps": 21, "duration_s": 0.0, "share": 1.0}]
    rows = [batch("decode", 20, "eager", 21, 0.0, "unknown", timed=0), batch("decode", 16, "graph", 5, 0.0, timed=0)]
    [cost] = reason_costs(breakdown, rows)
    assert cost["time_s"] is None and cost["compared"] is None
    assert "their time was not measured" in cost_sentence(cost)
    assert "0.000" not in cost_sentence(cost)


def test_counts_without_batch_sizes_are_not_compared():
    [cost] = reason_costs([{"reason": "unknown", "steps": 7, "duration_s": 0.0, "share": 1.0}], [])
    assert cost["not_compared"] == [{"why": "reported as counts without a batch size", "steps": 7, "bands": []}]


def test_prefill_never_has_a_replay_of_its_shape():
    rows = [batch("prefill", 4, "eager", 5, 0.1, "prefill"), batch("decode", 4, "graph", 50, 0.05)]
    [cost] = reason_costs([{"reason": "prefill", "steps": 5, "duration_s": 0.1, "share": 1.0}], rows)
    assert cost["compared"] is None


def test_cpu_stand_in_costs_say_they_are_cpu_timings():
    rows = [batch("decode", 8, "eager", 10, 0.2, "lora_not_captured"), batch("decode", 8, "graph", 10, 0.285)]
    [cost] = reason_costs([{"reason": "lora_not_captured", "steps": 10, "duration_s": 0.2, "share": 1.0}],
                          rows, stand_in=True)
    assert cost_sentence(cost).startswith("CPU stand-in (static backend): these are CPU timings")
    assert "less than replay" in cost_sentence(cost)


def test_size_bands_are_powers_of_two():
    assert [size_band(b) for b in (1, 2, 3, 4, 7, 8, 33)] == [(1, 1), (2, 3), (2, 3), (4, 7), (4, 7), (8, 15),
                                                             (32, 63)]


BREAKDOWN = [{"reason": "batch_too_large", "steps": 10, "duration_s": 0.1, "share": 1.0}]


@pytest.mark.parametrize("source, order", [
    ("vllm-log", ["vLLM", "replayscope", "SGLang"]), ("vllm-metrics", ["vLLM", "replayscope", "SGLang"]),
    ("sglang-log", ["SGLang", "replayscope", "vLLM"]), ("sglang-metrics", ["SGLang", "replayscope", "vLLM"]),
    ("runner", ["replayscope", "vLLM", "SGLang"]), (None, ["replayscope", "vLLM", "SGLang"])])
def test_a_reason_card_leads_with_the_flags_of_the_runs_own_engine(source, order):
    """Every card on an engine's run led with this runner's flags (--max-bs, --capture-sizes),
    which a vLLM or SGLang user cannot pass; now the run's engine's own come first."""
    [cost] = reason_costs(BREAKDOWN, [], source=source)
    assert [f["engine"] for f in cost["flags"]] == order
    assert cost["flags"][order.index("vLLM")]["lines"] == list(explain("batch_too_large").vllm)


def test_a_traced_engines_cards_lead_with_that_engines_flags():
    vllm = {"trace": {"recipes": ["vllm", "vllm cudagraph dispatcher"]}}
    [cost] = reason_costs(BREAKDOWN, [], source="trace", config=vllm)
    assert [f["engine"] for f in cost["flags"]][0] == "vLLM"
    [cost] = reason_costs(BREAKDOWN, [], source="trace", config={"trace": {"recipes": ["transformers generate"]}})
    assert [f["engine"] for f in cost["flags"]][0] == "replayscope"


def test_the_run_page_card_of_an_imported_vllm_run_shows_vllms_flags_first(tmp_path):
    from replayscope.app import components as c
    from replayscope.collector.analysis.explanations import explain_run
    from replayscope.collector.ingest import ingest_events, ingest_run
    from replayscope.collector.store import Store
    from tests.app.synthetic import run_record

    store = Store.open(f"sqlite:///{tmp_path}/v.db")
    record = run_record("v1", source="vllm-log")
    ingest_run(store, record)
    ingest_events(store, "v1", [{"seq": i, "ts": record["started_at"] + i, "kind": "step", "stage": "decode",
                                 "mode": "eager", "raw_bs": 600, "graph_bs": None, "num_tokens": 600,
                                 "padded_tokens": 0, "reason": "batch_too_large", "duration_s": None}
                                for i in range(3)])
    [cost] = explain_run(store, "v1")
    store.dispose()
    card = c.explanation_card(cost, cost_sentence(cost))
    flags = card.children[-1].children[1]
    engines = [row.children[0].children for row in flags.children]
    assert engines == ["vLLM", "replayscope", "SGLang"]
    assert flags.children[0].children[1].children[0].children == explain("batch_too_large").vllm[0]


@pytest.mark.parametrize("source,config,expected", [
    ("sglang-log", None, ["decode bs 32\u201363", "prefill 256\u2013511 tokens"]),
    ("vllm-log", None, ["decode bs 32\u201363", "prefill 256\u2013511 tokens"]),
    ("trace", {"trace": {"recipes": ["vllm 0.25 model runner V2"]}}, ["decode bs 32\u201363", "prefill 256\u2013511 tokens"]),
    ("trace", {"trace": {"recipes": []}}, ["decode bs 32\u201363", "prefill bs 256\u2013511"]),   # a program's own step
    ("library", None, ["decode bs 32\u201363", "prefill bs 256\u2013511"]),                     # this runner
])
def test_an_engines_prefill_sizes_are_named_as_tokens(source, config, expected):
    """vLLM and SGLang size prefill (and mixed) batches by tokens; this runner and a traced program's
    own step by requests: the size bands say which."""
    rows = [batch("prefill", 300, "eager", 3, 0.0, "unknown", timed=0), batch("decode", 40, "eager", 2, 0.0, "unknown", timed=0)]
    [cost] = reason_costs([{"reason": "unknown", "steps": 5, "duration_s": 0.0, "share": 1.0}], rows,
                          source=source, config=config)
    assert cost["not_compared"][0]["bands"] == expected


@pytest.mark.parametrize("status, words", [("interrupted", "Run interrupted"), ("failed", "Run failed"),
                                           ("finished", "Run ended with an error"), (None, "Run ended with an error")])
def test_a_runs_error_is_introduced_by_how_it_ended(status, words):
    from replayscope.app.headlines import ended_how
    assert ended_how(status) == words
