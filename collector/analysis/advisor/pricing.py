"""What a list of capture sizes costs at startup: capture time and graph-pool memory.

From a run's own captures where it measured them (or its log gave them), else from
earlier runs of the same model and device, each figure marked with where it came from:
``none`` (an empty list costs nothing), ``measured`` / ``log`` (every size of the list
was captured and timed), ``fit`` (sizes
the run did not capture predicted by a line through the sizes it did, with the fit's
error), ``estimated`` (from totals, scaling or earlier runs: no error known unless a fit
gives one), or None (nothing to price it from).

Capture time: the sum over the list's sizes, each the measured duration or the line's
prediction (least squares of duration against size; its error is the root mean square
of the leave-one-out residuals, times the square root of the number of predicted sizes).
A run that logged only a total (vLLM) gives a mean per graph.

Graph-pool memory: graphs are captured largest first into one shared pool, so the pool
holds what the largest graph needed plus what each smaller one adds ("the cost should
only scale with the max batchsize", vLLM PR #7894; SGLang captures in reverse order "to
enable better memory sharing across cuda graphs", cuda_graph_runner.py). A list's pool is
the largest size's footprint (the first capture's pool growth; another largest size:
a line through the footprints of earlier runs, else this one scaled with the size) plus
each other size's growth (measured, else the mean of the measured ones). A run that
logged only a total is taken as the footprint of its largest size.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Sequence

from replayscope.collector.analysis.advisor.steps import BATCH_SIZE, SizeName


@dataclass
class CaptureSet:
    """The decode captures of one run, as the pricing needs them."""

    run_id: str
    provenance: str = "measured"                               # measured | log
    seconds: dict[int, float] = field(default_factory=dict)    # per size, captures with a duration
    pool_growth: dict[int, int] = field(default_factory=dict)  # per size, the pool's growth
    first: int | None = None                                   # the size captured first (the largest)
    total_s: float | None = None                               # the whole capture's time
    total_bytes: int | None = None                             # the pool after capture
    sizes: tuple[int, ...] = ()                                # the sizes captured

    @property
    def footprint(self) -> tuple[int, int] | None:
        """(largest size, the pool it needed): the first capture's growth, else the total."""
        if self.first is not None and self.first in self.pool_growth:
            return self.first, self.pool_growth[self.first]
        if self.total_bytes and self.sizes:
            return max(self.sizes), self.total_bytes
        return None


@dataclass(frozen=True)
class Figure:
    value: float | None
    error: float | None = None      # ± this, when a fit gives one
    provenance: str | None = None   # measured | log | fit | estimated | None (not priced)
    basis: str = ""                 # where it comes from, in words

    def as_dict(self) -> dict:
        return asdict(self)


def _line(points: dict[int, float]) -> tuple[float, float]:
    """(a, b) of y = a + b x by least squares (flat for a single x)."""
    xs, ys = list(points), list(points.values())
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return my, 0.0
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def _loo_rmse(points: dict[int, float]) -> float | None:
    """Root mean square of leave-one-out residuals of the line (needs 3 sizes)."""
    if len(points) < 3:
        return None
    residuals = []
    for x in points:
        rest = {k: v for k, v in points.items() if k != x}
        a, b = _line(rest)
        residuals.append(points[x] - (a + b * x))
    return math.sqrt(sum(r * r for r in residuals) / len(residuals))


def capture_time(sizes: Sequence[int], this: CaptureSet | None, earlier: Sequence[CaptureSet] = (),
                 name: SizeName = BATCH_SIZE) -> Figure:
    """``name``: a size in its unit, as the notes name it (``reasons.size_words`` for the list's stage)."""
    sizes = sorted(set(sizes))
    if not sizes:
        return Figure(0.0, None, "none", "no graphs to capture")
    own = dict(this.seconds) if this else {}
    missing = [s for s in sizes if s not in own]
    if own and not missing:
        return Figure(sum(own[s] for s in sizes), None, this.provenance,
                      f"this run's captures of {_sizes(sizes, name)}")
    points, basis, provenance = own, "this run's", "fit"
    if len(points) < 2:
        pooled = dict(own)
        for other in earlier:
            for s, v in other.seconds.items():
                pooled.setdefault(s, v)
        if len(pooled) >= max(2, len(own) + 1):
            points, basis, provenance = pooled, f"this run's and {len(earlier)} earlier run(s)'", "estimated"
    if len(points) >= 2:
        a, b = _line(points)
        predicted = {s: max(0.0, a + b * s) for s in missing}
        rmse = _loo_rmse(points)
        error = None if rmse is None else rmse * math.sqrt(len(missing))
        return Figure(sum(own.get(s, predicted.get(s, 0.0)) for s in sizes), error, provenance,
                      f"{_sizes([s for s in sizes if s in own], name) or 'no size'} as captured; "
                      f"{_sizes(missing, name)} from a line through {basis} {len(points)} captured sizes "
                      + ("(error from its leave-one-out residuals)" if rmse is not None
                         else "(two sizes: no error can be given)"))
    if this and this.total_s and this.sizes:
        per = this.total_s / len(this.sizes)
        return Figure(per * len(sizes), None, "estimated",
                      f"this run's capture took {this.total_s:.3g} s for {len(this.sizes)} graphs: "
                      f"{per:.3g} s per graph")
    return Figure(None, None, None, "no capture of this run or an earlier run of its model and device was timed")


def pool_memory(sizes: Sequence[int], this: CaptureSet | None, earlier: Sequence[CaptureSet] = (),
                 name: SizeName = BATCH_SIZE) -> Figure:
    """``name``: as for ``capture_time``."""
    sizes = sorted(set(sizes))
    if not sizes:
        return Figure(0, None, "none", "no graphs, no pool")
    sets = ([this] if this else []) + list(earlier)
    footprints = {}
    for s in sets:
        if s.footprint is not None:
            footprints.setdefault(s.footprint[0], s.footprint[1])
    if not footprints:
        return Figure(None, None, None, "no run of this model and device measured its graph pool")
    largest = sizes[-1]
    own = this.footprint if this else None
    estimated, notes = False, []
    if largest in footprints:
        footprint = footprints[largest]
        notes.append(f"{name(largest)} needed {_mib(footprint)} captured first"
                     + ("" if own and own[0] == largest else " (an earlier run)"))
        estimated = not (own and own[0] == largest)
    elif len(footprints) >= 2:
        a, b = _line({k: float(v) for k, v in footprints.items()})
        footprint = max(0.0, a + b * largest)
        notes.append(f"{_whose(name(largest))} footprint from a line through the footprints of {len(footprints)} runs' "
                     f"largest sizes")
        estimated = True
    else:
        (at, measured), = footprints.items()
        footprint = measured * largest / at
        notes.append(f"{_whose(name(largest))} footprint scaled from {_whose(name(at))} {_mib(measured)} in "
                     f"proportion")
        estimated = True
    own_growth = _growth_of([this] if this else [])
    other_growth = _growth_of(earlier)
    rest = sizes[:-1]
    known = [s for s in rest if s in own_growth]
    borrowed = [s for s in rest if s not in own_growth and s in other_growth]
    unknown = [s for s in rest if s not in own_growth and s not in other_growth]
    total = footprint + sum(own_growth[s] for s in known) + sum(other_growth[s] for s in borrowed)
    if known:
        notes.append(f"{_sizes(known, name)} {_add(known)} {'its' if len(known) == 1 else 'their'} measured growth")
    if borrowed:
        notes.append(f"{_sizes(borrowed, name)} {_add(borrowed)} {'its' if len(borrowed) == 1 else 'their'} growth in "
                     f"an earlier run")
        estimated = True
    error = None
    if unknown:
        growth = own_growth or other_growth
        if growth:
            mean = sum(growth.values()) / len(growth)
            total += mean * len(unknown)
            spread = math.sqrt(sum((v - mean) ** 2 for v in growth.values()) / len(growth))
            error = spread * math.sqrt(len(unknown)) if not estimated else None
            notes.append(f"{_sizes(unknown, name)} {_add(unknown)} the mean growth of the smaller captures "
                         f"({_mib(mean)} each)")
        else:
            notes.append("the smaller sizes add nothing: the run gave only the pool's total, taken as its "
                         "largest graph's")
        estimated = True
    provenance = "estimated" if estimated else (this.provenance if this else "estimated")
    return Figure(int(total), None if error is None else int(error), provenance, "; ".join(notes))


def _growth_of(sets: Sequence[CaptureSet]) -> dict[int, int]:
    """What each size after the first added to its run's pool (the first run's figure for a size)."""
    out: dict[int, int] = {}
    for s in sets:
        for size, grew in s.pool_growth.items():
            if size != s.first:
                out.setdefault(size, grew)
    return out


def _add(sizes: Sequence[int]) -> str:
    return "adds" if len(sizes) == 1 else "add"


def _sizes(sizes: Sequence[int], name: SizeName) -> str:
    if not sizes:
        return ""
    return name(sizes[0]) if len(sizes) == 1 else "sizes " + ", ".join(map(str, sizes))


def _whose(words: str) -> str:
    """The possessive of a size in words: "bs 8's", "512 tokens'"."""
    return words + ("'" if words.endswith("s") else "'s")


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"
