"""The advisor chooses capture sizes exactly: checked against brute force on small cases."""

from itertools import combinations

import pytest
from hypothesis import given, settings, strategies as st

from collector.advisor import (advise, choose_sizes, estimate_capture, flags_for,
                               format_advice, plan_cost)

distributions = st.dictionaries(st.integers(1, 40), st.integers(1, 50), min_size=1, max_size=8)


def brute_force(dist, budget, weight, cover_largest, max_size=None):
    candidates = sorted(s for s in dist if max_size is None or s <= max_size)
    best = plan_cost(dist, [], weight).cost if not (cover_largest and budget and candidates) else float("inf")
    for k in range(1, min(budget, len(candidates)) + 1):
        for subset in combinations(candidates, k):
            if cover_largest and subset[-1] != candidates[-1]:
                continue
            best = min(best, plan_cost(dist, subset, weight).cost)
    return best


@settings(max_examples=300, deadline=None)
@given(distributions, st.integers(0, 5), st.sampled_from([0.0, 0.5, 1.0, 3.0, 10.0]), st.booleans())
def test_choice_is_optimal_against_every_subset(dist, budget, weight, cover_largest):
    sizes = choose_sizes(dist, budget, eager_weight=weight, cover_largest=cover_largest)
    assert len(sizes) <= budget
    assert set(sizes) <= set(dist)
    assert plan_cost(dist, sizes, weight).cost == pytest.approx(
        brute_force(dist, budget, weight, cover_largest))


@settings(max_examples=150, deadline=None)
@given(distributions, st.integers(1, 4), st.integers(1, 40))
def test_choice_respects_the_size_cap(dist, budget, cap):
    sizes = choose_sizes(dist, budget, eager_weight=3.0, max_size=cap, cover_largest=False)
    assert all(s <= cap for s in sizes)
    assert plan_cost(dist, sizes, 3.0).cost == pytest.approx(
        brute_force(dist, budget, 3.0, False, max_size=cap))


@settings(max_examples=100, deadline=None)
@given(distributions, st.integers(1, 6))
def test_largest_observed_size_is_covered_when_budget_allows(dist, budget):
    sizes = choose_sizes(dist, budget, eager_weight=0.0)
    assert sizes[-1] == max(dist)
    assert plan_cost(dist, sizes).eager_steps == 0


def test_budget_zero_means_everything_eager():
    assert choose_sizes({1: 5, 8: 3}, 0) == []
    assert plan_cost({1: 5, 8: 3}, []).eager_steps == 8


def test_budget_at_least_distinct_sizes_captures_each_exactly():
    dist = {1: 10, 3: 4, 7: 2, 12: 1}
    sizes = choose_sizes(dist, 10)
    assert sizes == [1, 3, 7, 12]
    assert plan_cost(dist, sizes).padded_rows == 0


def test_plan_cost_counts_padding_and_eager_rows():
    cost = plan_cost({5: 2, 8: 1, 20: 3}, [8], eager_weight=2.0)
    assert cost.padded_rows == 6          # two steps of bs 5 padded to 8
    assert cost.graph_steps == 3 and cost.eager_steps == 3
    assert cost.computed_rows == 8 * 3 + 20 * 3
    assert cost.cost == 6 + 2.0 * 60
    assert cost.coverage == pytest.approx(0.5)


def test_large_distribution_is_fast_enough():
    import time
    dist = {s: (s * 7919) % 97 + 1 for s in range(1, 257)}
    start = time.perf_counter()
    sizes = choose_sizes(dist, 16)
    assert len(sizes) == 16 and sizes[-1] == 256
    assert time.perf_counter() - start < 5.0


def test_estimate_capture_interpolates_between_measured_sizes():
    measured = {1: 1.0, 8: 2.0, 32: 5.0}
    assert estimate_capture([1, 8], measured) == pytest.approx(3.0)
    assert estimate_capture([20], measured) == pytest.approx(3.5)
    assert estimate_capture([64], measured) == pytest.approx(10.0)
    assert estimate_capture([0], {1: 1.0}) == pytest.approx(1.0)
    assert estimate_capture([1], {}) is None


def test_advice_compares_with_current_plan_and_gives_flags():
    dist = {1: 100, 2: 50, 3: 50, 5: 20, 16: 5}
    advice = advise(dist, 3, current_sizes=[1, 2, 4, 8, 16, 32],
                    capture_s={1: 0.5, 2: 0.5, 4: 0.6, 8: 0.7, 16: 0.9, 32: 1.2},
                    pool_bytes={1: 1 << 20, 2: 1 << 20, 4: 1 << 20, 8: 2 << 20, 16: 4 << 20, 32: 8 << 20})
    assert len(advice.sizes) == 3 and advice.sizes[-1] == 16
    assert advice.capture_s_saved > 0
    assert advice.pool_bytes_saved > 0
    assert advice.current.coverage == 1.0
    assert advice.flags["vllm"].startswith("--cudagraph-capture-sizes ")
    assert advice.flags["sglang"] == "--cuda-graph-bs " + " ".join(map(str, advice.sizes))
    text = format_advice(advice, "r1")
    assert "proposed" in text and "current" in text and "--cuda-graph-bs" in text


def test_flags_are_ready_to_copy():
    flags = flags_for([1, 4, 16])
    assert flags == {
        "replayscope": "--capture-sizes 1,4,16",
        "vllm": "--cudagraph-capture-sizes 1 4 16",
        "vllm_config": 'compilation_config={"cudagraph_capture_sizes": [1, 4, 16]}',
        "sglang": "--cuda-graph-bs 1 4 16",
    }


def test_the_measured_eager_weight_is_a_ratio_of_means_over_timed_steps():
    from collector.advisor import measured_eager_weight

    rows = [{"stage": "decode", "mode": "graph", "steps": 800, "timed_steps": 100, "total_s": 0.2},
            {"stage": "decode", "mode": "eager", "steps": 40, "timed_steps": 10, "total_s": 0.06}]
    assert measured_eager_weight(rows, "cuda") == pytest.approx(0.006 / 0.002 - 1.0)
