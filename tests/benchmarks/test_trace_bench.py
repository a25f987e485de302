"""The trace benchmark's CPU parts run (the GPU parts run on the H200, see docs/gpu-results.md):
what a hooked graph-tree call and a traced step cost on the host, with the tracer's real hooks on
stand-in graph objects. Figures are not judged here (benchmarks/, never timed tests)."""

from benchmarks import trace_bench


def test_the_host_costs_of_a_traced_step_and_of_a_graph_tree_call_are_measured():
    costs = {**trace_bench.host_costs(calls=2000), **trace_bench.tree_call_cost(calls=1000)}
    for key in ("hooked_replay_us", "traced_step_us", "traced_step_all_timed_us", "traced_tree_call_us",
                "tree_call_us"):
        assert costs[key] > 0, key
    assert costs["tree_call_added_us"] == costs["traced_tree_call_us"] - costs["tree_call_us"]


def test_each_stage_of_a_traced_step_is_measured_against_the_floor_and_every_step_recorded():
    from benchmarks import trace_stages

    result = trace_stages.measure(rounds=2, steps=200, workdir=str(__import__("tempfile").mkdtemp()))
    assert set(result["stages"]) == {"floor", "dispatch", "timing", "routing", "event", "traced step",
                                     "events dropped", "graph-tree step", "sink"}
    # graph, padded and eager steps all ran through the traced step (each round's, and the run's first)
    assert result["traced_steps"] == 2 * 200 + 1
    assert set(result["modes"]) == set(result["graph_tree_modes"]) == {"graph", "padded", "eager"}


def test_the_host_bound_loop_runs_traced_and_untraced_and_its_events_hold_every_step(tmp_path):
    from benchmarks import trace_loop

    row = trace_loop.measure("cpu", "host", trace_loop.PROGRAMS["cpu"]["host"], rounds=2, steps=100,
                               out=tmp_path)
    assert len(row["rounds"]["traced"]) == len(row["rounds"]["untraced"]) == 2
    assert row["step_events"] == row["steps_run"] == trace_loop.WARMUP + 2 * 100
    assert row["modes"] == {"eager": row["steps_run"]}
    assert "| cpu host |" in trace_loop.table([row], 2)
