"""The trace benchmark's CPU parts run (the GPU parts run on the H200, see docs/gpu-results.md):
what a hooked graph-tree call and a traced step cost on the host, with the tracer's real hooks on
stand-in graph objects. Figures are not judged here (benchmarks/, never timed tests)."""

import statistics

import pytest

from benchmarks import trace_bench


def test_the_host_costs_of_a_traced_step_and_of_a_graph_tree_call_are_measured():
    costs = {**trace_bench.host_costs(calls=2000), **trace_bench.tree_call_cost(calls=1000)}
    for key in ("hooked_replay_us", "traced_step_us", "traced_step_all_timed_us", "traced_tree_call_us",
                "tree_call_us"):
        assert costs[key] > 0, key
    assert costs["tree_call_added_us"] == costs["traced_tree_call_us"] - costs["tree_call_us"]


def test_each_stage_of_a_traced_step_is_measured_against_the_floor_and_every_step_recorded(tmp_path):
    from benchmarks import trace_stages

    result = trace_stages.measure(rounds=2, steps=200, workdir=str(tmp_path))
    assert set(result["stages"]) == {"floor", "spin", "dispatch", "replay hook", "timing", "routing", "event", "traced step",
                                     "events dropped", "step path", "step path, untimed", "step path, timed 1 in 8",
                                     "step path, timed 1 in 64", "step path, no event",
                                     "graph-tree step", "sink", "converted here",
                                     "writer cpu"}
    assert result["stages"]["writer cpu"]["median"] >= 0
    # graph, padded and eager steps all ran through the traced step (each round's, and the run's first)
    assert result["traced_steps"] == 2 * 200 + 1
    assert set(result["modes"]) == set(result["graph_tree_modes"]) == {"graph", "padded", "eager"}


def test_the_stages_are_measured_in_the_host_bound_loop_with_its_scheduler_pass_and_every_step_recorded(tmp_path):
    from benchmarks import trace_stages

    result = trace_stages.measure(rounds=2, steps=120, workdir=str(tmp_path), core="python", program_name="host")
    assert result["program"] == "host" and result["spin_alone_us"] > 0
    assert {"spin", "traced step", "step path", "graph-tree step"} <= set(result["stages"])
    assert result["traced_steps"] == 2 * 120 + 1
    # batches 1, 3, 8, 12, 24 on graphs of 1..16 (stand-ins running the layers on the CPU): 2 graph, 2 padded, 1 eager
    assert result["modes"]["eager"] == 2 * 120 // 5 and result["modes"]["graph"] + result["modes"]["padded"] == 4 * 2 * 120 // 5 + 1
    assert result["untraced_us"]["median"] > 0


def test_the_host_bound_loop_runs_traced_and_untraced_and_its_events_hold_every_step(tmp_path):
    from benchmarks import trace_loop

    row = trace_loop.measure("cpu", "host", trace_loop.PROGRAMS["cpu"]["host"], rounds=2, steps=100,
                               out=tmp_path)
    assert len(row["rounds"]["traced"]) == len(row["rounds"]["untraced"]) == 2
    assert row["step_events"] == row["steps_run"] == trace_loop.WARMUP + 2 * 100
    assert row["modes"] == {"eager": row["steps_run"]}
    # the host's launch loop is part of each round's wall time (its synchronises left out)
    for side in ("traced", "untraced"):
        assert all(0 < r["host_us_per_step"] <= r["us_per_step"] for r in row["rounds"][side])
    assert row["host_added_us"]["median"] == pytest.approx(statistics.median(
        [t["host_us_per_step"] - u["host_us_per_step"] for u, t in zip(row["rounds"]["untraced"], row["rounds"]["traced"])]))
    assert "| cpu host |" in trace_loop.table([row], 2)


@pytest.mark.gpu
def test_the_host_bound_loop_on_cuda_replays_pads_and_runs_eager_above_the_largest_graph(tmp_path):
    from benchmarks import trace_loop

    row = trace_loop.measure("cuda", "host", trace_loop.PROGRAMS["cuda"]["host"], rounds=2, steps=600,
                             out=tmp_path)
    assert row["step_events"] == row["steps_run"] == trace_loop.WARMUP + 2 * 600
    # batches 1, 3, 8, 13, 24, 40 in turn on graphs of 1..32: 2 graph, 3 padded, 1 eager in every 6
    assert set(row["modes"]) == {"graph", "padded", "eager"}
    assert abs(row["modes"]["padded"] - row["steps_run"] / 2) <= 3
    for side in ("traced", "untraced"):       # the launch loop alone: never more than the wall clock's step
        assert all(0 < r["host_us_per_step"] <= r["us_per_step"] for r in row["rounds"][side])


@pytest.mark.gpu
def test_the_step_timing_benchmark_measures_each_side_on_the_host_and_on_the_wall_clock():
    from benchmarks import step_timing_bench

    result = step_timing_bench.measure(rounds=2, launches=300)
    assert result["sides"]["bare replay"]["host"]["added"] == 0
    for row in result["sides"].values():
        for clock in ("host", "wall"):
            assert len(row[clock]["rounds"]) == 2 and all(v > 0 for v in row[clock]["rounds"])
        assert row["host"]["median"] <= row["wall"]["median"]     # the launch loop is part of the wall clock's time
    assert result["reading_per_timing_us"]["median"] > 0
    assert "| CudaClock pair |" in step_timing_bench.markdown(result)


@pytest.mark.gpu
def test_the_stages_in_the_host_bound_loop_on_cuda_include_its_cuda_events_alone(tmp_path):
    import torch

    from benchmarks import trace_stages

    torch.cuda.init()
    result = trace_stages.measure(rounds=2, steps=100, workdir=str(tmp_path), program_name="host")
    every = trace_stages.TraceSettings.time_every
    assert {f"CUDA event pair, 1 in {every}", f"CUDA start event, 1 in {every}", f"CUDA end event, 1 in {every}",
            f"CUDA end untimed, 1 in {every}", "step path, untimed", "step path, timed 1 in 8"} <= set(result["stages"])
    # batches 1, 3, 8, 12, 24 on CUDA graphs of 1..16: graph, padded and eager steps, every one recorded
    assert set(result["modes"]) == {"graph", "padded", "eager"} and result["traced_steps"] == 2 * 100 + 1


def test_a_traced_steps_own_host_time_is_read_step_by_step_in_the_host_bound_loop(tmp_path):
    from benchmarks import step_overhead

    result = step_overhead.measure(rounds=2, steps=60, workdir=str(tmp_path), core="python")
    assert {"step path, untimed", "step path", "traced step"} <= set(result["sides"])
    assert result["sides"]["traced step"]["steps"] == 2 * 60
    assert result["floor_us"]["median"] > 0
    assert result["traced_steps"] == 2 * 60 + 1          # every step of the rounds recorded, and the run's first
    assert result["records"] == {}                        # CUDA event records: on CUDA only


def test_what_a_record_costs_the_steps_after_it_is_read_against_the_same_places_without_records():
    from benchmarks import step_overhead

    base = [{"steps": [10_000.0] * 8}, {"steps": [12_000.0] * 8}]
    # a record after steps 0 and 4 (1 in 4): the steps after them (1, 5) take 3 µs more, the others 1 µs
    side = [{"steps": [v + (3000.0 if i in (1, 5) else 1000.0) for i, v in enumerate(r["steps"])]} for r in base]
    assert step_overhead.after_records(side, base, 4, 8) == pytest.approx((3.0, 1.0))
