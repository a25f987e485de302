"""Which capture sizes to use for a budget of K graphs, chosen exactly from a run's batches.

Cost model, in rows of compute wasted (a "row" is one request of a decode batch):

- a step of batch size ``s`` served by the smallest chosen size ``g >= s`` wastes
  ``g - s`` padded rows (zero when ``g == s``);
- a step above the largest chosen size runs eager and costs ``eager_weight * s`` rows:
  eager takes ``eager/graph`` times as long as a graph would, so the weight is that
  measured ratio minus one (on an H200 eager took 1.1-7.2x a graph step, by model and
  batch size: docs/gpu-results.md; default 3.0).

Only observed sizes can be optimal (moving a chosen size down to the largest observed
size below it never costs more), so the search runs over sorted distinct observed sizes:
``best[j][i]`` is the least cost of serving every size up to ``x_i`` with ``j`` graphs,
the largest being ``x_i``. The largest observed size is always chosen when the budget
allows (``cover_largest``), because a request burst at that size would otherwise run
eager; pass ``cover_largest=False`` for the unconstrained optimum.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from runner.wire import DECODE_VIEW

DEFAULT_EAGER_WEIGHT = 3.0


@dataclass(frozen=True)
class PlanCost:
    sizes: tuple[int, ...]
    steps: int
    graph_steps: int          # served by a graph (exact or padded)
    eager_steps: int          # above the largest size (or above the cap)
    padded_rows: int          # sum over steps of (graph size - batch size)
    computed_rows: int        # rows the graphs computed, padding included, plus eager rows
    cost: float               # padded_rows + eager_weight * eager rows

    @property
    def coverage(self) -> float:
        return self.graph_steps / self.steps if self.steps else 0.0

    @property
    def waste_share(self) -> float:
        return self.padded_rows / self.computed_rows if self.computed_rows else 0.0


@dataclass
class Advice:
    budget: int
    eager_weight: float
    sizes: list[int]
    predicted: PlanCost
    current: PlanCost | None = None
    capture_s_current: float | None = None
    capture_s_predicted: float | None = None
    pool_bytes_current: int | None = None
    pool_bytes_predicted: int | None = None
    flags: dict[str, str] = field(default_factory=dict)

    @property
    def capture_s_saved(self) -> float | None:
        if self.capture_s_current is None or self.capture_s_predicted is None:
            return None
        return self.capture_s_current - self.capture_s_predicted

    @property
    def pool_bytes_saved(self) -> int | None:
        if self.pool_bytes_current is None or self.pool_bytes_predicted is None:
            return None
        return self.pool_bytes_current - self.pool_bytes_predicted

    def as_dict(self) -> dict[str, Any]:
        def plan(p: PlanCost | None) -> dict[str, Any] | None:
            if p is None:
                return None
            return {**asdict(p), "sizes": list(p.sizes), "coverage": p.coverage,
                    "waste_share": p.waste_share}
        return {
            "budget": self.budget, "eager_weight": self.eager_weight, "sizes": self.sizes,
            "predicted": plan(self.predicted), "current": plan(self.current),
            "capture_s_current": self.capture_s_current,
            "capture_s_predicted": self.capture_s_predicted,
            "capture_s_saved": self.capture_s_saved,
            "pool_bytes_current": self.pool_bytes_current,
            "pool_bytes_predicted": self.pool_bytes_predicted,
            "pool_bytes_saved": self.pool_bytes_saved,
            "flags": dict(self.flags),
        }


def _clean(distribution: Mapping[int, int]) -> list[tuple[int, int]]:
    items = sorted((int(s), int(c)) for s, c in distribution.items() if int(c) > 0)
    if any(s < 1 for s, _ in items):
        raise ValueError("batch sizes must be >= 1")
    return items


def plan_cost(distribution: Mapping[int, int], sizes: Iterable[int],
              eager_weight: float = DEFAULT_EAGER_WEIGHT) -> PlanCost:
    """What serving ``distribution`` with capture ``sizes`` costs (padding on)."""
    chosen = sorted(set(int(s) for s in sizes))
    steps = graph_steps = eager_steps = padded = computed = 0
    eager_rows = 0
    for s, count in _clean(distribution):
        steps += count
        g = next((g for g in chosen if g >= s), None)
        if g is None:
            eager_steps += count
            eager_rows += s * count
            computed += s * count
        else:
            graph_steps += count
            padded += (g - s) * count
            computed += g * count
    return PlanCost(tuple(chosen), steps, graph_steps, eager_steps, padded, computed,
                    padded + eager_weight * eager_rows)


def choose_sizes(distribution: Mapping[int, int], budget: int, *,
                 eager_weight: float = DEFAULT_EAGER_WEIGHT, max_size: int | None = None,
                 cover_largest: bool = True) -> list[int]:
    """The capture sizes (at most ``budget``) of least ``plan_cost``, found exactly.

    ``max_size`` caps what may be captured (e.g. the memory-bound largest graph); steps
    above it run eager whatever is chosen. Ties go to fewer sizes.
    """
    if budget < 0:
        raise ValueError("budget must be >= 0")
    if eager_weight < 0:
        raise ValueError("eager_weight must be >= 0")
    items = _clean(distribution)
    xs = [s for s, _ in items if max_size is None or s <= max_size]
    m = len(xs)
    if budget == 0 or m == 0:
        return []
    k_max = min(budget, m)
    # prefix sums over the candidates: count and count*size up to x_i
    counts = dict(items)
    pc = [0] * (m + 1)
    ps = [0] * (m + 1)
    for i, x in enumerate(xs, 1):
        pc[i] = pc[i - 1] + counts[x]
        ps[i] = ps[i - 1] + counts[x] * x
    total_rows = sum(s * c for s, c in items)

    def segment(p: int, i: int) -> int:
        # sizes x_{p+1}..x_i all padded up to x_i (indices 1-based, p < i)
        return xs[i - 1] * (pc[i] - pc[p]) - (ps[i] - ps[p])

    capped_rows = sum(s * c for s, c in items if max_size is not None and s > max_size)

    def tail(i: int) -> float:
        # every candidate above x_i runs eager (sizes beyond the cap are a constant)
        return eager_weight * (total_rows - capped_rows - ps[i])

    inf = float("inf")
    best = [[inf] * (m + 1) for _ in range(k_max + 1)]
    back = [[0] * (m + 1) for _ in range(k_max + 1)]
    for i in range(1, m + 1):
        best[1][i] = segment(0, i)
    for j in range(2, k_max + 1):
        prev, cur, bk = best[j - 1], best[j], back[j]
        for i in range(j, m + 1):
            xi, pci, psi = xs[i - 1], pc[i], ps[i]
            value, arg = inf, 0
            for p in range(j - 1, i):
                v = prev[p] + xi * (pci - pc[p]) - (psi - ps[p])
                if v < value:
                    value, arg = v, p
            cur[i], bk[i] = value, arg
    answer, best_j, best_i = eager_weight * (total_rows - capped_rows), 0, 0
    for j in range(1, k_max + 1):
        for i in range(j, m + 1):
            if cover_largest and i != m:
                continue
            v = best[j][i] + tail(i)
            if v < answer - 1e-9:
                answer, best_j, best_i = v, j, i
    if cover_largest and best_j == 0:
        # all-eager was cheaper, but the largest size must be covered when K allows
        best_j = min(range(1, k_max + 1), key=lambda j: (best[j][m], j))
        best_i = m
    sizes = []
    j, i = best_j, best_i
    while j > 0:
        sizes.append(xs[i - 1])
        i = back[j][i] if j > 1 else 0
        j -= 1
    return sorted(sizes)


def estimate_capture(sizes: Iterable[int], measured: Mapping[int, float]) -> float | None:
    """Sum of per-size estimates: the measured value, else linear in batch size between
    the nearest measured sizes, proportional above the largest, the smallest's value
    below it. None without measurements."""
    if not measured:
        return None
    known = sorted(measured.items())
    total = 0.0
    for s in sizes:
        if s in measured:
            total += measured[s]
            continue
        below = [kv for kv in known if kv[0] < s]
        above = [kv for kv in known if kv[0] > s]
        if below and above:
            (x0, y0), (x1, y1) = below[-1], above[0]
            total += y0 + (y1 - y0) * (s - x0) / (x1 - x0)
        elif below:
            # above every measurement: scale the largest one with the batch size
            x0, y0 = below[-1]
            total += y0 * s / x0
        else:
            total += above[0][1]
    return total


def flags_for(sizes: list[int]) -> dict[str, str]:
    """Ready-to-copy flags that capture exactly ``sizes`` in each engine."""
    spaced = " ".join(str(s) for s in sizes)
    return {
        "replayscope": f"--capture-sizes {','.join(str(s) for s in sizes)}",
        "vllm": f"--cudagraph-capture-sizes {spaced}",
        "vllm_config": "compilation_config=" + json.dumps({"cudagraph_capture_sizes": sizes}),
        "sglang": f"--cuda-graph-bs {spaced}",
    }


def advise(distribution: Mapping[int, int], budget: int, *,
           eager_weight: float = DEFAULT_EAGER_WEIGHT, max_size: int | None = None,
           cover_largest: bool = True, current_sizes: Iterable[int] | None = None,
           capture_s: Mapping[int, float] | None = None,
           pool_bytes: Mapping[int, int] | None = None) -> Advice:
    """Choose sizes for ``budget`` graphs and compare them with the current plan.

    ``capture_s`` / ``pool_bytes`` are the run's measurements per captured size; the
    proposal's capture time and pool memory are scaled from them.
    """
    sizes = choose_sizes(distribution, budget, eager_weight=eager_weight,
                         max_size=max_size, cover_largest=cover_largest)
    current = sorted(set(current_sizes)) if current_sizes else None
    advice = Advice(budget=budget, eager_weight=eager_weight, sizes=sizes,
                    predicted=plan_cost(distribution, sizes, eager_weight),
                    current=plan_cost(distribution, current, eager_weight) if current else None,
                    flags=flags_for(sizes))
    if capture_s:
        advice.capture_s_predicted = estimate_capture(sizes, capture_s)
        if current:
            advice.capture_s_current = estimate_capture(current, capture_s)
    if pool_bytes:
        predicted = estimate_capture(sizes, {k: float(v) for k, v in pool_bytes.items()})
        advice.pool_bytes_predicted = int(predicted) if predicted is not None else None
        if current:
            cur = estimate_capture(current, {k: float(v) for k, v in pool_bytes.items()})
            advice.pool_bytes_current = int(cur) if cur is not None else None
    return advice


def measured_eager_weight(step_times: list[dict[str, Any]], backend: str | None) -> float:
    """eager/graph mean decode step time minus one, on real graph backends; else default."""
    if backend not in ("cuda", "compile"):
        return DEFAULT_EAGER_WEIGHT
    def mean(modes: tuple[str, ...]) -> float | None:       # over the timed steps only
        rows = [r for r in step_times if r["mode"] in modes and r.get("stage") in ("decode", None)]
        timed = sum(r.get("timed_steps", r["steps"]) for r in rows)
        total = sum((r.get("total_s") or 0.0) for r in rows)
        return total / timed if timed and total > 0 else None
    eager, graph = mean(("eager",)), mean(("graph", "padded"))
    if eager is None or graph is None or eager <= graph:
        return DEFAULT_EAGER_WEIGHT
    return eager / graph - 1.0


def run_inputs(store: Any, run_id: str) -> dict[str, Any] | None:
    """What ``advise`` needs from a stored run, read through the query layer."""
    from collector import queries

    summary = queries.run_summary(store, run_id)
    if summary is None:
        return None
    distribution: dict[int, int] = {}
    # The decode stages (runner.wire.DECODE_STAGES): decode steps, and the mixed batches that
    # vLLM's graphs serve by their token count, as every decode figure counts them.
    rows = queries.batch_histogram(store, run_id, stage=DECODE_VIEW)
    for row in rows:
        if row.get("raw_bs") is None:
            continue
        distribution[row["raw_bs"]] = distribution.get(row["raw_bs"], 0) + row["steps"]
    capture_s: dict[int, float] = {}
    pool: dict[int, int] = {}
    for row in queries.captures(store, run_id):
        if row.get("status") != "ok" or row.get("stage", "decode") != "decode":
            continue
        if row["duration_s"] is not None:
            capture_s[row["graph_bs"]] = float(row["duration_s"])
        if row.get("pool_delta_bytes") is not None:
            pool[row["graph_bs"]] = max(0, int(row["pool_delta_bytes"]))
    config = summary.get("config") or {}
    current = config.get("capture_sizes") or sorted(capture_s) or None
    return {
        "summary": summary,
        "distribution": distribution,
        "current_sizes": current,
        "capture_s": capture_s,
        "pool_bytes": pool,
        "eager_weight": measured_eager_weight(queries.step_time_by_mode(store, run_id),
                                              summary.get("backend")),
    }


def default_budget(inputs: dict[str, Any]) -> int:
    """The current plan's number of sizes (8 without one), at most the distinct batch sizes."""
    current = len(inputs["current_sizes"] or []) or 8
    return max(1, min(current, max(len(inputs["distribution"]), 1)))


def advise_run(store: Any, run_id: str, budget: int | None = None, eager_weight: float | None = None,
               inputs: dict[str, Any] | None = None) -> Advice | None:
    """``advise`` for a stored run (what the API's /advice, the Advisor page and ``replayscope
    advise`` show); the budget defaults to ``default_budget``. None for an unknown run."""
    inputs = inputs or run_inputs(store, run_id)
    if inputs is None:
        return None
    return advise(inputs["distribution"], default_budget(inputs) if budget is None else budget,
                  eager_weight=inputs["eager_weight"] if eager_weight is None else eager_weight,
                  current_sizes=inputs["current_sizes"], capture_s=inputs["capture_s"],
                  pool_bytes=inputs["pool_bytes"])


def advice_dict(store: Any, run_id: str, budget: int | None = None,
                eager_weight: float | None = None) -> dict[str, Any] | None:
    """``advise_run`` as JSON, with how many decode steps with a batch size it was chosen from."""
    inputs = run_inputs(store, run_id)
    if inputs is None:
        return None
    advice = advise_run(store, run_id, budget, eager_weight, inputs=inputs)
    steps = sum(inputs["distribution"].values())
    out = advice.as_dict()
    out.update(run_id=run_id, decode_steps=steps, distinct_batch_sizes=len(inputs["distribution"]),
               note=None if steps else "the run recorded no decode steps with a batch size: there is "
                                       "no traffic to choose capture sizes from")
    return out


def _mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:.1f} MiB"


def format_advice(advice: Advice, run_label: str = "") -> str:
    """The terminal report of ``replayscope advise``."""
    p, c = advice.predicted, advice.current
    lines = [f"Capture sizes for {run_label or 'the run'}: budget {advice.budget} graphs, "
             f"eager weight {advice.eager_weight:.2f}",
             f"  {'plan':<10} {'sizes':<40} {'coverage':>9} {'padding':>8} {'eager steps':>12}"]

    def row(name: str, plan: PlanCost) -> str:
        sizes = ",".join(str(s) for s in plan.sizes) or "(none)"
        if len(sizes) > 40:
            sizes = sizes[:37] + "..."
        return (f"  {name:<10} {sizes:<40} {plan.coverage * 100:>8.1f}% "
                f"{plan.waste_share * 100:>7.1f}% {plan.eager_steps:>12,}")
    if c is not None:
        lines.append(row("current", c))
    lines.append(row("proposed", p))
    if advice.capture_s_saved is not None:
        change = "saves" if advice.capture_s_saved >= 0 else "adds"
        lines.append(f"  capture time: {advice.capture_s_current:.3f} s -> "
                     f"{advice.capture_s_predicted:.3f} s ({change} {abs(advice.capture_s_saved):.3f} s)")
    elif advice.capture_s_predicted is not None:
        lines.append(f"  capture time (estimated): {advice.capture_s_predicted:.2f} s")
    if advice.pool_bytes_saved is not None:
        change = "saves" if advice.pool_bytes_saved >= 0 else "adds"
        lines.append(f"  pool memory: {_mib(advice.pool_bytes_current)} -> "
                     f"{_mib(advice.pool_bytes_predicted)} ({change} {_mib(abs(advice.pool_bytes_saved))})")
    lines.append("Flags:")
    for name, flag in advice.flags.items():
        lines.append(f"  {name:<12} {flag}")
    return "\n".join(lines)
