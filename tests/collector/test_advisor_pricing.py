"""A list's capture time and pool memory, from a run's own captures or earlier runs', each marked."""

import pytest

from replayscope.collector.analysis.advisor.pricing import CaptureSet, capture_time, pool_memory

MIB = 2**20


def runner_captures():
    # captured largest first into one pool: bs 32 needed 64 MiB, each smaller one added 2 MiB
    return CaptureSet("r1", "measured", seconds={32: 0.30, 16: 0.20, 8: 0.15, 4: 0.125, 1: 0.11},
                      pool_growth={32: 64 * MIB, 16: 2 * MIB, 8: 2 * MIB, 4: 2 * MIB, 1: 2 * MIB}, first=32,
                      total_s=0.9, total_bytes=72 * MIB, sizes=(1, 4, 8, 16, 32))


def test_a_list_of_captured_sizes_is_priced_as_measured():
    time, pool = capture_time([1, 8, 32], runner_captures()), pool_memory([1, 8, 32], runner_captures())
    assert (time.value, time.error, time.provenance) == (pytest.approx(0.56), None, "measured")
    assert (pool.value, pool.provenance) == (68 * MIB, "measured")


def test_other_sizes_come_from_a_line_through_the_captures_with_its_error():
    time = capture_time([2, 8, 24], runner_captures())
    assert time.provenance == "fit" and time.error is not None and time.error > 0
    assert time.value == pytest.approx(0.15 + 2 * (0.1 + 0.00625 * 2) + 0.00625 * 22, abs=0.05)
    assert "from a line through this run's 5 captured sizes" in time.basis


def test_a_larger_largest_size_scales_the_footprint_and_says_it_is_estimated():
    pool = pool_memory([8, 64], runner_captures())
    assert pool.provenance == "estimated" and pool.value == 128 * MIB + 2 * MIB
    assert "scaled from bs 32" in pool.basis


def test_earlier_runs_give_the_footprint_line_and_the_time_when_this_run_captured_nothing():
    earlier = [runner_captures(),
               CaptureSet("r0", "measured", seconds={64: 0.5, 1: 0.1}, pool_growth={64: 120 * MIB, 1: 2 * MIB},
                          first=64, sizes=(1, 64))]
    pool = pool_memory([1, 48], None, earlier)
    assert pool.provenance == "estimated" and pool.value == pytest.approx((92 + 2) * MIB, rel=0.01)
    time = capture_time([1, 48], None, earlier)
    assert time.provenance == "estimated" and time.value is not None


def test_a_log_with_only_totals_gives_a_mean_per_graph_and_the_pool_of_its_largest_graph():
    vllm = CaptureSet("v", "log", total_s=2.0, total_bytes=400 * MIB, sizes=(1, 2, 4, 8))
    time = capture_time([1, 2, 3, 4, 5, 6], vllm)
    assert (time.value, time.provenance) == (pytest.approx(3.0), "estimated") and "0.5 s per graph" in time.basis
    assert pool_memory([1, 8], vllm).value == 400 * MIB


def test_nothing_measured_is_not_priced_and_no_graphs_cost_nothing():
    assert capture_time([1, 2], None).value is None and pool_memory([1, 2], None).value is None
    assert capture_time([], None).value == 0.0 and capture_time([], None).provenance == "none"
