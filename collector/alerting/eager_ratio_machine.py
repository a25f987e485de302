"""The eager-ratio rule's state machine as a pure function: ``evaluate(state, window, rule,
now) -> (state, changes)``. No store, no clock: ``replayscope.collector.alerting.eager_ratio`` reads the
window and the state, calls it, and writes what it decides.

The semantics are Prometheus's ``AlertingRule.Eval`` (prometheus/prometheus,
``rules/alerting.go``), evaluated at every second of a run's own event time instead of
every evaluation interval of the wall clock:

- a condition that starts holding makes the alert *pending* (Prometheus: ``ActiveAt = ts``,
  ``StatePending``); a pending alert whose condition stops holding is dropped, without a
  notification;
- a pending alert *fires* once ``ts - ActiveAt >= holdDuration`` (the rule's ``for``;
  here ``t - pending_since >= for_s``), so ``for_s`` 0 fires at the first active second;
- a firing alert whose condition no longer holds keeps firing while
  ``ts - KeepFiringSince < keepFiringFor`` and resolves at the evaluation where that
  stops being true (here ``t - clear_since >= keep_firing_for_s``); the condition holding
  again resets ``KeepFiringSince`` (here ``clear_since``).

Two differences, both said in ``replayscope.collector.alerting.alerts``: while firing, the condition
is "not clear", i.e. above ``resolve_threshold`` with ``min_steps`` steps (hysteresis:
Prometheus has none), and a run that ended resolves its alert when it ended.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field, replace
from typing import Mapping

from replayscope.collector.alert_rule import RuleFields

MAX_POINTS_PER_RUN = 200_000     # seconds of one run evaluated in one call; the rest the next


@dataclass(frozen=True)
class Window:
    """One run's per-second step counts of the rule's stages, for windows ``(t - window_s, t]``."""

    seconds: Mapping[int, tuple[int, int, Mapping[str, int]]]     # second -> (steps, eager, {reason: eager})
    window_s: int
    keys: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(sorted(self.seconds)))

    def _span(self, t: int) -> tuple[int, int]:
        return bisect.bisect_right(self.keys, t - self.window_s), bisect.bisect_right(self.keys, t)

    def totals(self, t: int) -> tuple[int, int]:
        """(steps, eager) in the window ending at ``t``."""
        lo, hi = self._span(t)
        steps = eager = 0
        for key in self.keys[lo:hi]:
            steps += self.seconds[key][0]
            eager += self.seconds[key][1]
        return steps, eager

    def count(self, t: int) -> tuple[int, int]:
        entry = self.seconds.get(t)
        return (entry[0], entry[1]) if entry is not None else (0, 0)

    def next_data_after(self, t: int) -> int | None:
        i = bisect.bisect_right(self.keys, t)
        return self.keys[i] if i < len(self.keys) else None

    def dominant_reason(self, t: int) -> str | None:
        totals: dict[str, int] = {}
        lo, hi = self._span(t)
        for key in self.keys[lo:hi]:
            for reason, n in self.seconds[key][2].items():
                totals[reason] = totals.get(reason, 0) + n
        if not totals:
            return None
        return min(totals.items(), key=lambda kv: (-kv[1], kv[0]))[0] or None


@dataclass(frozen=True)
class Figures:
    """An open alert's figures: when it fired, its peak (with the steps and dominant reason
    of the window at the peak) and its latest ratio."""

    started_at: float
    peak: float
    value: float
    steps: int
    reason: str | None


@dataclass(frozen=True)
class State:
    """Where a rule's evaluation of one run stands (``alert_state``), with its open alert."""

    evaluated_to: float
    pending_since: float | None = None
    clear_since: float | None = None
    firing: Figures | None = None


@dataclass(frozen=True)
class Change:
    """The alert fired or resolved ``at`` (event time); ``figures``: the alert's as of then."""

    status: str                 # firing | resolved
    at: float
    figures: Figures


@dataclass(frozen=True)
class RunEnd:
    """The run ended: its alert resolves ``at``; its evaluation stands at ``frontier``."""

    at: float
    frontier: float


def evaluate(state: State, window: Window, rule: RuleFields, now: int,
             end: RunEnd | None = None) -> tuple[State, list[Change]]:
    """The state after judging every second from ``state.evaluated_to`` (exclusive) to
    ``now`` (inclusive, at most ``MAX_POINTS_PER_RUN`` of them), and the alert's changes
    in order. ``window`` holds the seconds from ``evaluated_to + 2 - window_s`` on; ``end``
    only once the run ended (applied when the evaluation reached ``now``)."""
    threshold, min_steps = rule.threshold, rule.min_steps
    resolve_at = threshold if rule.resolve_threshold is None else rule.resolve_threshold
    pending, clear_since, firing = state.pending_since, state.clear_since, state.firing
    changes: list[Change] = []
    begin = math.floor(state.evaluated_to) + 1
    stop = min(now, begin + MAX_POINTS_PER_RUN - 1)
    evaluated_to = state.evaluated_to
    if stop >= begin:
        t = begin
        steps, eager = window.totals(t)
        while t <= stop:
            if steps == 0 and firing is None and pending is None:
                nxt = window.next_data_after(t)          # nothing to judge until the next step
                if nxt is None or nxt > stop:
                    break
                t = nxt
                steps, eager = window.totals(t)
                continue
            judged = steps >= min_steps
            ratio = eager / steps if steps else 0.0
            if firing is not None:
                if judged:
                    firing = replace(firing, value=ratio)
                    if ratio > firing.peak:
                        firing = replace(firing, peak=ratio, steps=steps, reason=window.dominant_reason(t))
                if judged and ratio > resolve_at:
                    clear_since = None
                else:
                    clear_since = float(t) if clear_since is None else clear_since
                    if t - clear_since >= rule.keep_firing_for_s:
                        changes.append(Change("resolved", max(float(t), firing.started_at), firing))
                        firing, clear_since, pending = None, None, None
            elif judged and ratio > threshold:
                pending = float(t) if pending is None else pending
                if t - pending >= rule.for_s:
                    firing = Figures(float(t), ratio, ratio, steps, window.dominant_reason(t))
                    changes.append(Change("firing", float(t), firing))
                    pending, clear_since = None, None
            else:
                pending = None
            t += 1
            added, dropped = window.count(t), window.count(t - window.window_s)
            steps, eager = steps + added[0] - dropped[0], eager + added[1] - dropped[1]
        evaluated_to = float(stop)
    if end is not None and evaluated_to >= now:
        pending, evaluated_to = None, max(evaluated_to, end.frontier)
        if firing is not None:         # the run ended: so did its alert
            changes.append(Change("resolved", max(end.at, firing.started_at), firing))
            firing, clear_since = None, None
    return State(evaluated_to, pending, clear_since, firing), changes
