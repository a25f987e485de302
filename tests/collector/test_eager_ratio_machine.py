"""Properties of the eager-ratio state machine (``replayscope.collector.alerting.eager_ratio_machine``)
against Prometheus's semantics for ``for`` and ``keep_firing_for`` (``rules/alerting.go``):
judged against a brute-force reading of the window, never against the machine itself."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings, strategies as st

from replayscope.collector.alert_rule import RuleFields
from replayscope.collector.alerting.eager_ratio_machine import (Change, Figures, RunEnd, State, Window,
                                                                evaluate)

START = State(evaluated_to=-1.0)
SPAN = 60                                    # seconds 0..59 of event time


def _second():
    return st.integers(0, 6).flatmap(lambda steps: st.tuples(
        st.just(steps), st.integers(0, steps), st.sampled_from(["captured_miss", "batch_too_large"])))


def _seconds():
    return st.dictionaries(st.integers(0, SPAN - 1), _second(), max_size=SPAN).map(
        lambda d: {t: (s, e, {r: e} if e else {}) for t, (s, e, r) in d.items()})


@st.composite
def _rules(draw, window_s=st.integers(1, 6)):
    threshold = draw(st.sampled_from([0.0, 0.25, 0.5, 0.75]))
    resolve = draw(st.one_of(st.none(), st.sampled_from([x for x in (0.0, 0.1, 0.25, 0.5) if x <= threshold])))
    return RuleFields(name="prop", threshold=threshold, resolve_threshold=resolve, min_steps=draw(st.integers(1, 5)),
                      window_s=draw(window_s), for_s=draw(st.integers(0, 8)), keep_firing_for_s=draw(st.integers(0, 8)))


def _totals(seconds, rule, t):
    """(steps, eager) over (t - window_s, t], summed from scratch."""
    inside = [v for k, v in seconds.items() if t - rule.window_s < k <= t]
    return sum(v[0] for v in inside), sum(v[1] for v in inside)


def _active(seconds, rule, t) -> bool:
    steps, eager = _totals(seconds, rule, t)
    return steps >= rule.min_steps and eager / steps > rule.threshold


def _clear(seconds, rule, t) -> bool:
    steps, eager = _totals(seconds, rule, t)
    resolve_at = rule.threshold if rule.resolve_threshold is None else rule.resolve_threshold
    return steps < rule.min_steps or eager / steps <= resolve_at


def _run(seconds, rule, now=SPAN - 1, state=START, end=None):
    return evaluate(state, Window(seconds, rule.window_s), rule, now, end)


@settings(max_examples=300, deadline=None)
@given(_seconds(), _rules())
def test_pending_fires_only_after_the_condition_held_for_for_s(seconds, rule):
    _, changes = _run(seconds, rule)
    for change in changes:
        if change.status == "firing":
            t = int(change.at)
            held = [_active(seconds, rule, s) for s in range(t - rule.for_s, t + 1)]
            assert all(held), (change, held)


@settings(max_examples=300, deadline=None)
@given(_seconds(), _rules())
def test_firing_resolves_only_after_being_clear_for_keep_firing_for_s(seconds, rule):
    state, changes = _run(seconds, rule)
    for before, change in zip([None, *changes], changes):
        if change.status == "resolved":
            assert before is not None and before.status == "firing"
            t = int(change.at)
            assert t - rule.keep_firing_for_s >= before.at
            assert all(_clear(seconds, rule, s) for s in range(t - rule.keep_firing_for_s, t + 1))
    # ...and a firing alert that was clear that long did resolve: it is never left firing.
    if state.firing is not None:
        fired = int(state.firing.started_at)
        for t in range(fired, SPAN - rule.keep_firing_for_s):
            assert not all(_clear(seconds, rule, s) for s in range(t, t + rule.keep_firing_for_s + 1))


@settings(max_examples=300, deadline=None)
@given(st.data(), _rules(window_s=st.just(1)))
def test_a_condition_that_oscillates_faster_than_for_s_never_fires(data, rule):
    """With a 1-second window each second is judged alone: runs of active seconds no longer
    than ``for_s`` (then a clear second) never complete a pending period."""
    seconds, t = {}, 0
    while t < SPAN:
        run = data.draw(st.integers(1, max(1, rule.for_s)))
        for s in range(t, min(SPAN, t + run)):
            seconds[s] = (rule.min_steps, rule.min_steps, {"captured_miss": rule.min_steps})
        t += run
        seconds[t] = (rule.min_steps, 0, {})             # one second at 0% eager
        t += data.draw(st.integers(1, 3))
    _, changes = _run(seconds, replace(rule, for_s=max(1, rule.for_s), threshold=0.5))
    assert changes == []


@settings(max_examples=300, deadline=None)
@given(_seconds(), _rules(), st.integers(-1, SPAN - 1), st.integers(-1, SPAN - 1))
def test_a_clock_that_jumps_back_invents_nothing(seconds, rule, now, earlier):
    state, _ = _run(seconds, rule, now)
    again, changes = _run(seconds, rule, min(now, earlier), state)
    assert (again, changes) == (state, [])


@settings(max_examples=300, deadline=None)
@given(_seconds(), _rules(), st.lists(st.integers(-1, SPAN - 1), max_size=5))
def test_a_clock_that_jumps_forward_decides_what_the_new_time_justifies(seconds, rule, stops):
    """Evaluated in jumps or in one go, the same transitions at the same moments."""
    whole_state, whole = _run(seconds, rule)
    state, changes = START, []
    for now in [*sorted(stops), SPAN - 1]:
        state, more = _run(seconds, rule, now, state)
        changes += more
    assert (state, changes) == (whole_state, whole)


@settings(max_examples=300, deadline=None)
@given(_seconds(), _rules(), st.integers(-1, SPAN - 1), st.booleans())
def test_evaluating_twice_at_the_same_now_changes_nothing(seconds, rule, now, ended):
    end = RunEnd(at=float(now) + 0.5, frontier=float(now) + 0.5) if ended else None
    state, _ = _run(seconds, rule, now, end=end)
    assert _run(seconds, rule, now, state, end) == (state, [])


@settings(max_examples=200, deadline=None)
@given(_seconds(), _rules())
def test_a_run_that_ends_resolves_its_firing_alert_at_its_end(seconds, rule):
    state, _ = _run(seconds, rule)
    ended, changes = _run(seconds, rule, SPAN - 1, state, RunEnd(at=SPAN - 0.5, frontier=SPAN - 0.5))
    assert ended.firing is None and ended.pending_since is None and ended.evaluated_to == SPAN - 0.5
    assert changes == ([Change("resolved", SPAN - 0.5, state.firing)] if state.firing is not None else [])


def test_an_always_active_run_fires_exactly_for_s_after_it_became_active():
    rule = RuleFields(name="always", threshold=0.2, min_steps=2, window_s=1, for_s=5, keep_firing_for_s=3)
    seconds = {t: (4, 4 if t < 20 else 0, {"captured_miss": 4} if t < 20 else {}) for t in range(10, 40)}
    state, changes = _run(seconds, rule)
    assert changes == [Change("firing", 15.0, Figures(15.0, 1.0, 1.0, 4, "captured_miss")),
                       Change("resolved", 23.0, Figures(15.0, 1.0, 0.0, 4, "captured_miss"))]
    assert state == State(evaluated_to=SPAN - 1.0)
