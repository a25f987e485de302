"""The advisor's choice is exact: checked against every subset on small cases, under both objectives."""

from itertools import combinations

import pytest
from hypothesis import given, settings, strategies as st

from replayscope.collector.analysis.advisor.choice import aligned, candidates, choose_sizes, score
from replayscope.collector.analysis.advisor.objective import Objective, rows_objective

distributions = st.dictionaries(st.integers(1, 40), st.integers(1, 50), min_size=1, max_size=8)
objectives = st.one_of(
    st.sampled_from([0.0, 0.5, 1.0, 3.0, 10.0]).map(lambda w: rows_objective(w, "given", "test")),
    st.tuples(st.floats(0.0, 0.01), st.floats(0.0, 1e-4), st.floats(-0.05, 0.05), st.floats(0.0, 1e-3),
              st.integers(1, 40), st.integers(0, 20)).map(      # an eager line held flat beyond its sizes
        lambda t: Objective("time", t[0], t[1], t[2], t[3], "measured", "test", t[4], t[4] + t[5])))


def brute_force(dist, budget, objective, cap=None, multiple_of=1, padding=True, align=1):
    cands = candidates(dist, cap, multiple_of, align if padding else 1)
    best = score(dist, [], objective, padding).cost
    for k in range(1, min(budget, len(cands)) + 1):
        for subset in combinations(cands, k):
            best = min(best, score(dist, subset, objective, padding).cost)
    return best


@settings(max_examples=400, deadline=None)
@given(distributions, st.integers(0, 5), objectives)
def test_the_choice_costs_what_the_best_subset_costs(dist, budget, objective):
    sizes = choose_sizes(dist, budget, objective)
    assert len(sizes) <= budget and set(sizes) <= set(dist)
    assert score(dist, sizes, objective).cost == pytest.approx(brute_force(dist, budget, objective), rel=1e-9, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(distributions, st.integers(1, 4), objectives, st.integers(1, 40), st.integers(1, 4), st.booleans())
def test_the_choice_keeps_the_cap_and_the_multiples_and_stays_exact(dist, budget, objective, cap, multiple, padding):
    sizes = choose_sizes(dist, budget, objective, cap=cap, multiple_of=multiple, padding=padding)
    assert all(s <= cap and s % multiple == 0 for s in sizes)
    assert score(dist, sizes, objective, padding).cost == pytest.approx(
        brute_force(dist, budget, objective, cap, multiple, padding), rel=1e-9, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(distributions, objectives)
def test_a_larger_budget_never_costs_more(dist, objective):
    costs = [score(dist, choose_sizes(dist, k, objective), objective).cost for k in range(0, 6)]
    assert all(b <= a + 1e-9 * max(1.0, abs(a)) for a, b in zip(costs, costs[1:]))


def test_budget_zero_means_everything_eager():
    rows = rows_objective(3.0, "given", "test")
    assert choose_sizes({1: 5, 8: 3}, 0, rows) == []
    assert score({1: 5, 8: 3}, [], rows).eager_steps == 8


def test_a_budget_of_at_least_the_distinct_sizes_captures_each_exactly():
    dist = {1: 10, 3: 4, 7: 2, 12: 1}
    rows = rows_objective(3.0, "given", "test")
    assert choose_sizes(dist, 10, rows) == [1, 3, 7, 12]
    assert score(dist, [1, 3, 7, 12], rows).padded_rows == 0


def test_the_score_counts_graph_padded_and_eager_steps_and_rows():
    rows = rows_objective(2.0, "given", "test")
    s = score({5: 2, 8: 1, 20: 3}, [8], rows)
    assert (s.graph_steps, s.padded_steps, s.eager_steps) == (1, 2, 3)
    assert s.padded_rows == 6 and s.computed_rows == 8 * 3 + 20 * 3
    assert s.cost == 8 * 3 + 3.0 * 60
    assert s.eager_share == pytest.approx(0.5)
    off = score({5: 2, 8: 1, 20: 3}, [8], rows, padding=False)
    assert (off.graph_steps, off.padded_steps, off.eager_steps) == (1, 0, 5)


def test_an_eager_line_is_held_flat_beyond_the_sizes_it_was_fitted_on():
    # the H200 1b mixed run's fit: eager steps timed at bs 33-45 only
    line = Objective("time", 0.003011, 15.69e-6, -0.017604, 936.16e-6, "measured", "test", 33, 45)
    assert line.eager_cost(1) == line.eager_cost(33) == pytest.approx(0.0133, abs=1e-4)
    assert line.eager_cost(100) == line.eager_cost(45)
    assert choose_sizes({1: 50, 2: 50, 40: 10}, 1, line) == [40]     # not "eager bs 1 is free"


def test_a_time_objective_pads_rather_than_run_eager_when_padding_is_nearly_free():
    flat = Objective("time", 0.0025, 1e-6, 0.009, 1e-5, "measured", "test")    # H200-like: graphs flat, eager 3.6x
    assert choose_sizes({1: 100, 2: 100, 3: 100, 48: 5}, 1, flat) == [48]


def test_a_vllm_sized_distribution_of_thousands_of_token_counts_gets_its_sizes():
    dist = {s: (s * 7919) % 97 + 1 for s in range(1, 4097)}
    sizes = choose_sizes(dist, 11, rows_objective(3.0, "given", "test"))
    assert len(sizes) == 11 and sizes[-1] == 4096


def test_aligned_sizes_are_one_two_four_then_multiples_of_eight():
    assert [aligned(s) for s in (1, 2, 3, 4, 5, 8, 9, 14, 16, 17, 44, 2049)] == [
        1, 2, 4, 4, 8, 8, 16, 16, 16, 24, 48, 2056]
    assert aligned(14, 1) == 14


def test_a_size_whose_aligned_one_is_above_the_cap_gets_the_cap():
    assert candidates({57: 3, 20: 1}, cap=60, align=8) == [24, 60]       # max_num_seqs 60: 64 would be dropped
    assert candidates({57: 3}, cap=60, multiple_of=4, align=8) == [60]
    assert candidates({61: 3}, cap=60, align=8) == []                    # above the cap: nothing serves it


@settings(max_examples=200, deadline=None)
@given(distributions, st.integers(1, 4), objectives, st.one_of(st.none(), st.integers(1, 48)), st.booleans())
def test_an_aligned_choice_stays_in_the_family_and_is_exact_within_it(dist, budget, objective, cap, padding):
    sizes = choose_sizes(dist, budget, objective, cap=cap, padding=padding, align=8)
    if padding:
        assert all(s == aligned(s) or s == cap for s in sizes)
    else:
        assert set(sizes) <= set(dist)                                   # no padding: only a batch's own size
    assert score(dist, sizes, objective, padding).cost == pytest.approx(
        brute_force(dist, budget, objective, cap, 1, padding, align=8), rel=1e-9, abs=1e-12)


launch_like = st.tuples(st.floats(0.0, 0.01), st.floats(0.0, 1e-4), st.floats(0.0, 1e-3), st.floats(0.0, 1.0),
                        st.one_of(st.none(), st.integers(0, 40))).map(     # a PIECEWISE graph pays part of the launch
    lambda t: Objective("time", t[0], t[1], t[0], t[1], "estimated", "test", eager_extra=t[2],
                        piecewise_extra=t[2] * t[3], full_max=t[4]))


@settings(max_examples=300, deadline=None)
@given(distributions, st.integers(0, 5), launch_like, st.data(), st.booleans())
def test_the_choice_stays_exact_when_mixed_steps_cost_more_on_a_piecewise_graph(dist, budget, objective, data,
                                                                                  padding):
    mixed = {s: data.draw(st.integers(0, n)) for s, n in dist.items()}
    sizes = choose_sizes(dist, budget, objective, padding=padding, mixed=mixed)
    cands = candidates(dist, None, 1, 1)
    best = score(dist, [], objective, padding, mixed).cost
    for k in range(1, min(budget, len(cands)) + 1):
        for subset in combinations(cands, k):
            best = min(best, score(dist, subset, objective, padding, mixed).cost)
    assert len(sizes) <= budget
    assert score(dist, sizes, objective, padding, mixed).cost == pytest.approx(best, rel=1e-9, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(distributions, st.lists(st.integers(1, 48), min_size=1, max_size=6), launch_like, st.data(), st.booleans(),
       st.floats(0.0, 0.2))
def test_a_size_goes_only_when_its_saving_on_its_steps_is_below_the_share(dist, sizes, objective, data, padding,
                                                                           min_share):
    from replayscope.collector.analysis.advisor.choice import paying_sizes

    mixed = {s: data.draw(st.integers(0, n)) for s, n in dist.items()}
    kept, dropped = paying_sizes(dist, sizes, objective, padding=padding, mixed=mixed, min_share=min_share)
    assert sorted(kept + [d["size"] for d in dropped]) == sorted(set(sizes))
    for d in dropped:                  # its saving, as the whole list's score sees it when it went
        before = sorted(kept + [x["size"] for x in dropped[dropped.index(d):]])
        after = [s for s in before if s != d["size"]]
        saving = score(dist, after, objective, padding, mixed).cost - score(dist, before, objective, padding, mixed).cost
        assert d["saving"] == pytest.approx(saving, rel=1e-9, abs=1e-12)
        assert d["saving"] <= 0 or d["share"] < min_share
    for size in kept:                  # every kept size saves at least the share
        after = [s for s in kept if s != size]
        saving = score(dist, after, objective, padding, mixed).cost - score(dist, kept, objective, padding, mixed).cost
        assert saving > 0
