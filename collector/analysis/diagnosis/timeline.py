"""A startup as one stretch of wall time: from the run's start (an engine log's first line) to
the moment it was ready (the log's ready line, config ``ready_at``), else to its failure or
its last recorded phase; and the stretches inside it that no phase, capture or line covers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from replayscope.collector.analysis.diagnosis.facts import RunFacts, time_span
from replayscope.collector.analysis.diagnosis.text import phase_label
from replayscope.collector.analysis.reasons import size_words

MIN_STRETCH_S = 0.25      # an uncovered stretch shorter than this is not drawn or counted


@dataclass(frozen=True)
class Mark:
    """A phase or capture (a span), or a point in time (the run's start, ready, the failure)."""
    start: float
    end: float
    label: str
    point: bool

    def after(self) -> str:
        return self.label if self.point else f"the end of {self.label}"

    def before(self) -> str:
        return self.label if self.point else f"the start of {self.label}"


@dataclass(frozen=True)
class Stretch:
    """Time between two marks that nothing recorded explains."""
    start: float
    end: float
    after: Mark
    before: Mark

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def as_dict(self) -> dict[str, Any]:
        return {"start_ts": self.start, "end_ts": self.end, "seconds": self.seconds,
                "after": self.after.after(), "before": self.before.before()}


@dataclass(frozen=True)
class Startup:
    start: float
    end: float
    ready_at: float | None      # the end is the ready line's stamp
    marks: tuple[Mark, ...]

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)


def ready_label(facts: RunFacts) -> str:
    return "the server being ready" if facts.source.endswith("-log") else "the run being ready"


def capture_words(capture: dict[str, Any], facts: RunFacts) -> str:
    """A capture's size in its unit, with its stage where it is not decode: "bs 8", "32 tokens (mixed)"
    (as the dashboard's waterfall names its bars)."""
    words = size_words(capture["stage"], capture["graph_bs"], source=facts.source, config=facts.config)
    return words if capture["stage"] == "decode" else f"{words} ({capture['stage']})"


def startup_of(facts: RunFacts) -> Startup | None:
    """The startup's wall time and what is known inside it; None without any timed phase or capture."""
    marks = [Mark(*span, phase_label(p.get("phase", "")), False)
             for p in facts.phases if (span := time_span(p)) is not None]
    marks += [Mark(*span, f"the capture of {capture_words(c, facts)}", False)
              for c in facts.captures if (span := time_span(c)) is not None]
    if not marks:
        return None
    end = max(m.end for m in marks)
    ready = facts.config.get("ready_at")
    ready = float(ready) if ready is not None else None
    if ready is not None and ready >= end:
        marks.append(Mark(ready, ready, ready_label(facts), True))
        end = ready
    elif facts.status == "failed" and (facts.failure or {}).get("ts") is not None:
        ts = float(facts.failure["ts"])
        marks.append(Mark(ts, ts, "the failure", True))
        end = max(end, ts)
    if facts.started_at is not None and float(facts.started_at) <= end:
        marks.append(Mark(float(facts.started_at), float(facts.started_at), "the run's start", True))
    marks.sort(key=lambda m: (m.start, m.end))
    return Startup(start=marks[0].start, end=end, ready_at=ready if end == ready else None, marks=tuple(marks))


def unaccounted(startup: Startup | None, min_s: float = MIN_STRETCH_S) -> list[Stretch]:
    """The stretches of the startup that no mark covers, in time order, from ``min_s`` long."""
    if startup is None:
        return []
    stretches = []
    first = startup.marks[0]
    covered, last = first.end, first
    for mark in startup.marks[1:]:
        if mark.start > startup.end:
            break
        if mark.start - covered >= min_s:
            stretches.append(Stretch(covered, mark.start, last, mark))
        if mark.end >= covered:
            covered, last = mark.end, mark
    return stretches
