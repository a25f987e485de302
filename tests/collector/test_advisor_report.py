"""The advice for a run: chosen on the first part, scored on the held-back rest, graphs-off runs
priced, the budget the current count, and the same figures from a store on both dialects."""

from hypothesis import given, settings, strategies as st

from replayscope.collector.analysis.advisor import choice
from replayscope.collector.analysis.advisor.report import RunFacts, advise, format_text, plan
from replayscope.collector.analysis.advisor.steps import StepRow, split

from .conftest import run_record, step


def rows_of(sizes, stage="decode", t0=1000.0, current=(1, 2, 4, 8)):
    out = []
    for i, bs in enumerate(sizes):
        covered = any(s >= bs for s in current)
        mode = ("graph" if bs in current else "padded") if covered else "eager"
        out.append(StepRow(t0 + i, stage, bs, mode, None if covered else "batch_too_large", 1))
    return out


def runner_facts(rows, backend="static", config=None):
    return RunFacts(run={"run_id": "r", "source": "runner", "backend": backend, "model": "tiny", "device": "cpu",
                         "config": config or {"capture_sizes": [1, 2, 4, 8], "padding": True}}, rows=rows)


def test_the_sizes_are_chosen_on_the_first_part_and_scored_on_the_rest():
    sizes = [1, 2, 3] * 35 + [6] * 45                   # the last 30% brings a size the first part never had
    advice = advise(runner_facts(rows_of(sizes)), budget=2)
    assert advice["split"] == {"fit_share": 0.7, "fit_steps": 105, "held_back_steps": 45,
                               "held_back_from_ts": 1105.0}
    proposed = plan(advice, "proposed")
    assert advice["sizes"][-1] == 4 and proposed["held_back"]["eager_steps"] == 45   # 3 proposed as 4 (aligned)
    assert proposed["fit"]["eager_steps"] == 0
    assert advice["verdict"]["worse"] is True and "Worse than the current list" in advice["verdict"]["text"]
    assert "Keep the current list" in format_text(advice)


def test_the_default_budget_is_the_runs_count_even_when_fewer_sizes_suffice():
    advice = advise(runner_facts(rows_of([1, 2, 3] * 40)))
    assert advice["budget"] == 4 and advice["budget_basis"] == "the run's 4 graphs"
    assert advice["sizes"] == [1, 2, 4] and advice["graphs_used"] == 3      # bs 3 padded onto 4 (aligned)


def test_steps_eager_for_reasons_the_list_does_not_decide_are_left_out_and_counted():
    rows = rows_of([1, 2, 3] * 40) + [StepRow(1200.0, "decode", 2, "eager", "lora_not_captured", 30),
                                      StepRow(1200.0, "prefill", 7, "eager", "prefill", 9)]
    advice = advise(runner_facts(rows))
    assert advice["left_out"] == {"lora_not_captured": 30} and advice["decode_steps"] == 120


def test_the_traffic_is_every_decode_stage_the_run_has_decode_and_mixed_alike():
    # vLLM: FULL rows are decode steps, PIECEWISE/NONE rows mixed; its capture sizes serve both
    rows = rows_of([1, 2, 3] * 40) + rows_of([4, 8, 16] * 20, stage="mixed", t0=1200.0) + [
        StepRow(1300.0, "prefill", 7, "eager", "prefill", 9)]
    advice = advise(runner_facts(rows))
    assert advice["stage"] == "decode+mixed" and advice["decode_steps"] == 120 + 60
    assert advise(runner_facts(rows_of([4, 8] * 30, stage="mixed")))["stage"] == "mixed"


def test_a_graphs_off_run_says_what_graphs_would_have_served_and_never_eager_steps_zero():
    rows = [StepRow(1000.0 + i, "decode", bs, "eager", "graphs_disabled", 1) for i, bs in enumerate([1, 2, 4, 8] * 20)]
    advice = advise(runner_facts(rows, backend="disabled", config={"capture_sizes": [1, 2, 4, 8], "max_bs": 32}))
    assert "--backend cuda" in advice["graphs_off"]
    current, proposed = plan(advice, "current"), plan(advice, "proposed")
    assert current["sizes"] == [] and current["held_back"]["eager_steps"] == current["held_back"]["steps"] > 0
    assert proposed["held_back"]["eager_steps"] == 0
    assert advice["budget"] == 7 and "captures by default" in advice["budget_basis"]
    assert "graphs would have served 100%" in advice["verdict"]["text"]
    assert "(graphs off)" in format_text(advice)
    assert advice["flags"][0]["text"].startswith("--backend cuda --capture-sizes ")


def test_timed_gpu_steps_make_the_objective_step_time():
    from replayscope.collector.analysis.advisor.objective import TimingRow

    rows = rows_of([1, 2, 3, 4, 40, 40] * 20, current=(1, 2, 4, 8))
    timings = [TimingRow("decode", 1, "graph", None, 10, 0.025), TimingRow("decode", 4, "graph", None, 10, 0.026),
               TimingRow("decode", 3, "padded", None, 10, 0.026), TimingRow("decode", 40, "eager", "batch_too_large",
                                                                             10, 0.10)]
    facts = runner_facts(rows, backend="cuda")
    facts.run["device"] = "NVIDIA H200"
    facts.timings = timings
    advice = advise(facts, budget=2)
    assert advice["objective"]["kind"] == "time" and advice["objective"]["provenance"] == "measured"
    assert advice["sizes"] == [4, 40]            # padding 1-3 up to 4 is nearly free; eager bs 40 is not
    assert plan(advice, "proposed")["held_back"]["cost_per_step"] < plan(advice, "current")["held_back"]["cost_per_step"]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=300), st.integers(1, 6))
def test_the_held_back_figures_are_the_proposals_score_on_the_held_back_steps(sizes, budget):
    rows = rows_of(sizes)
    advice = advise(runner_facts(rows), budget)
    fit_rows, held_rows, _ = split([r for r in rows], 0.7)
    from replayscope.collector.analysis.advisor.objective import rows_objective
    from replayscope.collector.analysis.advisor.steps import distribution
    objective = rows_objective(3.0, "default", "")
    for p in advice["plans"]:
        if held_rows:
            assert p["held_back"] == choice.score(distribution(held_rows), p["sizes"], objective).as_dict()
        else:
            assert p["held_back"] is None
    assert advice["split"]["fit_steps"] + advice["split"]["held_back_steps"] == len(sizes)


def test_a_stored_run_gives_the_same_advice_on_each_dialect(store):
    from replayscope.collector.analysis.advisor.stored import advice_for_run
    from replayscope.collector.ingest import ingest_events, ingest_run

    ingest_run(store, run_record())
    sizes = [1, 2, 3, 5, 9, 3, 2] * 20
    events = [step(i, 1000.0 + i, mode="graph" if bs in (1, 2, 4, 8) else ("padded" if bs < 8 else "eager"),
                   raw_bs=bs) for i, bs in enumerate(sizes)]
    for e in events:
        if e["mode"] == "padded":
            e["graph_bs"] = next(s for s in (1, 2, 4, 8) if s >= e["raw_bs"])
            e["padded_tokens"] = e["graph_bs"] - e["raw_bs"]
    ingest_events(store, "run-1", events)
    advice = advice_for_run(store, "run-1", budget=3)
    assert advice["decode_steps"] == len(sizes) and advice["split"]["held_back_steps"] > 0
    assert advice["split"]["fit_steps"] + advice["split"]["held_back_steps"] == len(sizes)
    assert advice_for_run(store, "nope") is None
