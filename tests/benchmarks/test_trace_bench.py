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
