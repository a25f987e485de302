"""What every figure shares: the mode colours, the layout, a figure from plain trace dicts,
the empty figure that says why, and the time, batch-size and bytes axes."""

from __future__ import annotations

import datetime as dt
from functools import lru_cache
from typing import Any, Callable, Iterable

import plotly.graph_objects as go

from replayscope.app import formats

MODE_COLORS = {"graph": "#2e8b57", "padded": "#e0a100", "eager": "#c8453b", "unknown": "#9a9a9a"}
MODE_ORDER = ("graph", "padded", "eager")
LAYOUT = dict(margin=dict(l=50, r=20, t=30, b=40),
              legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))


@lru_cache(maxsize=1)
def plotly_template() -> dict[str, Any]:
    import plotly.io as pio

    return pio.templates["plotly_white"].to_plotly_json()


def figure(traces: list[dict[str, Any]], **layout: Any) -> go.Figure:
    """A figure from plain trace dicts, skipping plotly's per-property validation: it
    costs more than the queries on a page of a million-step run (see the benchmark)."""
    return go.Figure({"data": traces, "layout": {"template": plotly_template(), **LAYOUT, **layout}},
                     _validate=False)


def hline(y: float, text: str, color: str = "#555") -> tuple[dict[str, Any], dict[str, Any]]:
    shape = dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=y, y1=y,
                 line=dict(dash="dash", color=color))
    note = dict(xref="paper", x=0, yref="y", y=y, text=text, showarrow=False, xanchor="left",
                yanchor="bottom")
    return shape, note


def utc_times(ts: Iterable[float]) -> list[dt.datetime]:
    return [dt.datetime.fromtimestamp(t, dt.timezone.utc) for t in ts]


def empty(message: str) -> go.Figure:
    return figure([], xaxis=dict(visible=False), yaxis=dict(visible=False),
                   annotations=[dict(text=message, showarrow=False, x=0.5, y=0.5,
                                     xref="paper", yref="paper", font=dict(size=14))])


def per_bucket(bucket_s: float) -> str:
    """A time bucket in words: 'second', 'minute', 'hour', 'day', else '5 s', '10 min 00 s'."""
    words = {1: "second", 60: "minute", 3600: "hour", 86400: "day", 7 * 86400: "week"}
    return words.get(int(bucket_s), formats.seconds(bucket_s))


def time_axis(ts: Iterable[float], bucket_s: float = 1.0) -> dict[str, Any]:
    """A UTC time axis over ``ts`` (unix s) that fits their span: whole-second ticks (the
    series are per second or coarser), and a span of at least a few buckets, so one point is
    not centred in half a millisecond of axis."""
    ts = list(ts)
    if not ts:
        return {}
    lo, hi = min(ts), max(ts)
    pad = max(float(bucket_s), 1.0)
    if hi - lo >= 20 * pad:
        return dict(type="date", tickformatstops=[dict(dtickrange=[None, 1000], value="%H:%M:%S")])
    lo, hi = lo - pad, hi + pad
    step = next(s for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400, 10**9)
                if (hi - lo) / s <= 8)
    return dict(type="date", range=utc_times([lo, hi]), dtick=step * 1000, tick0=utc_times([0])[0],
                tickformat="%H:%M:%S" if step < 60 else "%H:%M" if step < 86400 else "%Y-%m-%d")


# Batch sizes spread thinner than one in this many over their range (an engine's token
# counts: 7, 12, 140, 2048) are drawn on a category axis: on a linear one their bars would be
# too thin to see.
SPARSE_SIZES = 4


RAW_SIZE_TITLE = "batch size (raw)"


def size_title(stages: Iterable[str], in_tokens: Callable[[str], bool]) -> str | None:
    """An axis over sizes of ``stages`` named in their units, each with its stages: ``batch size
    (decode) / tokens (mixed)``, ``tokens (prefill, mixed)``; None where every one is a batch size
    (the chart keeps ``batch size (raw)``). ``in_tokens``: the collector's rule for the run
    (``reasons.size_in_tokens``)."""
    stages = list(dict.fromkeys(stages))
    tokens = [s for s in stages if in_tokens(s)]
    batches = [s for s in stages if s not in tokens]
    parts = [f"{unit} ({', '.join(of)})" for unit, of in (("batch size", batches), ("tokens", tokens)) if of]
    return " / ".join(parts) if tokens else None


def size_axis(sizes: Iterable[int], title: str | None = None) -> tuple[Callable[[int], Any], dict[str, Any]]:
    """(x value of a size, x axis) for a chart over batch sizes: linear, or categories in
    size order when the sizes are sparse over their range. ``title``: the sizes' units where
    some are tokens (``size_title``), else ``batch size (raw)``."""
    ordered = sorted(set(sizes))
    title = dict(title=dict(text=title or RAW_SIZE_TITLE))
    if not ordered or ordered[-1] <= SPARSE_SIZES * len(ordered):
        return (lambda bs: bs), title
    return str, dict(title, type="category", categoryorder="array", categoryarray=[str(s) for s in ordered])


def bytes_axis(values: Iterable[float | None]) -> tuple[str, int]:
    """The unit a bytes axis reads best in, from its largest known value."""
    return formats.byte_unit(max((abs(v) for v in values if v is not None), default=0))


def scaled(values: list[float | None], scale: int) -> list[float | None]:
    """Bytes in the axis unit; unknown stays a gap, never a zero."""
    return [None if v is None else v / scale for v in values]


# A run's sizes in words, ``name(stage, size)``: "bs 8", or "512 tokens" for an engine's prefill
# and mixed graphs (the page passes ``data.size_namer(source, config)``, the collector's one rule).
SizeName = Callable[[str, int], str]


def capture_size(capture: dict[str, Any], size_name: SizeName, decode_stage: bool = False) -> str:
    """A capture's size in words with its stage: "bs 8" (decode, unless ``decode_stage``),
    "bs 8 (decode)", "32 tokens (mixed)"."""
    words = size_name(capture["stage"], capture["graph_bs"])
    return words if capture["stage"] == "decode" and not decode_stage else f"{words} ({capture['stage']})"
