"""vLLM's ``/metrics`` -> step counts (``replayscope scrape``), as the engine counts them.

vLLM (0.25, ``vllm/v1/metrics/loggers.py``) observes ``vllm:iteration_tokens_total`` once per
engine step with that step's tokens (computed prompt tokens + generated tokens): its
``_count`` is the steps, its ``_sum`` the tokens. Its buckets are a fixed list (1, 8, 16, 32,
64, ... 16384), not the capture sizes, and vLLM exports no CUDA-graph metric (its
``--cudagraph-metrics`` table goes to the log only). So a scrape alone cannot know a step's
mode, its padding or why it ran eager: its steps are stored with mode ``unknown``. Only
where the capture sizes are known (``scrape --cudagraph-capture-sizes`` /
``--max-cudagraph-capture-size``) a bucket whose every value is above the largest size is
eager ``batch_too_large`` (inferred); every other bucket may hold steps either side of a
captured size, and stays unknown. Where the server's log (``--engine-log``) says graphs are
off, every step is eager ``graphs_disabled``; where it states the sizes, they serve as the flags.
"""

from __future__ import annotations

from typing import Any, Callable

from replayscope.contract.errors import ReplayscopeError
from replayscope.contract.formats import plural
from replayscope.contract.wire import MODE_UNKNOWN

VLLM_TOKENS = "vllm:iteration_tokens_total"
# The engine's own counters of the same steps, shown with each poll (summed over DP engines).
VLLM_COUNTERS = (("prompt tokens", "vllm:prompt_tokens_total"),
                 ("generated tokens", "vllm:generation_tokens_total"),
                 ("requests finished", "vllm:request_success_total"))
# What a vLLM scrape cannot know (the run's config ``not_measured``); with graphs off (the
# server's log says so) every step is eager, unpadded, for that reason: only the sizes are not known.
VLLM_NOT_MEASURED = ["modes", "padding", "reasons", "batch_sizes"]
VLLM_NOT_MEASURED_GRAPHS_OFF = ["batch_sizes"]

Delta = Callable[[tuple, float, "float | None"], float]   # (series key, value, created) -> increase


def _series(labels: dict[str, str]) -> tuple:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "le"))


def histogram_deltas(samples: list[tuple[str, dict[str, str], float]], delta: Delta
                     ) -> tuple[float, float, dict[float, float]]:
    """This poll's increase of the histogram's ``_count`` (steps), ``_sum`` (tokens) and of
    each bucket's own count (by upper bound), over every series (data-parallel engines add up)."""
    created = {_series(l): v for n, l, v in samples if n == VLLM_TOKENS + "_created"}
    steps = tokens = 0.0
    buckets: dict[tuple, dict[float, float]] = {}
    for name, labels, value in samples:
        series = _series(labels)
        if name == VLLM_TOKENS + "_count":
            steps += delta(("count", series), value, created.get(series))
        elif name == VLLM_TOKENS + "_sum":
            tokens += delta(("sum", series), value, created.get(series))
        elif name == VLLM_TOKENS + "_bucket" and "le" in labels:
            try:
                buckets.setdefault(series, {})[float(labels["le"])] = value
            except ValueError:
                continue
    per_le: dict[float, float] = {}
    for series, cumulative in buckets.items():
        les = sorted(cumulative)
        for i, le in enumerate(les):
            own = cumulative[le] - (cumulative[les[i - 1]] if i else 0.0)
            per_le[le] = per_le.get(le, 0.0) + delta(("bucket", series, le), own, created.get(series))
    return steps, tokens, per_le


def counter_deltas(samples: list[tuple[str, dict[str, str], float]], delta: Delta) -> dict[str, int]:
    """This poll's increase of each of ``VLLM_COUNTERS`` the server has, by its words."""
    out: dict[str, int] = {}
    for words, name in VLLM_COUNTERS:
        created_name = name.removesuffix("_total") + "_created"
        created = {_series(l): v for n, l, v in samples if n == created_name}
        total, seen = 0.0, False
        for sample_name, labels, value in samples:
            if sample_name == name:
                seen = True
                total += delta((name, _series(labels)), value, created.get(_series(labels)))
        if seen:
            out[words] = int(round(total))
    return out


def above_largest(per_le: dict[float, float], largest: int) -> tuple[int, int | None]:
    """Steps in buckets whose every value is above ``largest`` (a bucket (a, b] holds a+1..b),
    and the lowest such bucket's lower bound."""
    count, lowest = 0.0, None
    previous = 0.0
    for le in sorted(per_le):
        if previous >= largest:
            count += per_le[le]
            lowest = int(previous) if lowest is None else lowest
        previous = le
    return int(round(count)), lowest


def sizes_from_log(path: str) -> tuple[list[int] | None, int | None, str | None]:
    """What the server's own log (``scrape --engine-log``) says of its graphs: (the capture
    sizes, the largest, why graphs are off or None); ReplayscopeError when it says none."""
    from replayscope.collector.importers import import_log

    result = import_log("vllm", path)
    config = (result.runs[-1].run.get("config") or {}) if result.runs else {}
    if config.get("enforce_eager") or str(config.get("cudagraph_mode") or "").upper() == "NONE":
        why = "enforce_eager=True" if config.get("enforce_eager") else "cudagraph_mode NONE"
        return None, None, f"the server's log ({path}) says {why}: no graphs"
    sizes = config.get("capture_sizes") or None
    largest = config.get("max_capture_size") or (max(sizes) if sizes else None)
    if not largest:
        raise ReplayscopeError(f"{path} states no capture sizes (its last run's); give "
                               f"--cudagraph-capture-sizes or --max-cudagraph-capture-size instead")
    return sizes, largest, None


def vllm_events(samples: list[tuple[str, dict[str, str], float]], delta: Delta, base: dict[str, Any],
                largest: int | None, graphs_off: str | None = None,
                totals: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """One poll's ``step_counts``: eager ``batch_too_large`` for the steps known to be above
    ``largest`` (the largest capture size, or a bound on it: None when unknown), mode
    ``unknown`` for the rest; every step eager ``graphs_disabled`` where ``graphs_off`` says
    why. Together they hold the poll's steps and tokens as the histogram's ``_count`` and
    ``_sum`` give them. ``totals`` adds up the engine's own counts since the first poll."""
    steps_f, tokens_f, per_le = histogram_deltas(samples, delta)
    counters = counter_deltas(samples, delta)
    steps, tokens = int(round(steps_f)), int(round(max(0.0, tokens_f)))
    if totals is not None:
        for key, n in [("steps", steps), ("tokens", tokens), *counters.items()]:
            key = key.replace(" ", "_")
            totals[key] = totals.get(key, 0) + max(0, n)
    if steps < 1:
        return []
    engine = f"{steps} engine steps, {tokens} tokens ({VLLM_TOKENS} _count, _sum)"
    if counters:
        engine += "; " + ", ".join(f"{n} {words}" for words, n in counters.items())
    base = dict(base, stage="mixed", padded_tokens=0)
    if graphs_off:
        return [dict(base, mode="eager", reason="graphs_disabled", count=steps, num_tokens=tokens,
                     provenance="inferred", evidence=(graphs_off + ". " + engine)[:500])]
    eager, lowest = above_largest(per_le, largest) if largest else (0, None)
    eager = min(eager, steps)
    unknown = steps - eager
    events: list[dict[str, Any]] = []
    if eager:
        where = (f"{plural(eager, 'step')} in buckets above {lowest} tokens, all above {largest}, the largest "
                 f"capture size known")
        tokens_note = (f"; their tokens are counted with the poll's {unknown} other steps (vLLM sums all)"
                       if unknown else "")
        events.append(dict(base, mode="eager", reason="batch_too_large", count=eager,
                           num_tokens=0 if unknown else tokens, provenance="inferred",
                           evidence=(where + tokens_note + ". " + engine)[:500]))
    if unknown:
        why = ("no capture sizes given to scrape" if not largest
               else f"their buckets do not lie wholly above {largest}, the largest capture size")
        events.append(dict(base, mode=MODE_UNKNOWN, reason=None, count=unknown, num_tokens=tokens,
                           provenance="measured",
                           evidence=(f"/metrics gives no mode, padding or reason ({why}). " + engine)[:500]))
    return events


def is_vllm(names: set[str]) -> bool:
    return VLLM_TOKENS + "_count" in names or VLLM_TOKENS + "_bucket" in names
