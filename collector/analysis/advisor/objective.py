"""What a decode step costs under a list of capture sizes: the advisor's objective.

A step of batch size ``s`` served by the graph of size ``g >= s`` costs
``graph_a + graph_b * g``; a step no graph serves runs eager and costs
``eager_a + eager_b * s``, with ``s`` held within the batch sizes the eager line was fitted
on (``eager_lo``..``eager_hi``): a line fitted on eager steps of bs 33-45 (the batches too
large for a run's graphs) says nothing of an eager bs 1, so it is not extended past them
(extended, the H200 1b run's line would make an eager bs-1 step cost -17 ms). Two ways to
set the numbers:

- ``time`` (seconds per step): fitted on the run's own timed decode steps, graph steps
  against their graph size and eager steps against their batch size (weighted least
  squares, slopes at least 0), on a GPU (not the CPU stand-in). A side the
  run did not time (a run with graphs off has no graph steps) comes from earlier runs of
  the same model and device, and the objective is then ``estimated``.
- ``rows`` (rows computed, an eager row counted ``1 + eager_weight`` times): a padded row
  costs what a real one does, an eager row more (an eager step launches every kernel
  itself). The weight is given, or ``DEFAULT_EAGER_WEIGHT``: eager steps took 1.1-7.2x a
  graph step on an H200 by model and batch size (docs/gpu-results.md).

A third way, for a token-batched engine whose run timed no steps (a vLLM log): ``launch``
builds an ``estimated`` time objective from what a graph saves (a step's compute
``a + b * tokens`` whether a graph runs it or not, an eager step paying ``eager_extra`` launch
overhead on top, a PIECEWISE graph still paying ``piecewise_extra`` of it: mixed steps, and decode
steps served by a size above ``full_max``, the largest a FULL graph was captured for).

A graph step's cost must not fall with its size (``graph_b >= 0``): that is what makes the
choice over the observed sizes exact (``choice``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, NamedTuple, Sequence

from replayscope.collector.analysis.advisor.steps import BATCH_SIZE, SizeName, served
from replayscope.contract.wire import SIZE_DECIDED_REASONS, stages_of

DEFAULT_EAGER_WEIGHT = 3.0
STAND_IN_BACKENDS = ("static",)          # the CPU stand-in: its step times are not a graph's


class TimingRow(NamedTuple):
    stage: str
    raw_bs: int
    mode: str
    reason: str | None
    timed_steps: int
    duration_s: float       # the sum over the timed steps


class Point(NamedTuple):
    x: int                  # the graph size (graph steps) or the batch size (eager steps)
    mean_s: float
    weight: int             # timed steps


@dataclass(frozen=True)
class Objective:
    kind: str               # time | rows
    graph_a: float
    graph_b: float
    eager_a: float
    eager_b: float
    provenance: str         # measured | estimated | given | default
    basis: str              # where the numbers come from, in words
    eager_lo: int | None = None     # the eager line holds for these batch sizes, flat beyond them
    eager_hi: int | None = None
    eager_extra: float = 0.0        # what an eager step pays on top: its kernel launches
    piecewise_extra: float = 0.0    # what a PIECEWISE graph step still pays of it
    full_max: int | None = None     # decode steps served by a larger size run on a PIECEWISE graph

    @property
    def unit(self) -> str:
        return "s" if self.kind == "time" else "rows"

    def piecewise(self, graph_bs: int, mixed: bool = False) -> bool:
        """Whether the graph of ``graph_bs`` serving such a step is a PIECEWISE one."""
        return bool(self.piecewise_extra) and (mixed or (self.full_max is not None and graph_bs > self.full_max))

    def graph_cost(self, graph_bs: int, mixed: bool = False) -> float:
        """A step on the graph of ``graph_bs``; ``mixed``: a mixed prefill-decode step."""
        extra = self.piecewise_extra if self.piecewise(graph_bs, mixed) else 0.0
        return self.graph_a + self.graph_b * graph_bs + extra

    def eager_cost(self, raw_bs: int) -> float:
        if self.eager_lo is not None:
            raw_bs = min(max(raw_bs, self.eager_lo), self.eager_hi)
        return self.eager_a + self.eager_b * raw_bs + self.eager_extra

    def as_dict(self) -> dict:
        return {**asdict(self), "unit": self.unit}


def rows_objective(eager_weight: float, provenance: str, basis: str) -> Objective:
    if not eager_weight >= 0:
        raise ValueError("eager_weight must be >= 0")
    return Objective("rows", 0.0, 1.0, 0.0, 1.0 + eager_weight, provenance, basis)


def fit_line(points: Sequence[Point]) -> tuple[float, float]:
    """(a, b) of ``mean_s ≈ a + b * x`` by weighted least squares; ``b`` at least 0 (a flat
    line at the weighted mean otherwise, and for a single size)."""
    total = sum(p.weight for p in points)
    if not total:
        raise ValueError("no timed steps to fit")
    mean_x = sum(p.x * p.weight for p in points) / total
    mean_y = sum(p.mean_s * p.weight for p in points) / total
    sxx = sum(p.weight * (p.x - mean_x) ** 2 for p in points)
    if sxx <= 0:
        return mean_y, 0.0
    b = sum(p.weight * (p.x - mean_x) * (p.mean_s - mean_y) for p in points) / sxx
    if b < 0:
        return mean_y, 0.0
    return mean_y - b * mean_x, b


def graph_points(timings: Iterable[TimingRow], stage: str | None, current: Sequence[int],
                 padding: bool = True) -> list[Point]:
    """Timed graph and padded steps of ``stage`` against the size of the graph that ran them
    (a padded step's graph is the next size of the run's list)."""
    stages = stages_of(stage) if stage else ()
    points = []
    for row in timings:
        if row.stage not in stages or row.mode == "eager" or not row.timed_steps:
            continue
        graph_bs = row.raw_bs if row.mode == "graph" else served(row.raw_bs, current, padding)
        if graph_bs is not None:
            points.append(Point(graph_bs, row.duration_s / row.timed_steps, row.timed_steps))
    return points


def eager_points(timings: Iterable[TimingRow], stage: str | None) -> list[Point]:
    """Timed eager steps of ``stage`` against their batch size: those a list decides, else
    (none timed) every eager step of the stage."""
    stages = stages_of(stage) if stage else ()
    rows = [r for r in timings if r.stage in stages and r.mode == "eager" and r.timed_steps]
    decided = [r for r in rows if r.reason in SIZE_DECIDED_REASONS]
    return [Point(r.raw_bs, r.duration_s / r.timed_steps, r.timed_steps) for r in (decided or rows)]


def on_a_gpu(backend: str, device: str) -> bool:
    """Whether a run's step times are those of GPU steps (graph or eager), not the stand-in's."""
    return backend not in STAND_IN_BACKENDS and (device or "").lower() not in ("cpu", "")


def choose_objective(*, backend: str, device: str, graph: Sequence[Point], eager: Sequence[Point],
                     earlier_graph: Sequence[Point] = (), earlier_eager: Sequence[Point] = (),
                     eager_weight: float | None = None, name: SizeName = BATCH_SIZE) -> Objective:
    """The time objective when both sides are timed (this run's, else earlier runs'), on a
    GPU; else rows with the given weight or the default (``name``: a size in its unit)."""
    if eager_weight is not None:
        return rows_objective(eager_weight, "given", f"rows computed, an eager row counted "
                                                     f"{1 + eager_weight:g}x (--eager-weight {eager_weight:g})")
    gpu = on_a_gpu(backend, device)
    if gpu:
        graph_side = graph or earlier_graph
        eager_side = eager or earlier_eager
        if graph_side and eager_side:
            ga, gb = fit_line(graph_side)
            ea, eb = fit_line(eager_side)
            lo, hi = min(p.x for p in eager_side), max(p.x for p in eager_side)
            own = bool(graph) and bool(eager)
            where = "this run's timed decode steps" if own else (
                "this run's timed decode steps and earlier runs of its model and device (for the "
                + ("graph" if not graph else "eager") + " steps)")
            eager_text = (f"{(ea + eb * lo) * 1e3:.2f} ms" if lo == hi else
                          f"{(ea + eb * lo) * 1e3:.2f} ms at {name(lo)} to {(ea + eb * hi) * 1e3:.2f} ms at {name(hi)} "
                          f"(a line between, flat beyond)")
            return Objective("time", ga, gb, ea, eb, "measured" if own else "estimated",
                             f"decode step time fitted on {where}: a graph step {_line(ga, gb, 'g')}, an eager "
                             f"step {eager_text}", lo, hi)
    if not gpu:
        why = "a CPU run: its step times are not a GPU's"
    elif not (graph or earlier_graph or eager or earlier_eager):
        why = "the run timed no decode steps"
    else:
        why = "the run timed no " + ("graph" if not (graph or earlier_graph) else "eager") + " decode steps"
    return rows_objective(DEFAULT_EAGER_WEIGHT, "default",
                          f"rows computed, an eager row counted {1 + DEFAULT_EAGER_WEIGHT:g}x ({why})")


def _line(a: float, b: float, x: str) -> str:
    return f"{a * 1e3:.3f} ms + {b * 1e6:.2f} µs × {x}"
