"""The fleet's figures over time, per group of comparable runs."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from replayscope.app import formats
from replayscope.app.charts.base import empty, figure, per_bucket, time_axis, utc_times


FLEET_METRICS = {
    "eager_ratio": ("eager share of decode steps", "ratio"),
    "decode_padded_ratio": ("padding share of decode tokens", "ratio"),
    "graph_step_s": ("graph step time (decode, mean)", "seconds"),
    "padded_step_s": ("padded step time (decode, mean)", "seconds"),
    "eager_step_s": ("eager step time (decode, mean)", "seconds"),
    "capture_total_s": ("capture time (median run)", "seconds"),
    "startup_s": ("startup time (median run)", "seconds"),
    "pool_bytes": ("graph pool memory (largest run)", "bytes"),
}


def fleet_figure(series: list[dict[str, Any]], metric: str) -> go.Figure:
    """One line per (model, backend, device, version) group: ``metric`` per time bucket."""
    label, unit = FLEET_METRICS[metric]
    points = [p for p in series if p.get(metric) is not None]
    if not points:
        return empty(f"no run has a {label.split(' (')[0]}")
    scale, axis = 1, dict(title=dict(text=label), rangemode="tozero")
    if unit == "ratio":
        axis["tickformat"] = ".3~%"
    elif unit == "seconds":
        scale = 1000 if max(p[metric] for p in points) < 1 else 1
        axis["title"] = dict(text=f"{label} ({'ms' if scale == 1000 else 's'})")
    else:
        name, scale = formats.byte_unit(max(p[metric] for p in points))
        scale = 1 / scale
        axis["title"] = dict(text=f"{label} ({name})")
    shown = {"ratio": formats.pct, "seconds": formats.seconds, "bytes": formats.size}[unit]
    bucket_s = max(int(p.get("bucket_s") or 3600) for p in points)
    traces = []
    for group in dict.fromkeys(p["group"] for p in points):
        mine = [p for p in points if p["group"] == group]
        # a point stands for the runs started in its bucket: drawn at the bucket's middle
        traces.append(dict(type="scatter", mode="lines+markers", name=formats.inert(group),
                           x=utc_times(p["t"] + bucket_s / 2 for p in mine), y=[p[metric] * scale for p in mine],
                           customdata=[[shown(p[metric]), formats.plural(p["runs"], "run"),
                                        _bucket_text(p["t"], bucket_s)] for p in mine],
                           hovertemplate="%{fullData.name}<br>runs started %{customdata[2]}: %{customdata[0]} over "
                                         "%{customdata[1]}<extra></extra>"))
    xaxis = time_axis([p["t"] + bucket_s / 2 for p in points], bucket_s)
    xaxis["title"] = dict(text=f"runs started (UTC), per {per_bucket(bucket_s)}")
    return figure(traces, yaxis=axis, xaxis=xaxis, showlegend=True, margin=dict(l=60, r=20, t=20, b=40),
                   legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))


def _bucket_text(t: float, bucket_s: int) -> str:
    """'2026-12-02 17:00–18:00' (UTC) for a fleet bucket."""
    start, end = utc_times([t, t + bucket_s])
    if bucket_s < 86400:
        return f"{start:%Y-%m-%d %H:%M}–{end:%H:%M}"
    return f"{start:%Y-%m-%d} to {end:%Y-%m-%d}"
