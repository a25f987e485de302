"""The capture sizes of least cost for a budget of K graphs, chosen exactly, and a list's score.

Under an ``Objective`` a step of batch size ``s`` costs ``graph_cost(g)`` when the graph of
size ``g`` serves it (padding on: the smallest chosen ``g >= s``; padding off: only
``g == s``) and ``eager_cost(s)`` when none does. Sizes above ``cap`` cannot be chosen (the
engine's limit), and with ``multiple_of`` > 1 only its multiples can (an engine that keeps
only such sizes).

Only candidates ``c(s)`` = the observed sizes rounded up to ``multiple_of`` (within the cap)
can be optimal: moving a chosen size down to the largest candidate at or below it serves
the same steps at no greater cost, as ``graph_cost`` does not fall with the size. Over the
sorted candidates, ``best[k][j]`` is the least cost of the steps up to candidate ``j`` with
``k`` graphs, the largest being ``j``:

    best[k][j] = min over p < j of best[k-1][p] + graph_cost(c_j) * (N(c_j) - N(c_p))

(``N(x)``: steps of size at most ``x``), plus the eager cost of every step above ``c_j``.
Mixed prefill-decode steps (``mixed``, a part of the distribution) may cost more on the same
graph (a PIECEWISE one): the segment cost is then the sum of that term for the decode and for
the mixed steps, each with its own ``graph_cost``. The segment cost satisfies the quadrangle
inequality (each ``graph_cost`` and ``N`` non-decreasing), so the best ``p`` does not decrease with ``j`` and each layer is computed
by divide and conquer: O(K · C log C) for C candidates. Ties go to fewer sizes. With padding
off every size serves only itself: the K sizes that save the most.

With padding on, the candidates are first rounded up to the family the engines' own lists are
made of (``aligned``: 1, 2, 4, then multiples of ``ALIGN``), and the choice is exact within it.
A graph at a size between two multiples of 8 pads fewer rows, but on an H200 it ran no faster
than the multiple of 8 above it (docs/gpu-results.md, the advisor benchmark): a linear cost in
the graph's size would favour such sizes for a saving that is not there.
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Mapping

from replayscope.collector.analysis.advisor.objective import Objective
from replayscope.collector.analysis.advisor.steps import served


@dataclass(frozen=True)
class PlanScore:
    """What serving a distribution of batch sizes with a list costs."""

    sizes: tuple[int, ...]
    steps: int
    graph_steps: int        # served at their own size
    padded_steps: int       # served by a larger graph
    eager_steps: int        # served by no graph
    padded_rows: int        # sum over steps of (graph size - batch size)
    computed_rows: int      # rows the graphs computed (padding included) plus the eager rows
    cost: float             # the objective's total

    @property
    def eager_share(self) -> float | None:
        return self.eager_steps / self.steps if self.steps else None

    @property
    def waste_share(self) -> float | None:
        """Padding waste: padded rows over all rows computed."""
        return self.padded_rows / self.computed_rows if self.computed_rows else None

    @property
    def cost_per_step(self) -> float | None:
        return self.cost / self.steps if self.steps else None

    def as_dict(self) -> dict:
        return {**asdict(self), "sizes": list(self.sizes), "eager_share": self.eager_share,
                "waste_share": self.waste_share, "cost_per_step": self.cost_per_step}


def _clean(distribution: Mapping[int, int]) -> list[tuple[int, int]]:
    items = sorted((int(s), int(c)) for s, c in distribution.items() if int(c) > 0)
    if any(s < 1 for s, _ in items):
        raise ValueError("batch sizes must be >= 1")
    return items


def score(distribution: Mapping[int, int], sizes: Iterable[int], objective: Objective,
          padding: bool = True, mixed: Mapping[int, int] | None = None) -> PlanScore:
    """What serving ``distribution`` with capture ``sizes`` costs (``mixed``: how many of each
    size's steps were mixed prefill-decode ones)."""
    mixed = mixed or {}
    chosen = sorted(set(int(s) for s in sizes))
    steps = graph = padded = eager = padded_rows = computed = 0
    cost = 0.0
    for s, count in _clean(distribution):
        steps += count
        g = served(s, chosen, padding)
        if g is None:
            eager += count
            computed += s * count
            cost += objective.eager_cost(s) * count
        else:
            if g == s:
                graph += count
            else:
                padded += count
            padded_rows += (g - s) * count
            computed += g * count
            m = min(count, int(mixed.get(s, 0)))
            cost += objective.graph_cost(g) * (count - m) + objective.graph_cost(g, mixed=True) * m
    return PlanScore(tuple(chosen), steps, graph, padded, eager, padded_rows, computed, cost)


def round_up(size: int, multiple_of: int) -> int:
    return -(-size // multiple_of) * multiple_of


ALIGN = 8          # above it, proposed sizes are multiples of it (below: 1, 2, 4, as the engines' lists)


def aligned(size: int, align: int = ALIGN) -> int:
    """The smallest size of the family ``1, 2, 4, …, align, 2·align, 3·align, …`` at or above ``size``
    (``align`` a power of two; 1 keeps every size)."""
    if align <= 1:
        return size
    if size >= align:
        return round_up(size, align)
    power = 1
    while power < size:
        power *= 2
    return power


def candidates(distribution: Mapping[int, int], cap: int | None = None, multiple_of: int = 1,
               align: int = 1) -> list[int]:
    """The sizes an optimal list is made of: observed sizes rounded up (to ``aligned`` sizes,
    then to ``multiple_of``), within the cap; a size whose aligned one is above the cap gets the
    largest size the cap allows instead."""
    if multiple_of < 1:
        raise ValueError("multiple_of must be >= 1")
    out = set()
    for s, _ in _clean(distribution):
        c = round_up(aligned(s, align), multiple_of)
        if cap is not None and c > cap:
            c = max(round_up(s, multiple_of), cap // multiple_of * multiple_of)
        out.add(c)
    return sorted(c for c in out if cap is None or c <= cap)


def choose_sizes(distribution: Mapping[int, int], budget: int, objective: Objective, *,
                 cap: int | None = None, multiple_of: int = 1, padding: bool = True, align: int = 1,
                 mixed: Mapping[int, int] | None = None) -> list[int]:
    """The capture sizes (at most ``budget``) of least cost under ``objective``, found exactly
    among the ``candidates`` (``align`` applies with padding on only: without it a batch runs
    on a graph of its own size or not at all); ``mixed`` as for ``score``."""
    mixed = {s: min(int(m), int(distribution.get(s, 0))) for s, m in (mixed or {}).items()}
    if budget < 0:
        raise ValueError("budget must be >= 0")
    items = _clean(distribution)
    cands = candidates(distribution, cap, multiple_of, align if padding else 1)
    if budget == 0 or not cands:
        return []
    if not padding:
        return _best_exact_sizes(items, cands, budget, objective, mixed)
    return _best_padded_sizes(items, cands, budget, objective, mixed)


def _best_exact_sizes(items, cands, budget, objective, mixed) -> list[int]:
    """Padding off: a size serves its own steps only; keep the ``budget`` that save most."""
    counts = dict(items)

    def saving_of(c: int) -> float:
        m = mixed.get(c, 0)
        eager = objective.eager_cost(c)
        return (counts[c] - m) * (eager - objective.graph_cost(c)) + m * (eager - objective.graph_cost(c, mixed=True))

    saving = [(saving_of(c), c) for c in cands if c in counts]
    best = sorted((v, c) for v, c in saving if v > 0)[::-1][:budget]
    return sorted(c for _, c in best)


def _best_padded_sizes(items, cands, budget, objective, mixed) -> list[int]:
    sizes = [s for s, _ in items]
    n_prefix, x_prefix, e_prefix = [0], [0], [0.0]
    for s, c in items:
        n_prefix.append(n_prefix[-1] + c - mixed.get(s, 0))
        x_prefix.append(x_prefix[-1] + mixed.get(s, 0))
        e_prefix.append(e_prefix[-1] + c * objective.eager_cost(s))
    m = len(cands)
    upto = [bisect.bisect_right(sizes, c) for c in cands]        # observed sizes at or below each candidate
    steps_upto = [n_prefix[u] for u in upto]                      # decode steps
    mixed_upto = [x_prefix[u] for u in upto]                      # mixed steps
    eager_total = e_prefix[-1]
    tail = [eager_total - e_prefix[u] for u in upto]              # eager cost of every step above
    g_cost = [objective.graph_cost(c) for c in cands]
    x_cost = [objective.graph_cost(c, mixed=True) for c in cands]
    inf = float("inf")
    layers: list[list[float]] = [[g_cost[j] * steps_upto[j] + x_cost[j] * mixed_upto[j] for j in range(m)]]
    backs: list[list[int]] = [[-1] * m]
    for _ in range(1, min(budget, m)):
        prev = layers[-1]
        cur, back = [inf] * m, [-1] * m

        def solve(lo: int, hi: int, opt_lo: int, opt_hi: int) -> None:
            stack = [(lo, hi, opt_lo, opt_hi)]
            while stack:
                lo, hi, opt_lo, opt_hi = stack.pop()
                if lo > hi:
                    continue
                mid = (lo + hi) // 2
                best, arg = inf, opt_lo
                for p in range(opt_lo, min(mid - 1, opt_hi) + 1):
                    v = (prev[p] + g_cost[mid] * (steps_upto[mid] - steps_upto[p])
                         + x_cost[mid] * (mixed_upto[mid] - mixed_upto[p]))
                    if v < best:
                        best, arg = v, p
                cur[mid], back[mid] = best, arg
                stack.append((lo, mid - 1, opt_lo, arg))
                stack.append((mid + 1, hi, arg, opt_hi))

        solve(1, m - 1, 0, m - 2)
        layers.append(cur)
        backs.append(back)
    scale = max(1.0, abs(eager_total))
    answer, best_k, best_j = eager_total, 0, -1                   # nothing captured: all eager
    for k, layer in enumerate(layers, 1):
        for j in range(m):
            v = layer[j] + tail[j]
            if v < answer - 1e-12 * scale:
                answer, best_k, best_j = v, k, j
    chosen, k, j = [], best_k, best_j
    while k > 0:
        chosen.append(cands[j])
        j = backs[k - 1][j]
        k -= 1
    return sorted(chosen)


def _marginal(distribution: Mapping[int, int], sizes: list[int], objective: Objective, padding: bool,
              mixed: Mapping[int, int]) -> dict[int, tuple[float, float]]:
    """Per size of ``sizes``: (what its steps cost on it, what they would cost without it: on the
    next larger size with padding, else eager), in one pass over the distribution."""
    out = {size: [0.0, 0.0] for size in sizes}
    for s, count in _clean(distribution):
        g = served(s, sizes, padding)
        if g is None:
            continue
        after = sizes[sizes.index(g) + 1] if padding and g != sizes[-1] else None
        m = min(count, int(mixed.get(s, 0)))
        out[g][0] += objective.graph_cost(g) * (count - m) + objective.graph_cost(g, mixed=True) * m
        out[g][1] += (objective.eager_cost(s) * count if after is None else
                      objective.graph_cost(after) * (count - m) + objective.graph_cost(after, mixed=True) * m)
    return {size: (on, without) for size, (on, without) in out.items()}


def paying_sizes(distribution: Mapping[int, int], sizes: Iterable[int], objective: Objective, *,
                 padding: bool = True, mixed: Mapping[int, int] | None = None, min_share: float = 0.0,
                 fits: Callable[[list[int]], bool] | None = None) -> tuple[list[int], list[dict]]:
    """``sizes`` less those the gain does not pay for, one at a time: while a size saves less than
    ``min_share`` of the cost of the steps it serves (or nothing), the one that saves the smallest
    share goes; then, while ``fits`` says the list does not fit (its pool over the budget), the
    largest (a pool is mostly its largest graph's). Returns (the sizes kept, each size dropped
    with why)."""
    mixed = mixed or {}
    kept = sorted(set(int(s) for s in sizes))
    dropped: list[dict] = []
    while kept:
        worth = []
        for size, (on, without) in _marginal(distribution, kept, objective, padding, mixed).items():
            saving = without - on
            worth.append((saving / on if on > 0 else 0.0, saving, size))
        share, saving, size = min(worth)
        if share < min_share or saving <= 0:
            why = "saves nothing" if saving <= 0 else f"saves {share:.2%} of its steps' time"
        elif fits is not None and not fits(kept):
            share, saving, size = worth[-1]                # the pool is the largest graph's, mostly
            why = "its pool would be larger than the current list's"
        else:
            break
        kept.remove(size)
        dropped.append({"size": size, "saving": saving, "share": share, "why": why})
    return kept, dropped
