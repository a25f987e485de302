"""A startup laid out: graph-pool memory per capture, the phases' waterfall, capture time
per size, and a startup against an earlier one."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from replayscope.app import formats
from replayscope.app.charts.base import LAYOUT, SizeName, bytes_axis, capture_size, empty, figure, scaled

def pool_figure(captures: list[dict[str, Any]], *, size_name: SizeName) -> go.Figure:
    """Graph-pool memory per capture, in capture order: the delta and the pool after, each
    capture named by ``size_name`` with its stage ("bs 8 (decode)", "32 tokens (mixed)")."""
    rows = [c for c in captures if c.get("pool_bytes") is not None or c.get("pool_delta_bytes") is not None]
    if not rows:
        return empty("no pool memory reported")
    labels = [capture_size(c, size_name, decode_stage=True) for c in rows]
    deltas, pools = [c.get("pool_delta_bytes") for c in rows], [c.get("pool_bytes") for c in rows]
    unit, scale = bytes_axis(deltas + pools)
    return figure([
        dict(type="bar", x=labels, y=scaled(deltas, scale), name="delta", marker=dict(color="#6a8fc8"),
             customdata=[formats.size(v) for v in deltas], hovertemplate="%{x}: delta %{customdata}<extra></extra>"),
        dict(type="scatter", x=labels, y=scaled(pools, scale), name="pool after", mode="lines+markers",
             line=dict(color="#1f4e9c"), customdata=[formats.size(v) for v in pools],
             hovertemplate="%{x}: pool %{customdata}<extra></extra>"),
    ], yaxis=dict(title=dict(text=unit), tickformat=",~r", rangemode="tozero"),
        xaxis=dict(title=dict(text="capture (in order)")))


def waterfall_rows(phases: list[dict[str, Any]], captures: list[dict[str, Any]],
                   unaccounted: list[dict[str, Any]] | None = None,
                   origin: float | None = None, *, size_name: SizeName) -> list[dict[str, Any]]:
    """Startup bars: label, start (s from ``origin``, else from the first phase), duration,
    kind. The capture phase is replaced by one bar per captured size when captures are known;
    each unaccounted stretch (the diagnosis's) is a bar of its own where it falls."""
    def start_of(row: dict[str, Any]) -> float | None:
        if row.get("start_ts") is not None:
            return float(row["start_ts"])
        if row.get("ts") is not None:
            return float(row["ts"]) - float(row["duration_s"])
        return None

    phases = [p for p in phases if p.get("duration_s") is not None]      # unknown lengths have no bar
    captures = [c for c in captures if c.get("duration_s") is not None]
    bars: list[dict[str, Any]] = []
    for p in phases:
        if p["phase"].startswith("capture") and captures:   # shown per size below
            continue
        bars.append({"label": p["phase"], "abs": start_of(p), "duration": float(p["duration_s"]),
                     "kind": "phase"})
    for c in captures:
        bars.append({"label": f"capture {capture_size(c, size_name)}",
                     "abs": start_of(c), "duration": float(c["duration_s"]),
                     "kind": "failed" if c.get("status") == "failed" else "capture"})
    if bars and unaccounted:
        stretches = sorted(unaccounted, key=lambda g: g["start_ts"])
        for i, g in enumerate(stretches, 1):
            label = "unaccounted" if len(stretches) == 1 else f"unaccounted {i}"
            bars.append({"label": label, "abs": float(g["start_ts"]), "duration": float(g["seconds"]),
                         "kind": "unaccounted"})
        bars.sort(key=lambda b: (b["abs"] is None, b["abs"] or 0.0))
    known = [b["abs"] for b in bars if b["abs"] is not None]
    origin = origin if origin is not None else (min(known) if known else 0.0)
    cursor = 0.0
    for b in bars:
        b["start"] = b["abs"] - origin if b["abs"] is not None else cursor
        cursor = b["start"] + b["duration"]
    return bars


def waterfall_figure(phases: list[dict[str, Any]], captures: list[dict[str, Any]],
                     unaccounted: list[dict[str, Any]] | None = None, origin: float | None = None,
                     ready_at: float | None = None, *, size_name: SizeName) -> go.Figure:
    """The waterfall; with the diagnosis's ``origin`` (the run's start), its unaccounted
    stretches and the ready line's time (a dashed line, "ready")."""
    bars = waterfall_rows(phases, captures, unaccounted, origin, size_name=size_name)
    if not bars:
        return empty("no startup phases reported")
    colors = {"phase": "#6a8fc8", "capture": "#2e8b57", "failed": "#c8453b", "unaccounted": "#b8b8b8"}
    traces = []
    for kind in ("phase", "capture", "failed", "unaccounted"):
        rows = [b for b in bars if b["kind"] == kind]
        if rows:
            traces.append(dict(type="bar", y=[b["label"] for b in rows], x=[b["duration"] for b in rows],
                               base=[b["start"] for b in rows], orientation="h", name=kind,
                               marker=dict(color=colors[kind]),
                               customdata=[[formats.seconds(b["duration"]), formats.seconds(b["start"])]
                                           for b in rows],
                               hovertemplate="%{y}: %{customdata[0]} from %{customdata[1]}<extra></extra>"))
    extra: dict[str, Any] = {}
    if ready_at is not None and origin is not None:
        at = float(ready_at) - float(origin)
        extra["shapes"] = [dict(type="line", x0=at, x1=at, yref="paper", y0=0, y1=1,
                                line=dict(color="#333333", dash="dash", width=1))]
        extra["annotations"] = [dict(x=at, y=1, yref="paper", yanchor="bottom", showarrow=False,
                                     text=f"ready at {formats.seconds(at)}")]
    return figure(traces, xaxis=dict(title=dict(text="seconds since startup began")),
                  yaxis=dict(autorange="reversed", categoryorder="array",
                             categoryarray=[b["label"] for b in bars]),
                  height=max(260, 26 * len(bars) + 80), **extra)


def capture_figure(captures: list[dict[str, Any]], missing: str = formats.NOT_MEASURED,
                   none: str = "no captures reported", *, size_name: SizeName) -> go.Figure:
    """Capture duration per size (failed ones red), in ms where all are under a second, with
    the pool delta on a second axis where any was measured (else the chart says so); an
    unknown duration or delta is a gap (its hover says ``missing``), never a zero. Where no
    size has a time the chart says so (the page lists the sizes in a table). A decode size is a
    bare number on the axis; any other is named with its unit and stage ("512 tokens (prefill)")."""
    if not captures:
        return empty(none)
    if all(c.get("duration_s") is None for c in captures):
        return empty(f"time per size {missing}: the sizes are listed below")
    rows = sorted(captures, key=lambda c: (c["stage"], c["graph_bs"]))
    labels = [str(c["graph_bs"]) if c["stage"] == "decode" else capture_size(c, size_name) for c in rows]
    names = [capture_size(c, size_name) for c in rows]
    durations = [c.get("duration_s") for c in rows]
    ms = max(d for d in durations if d is not None) < 1
    traces = [dict(type="bar", x=labels, y=[None if d is None else d * (1000 if ms else 1) for d in durations],
                   name="capture time", marker=dict(color=["#c8453b" if c.get("status") == "failed" else "#2e8b57"
                                                           for c in rows]),
                   customdata=[[n, formats.seconds(d, missing)] for n, d in zip(names, durations)],
                   hovertemplate="%{customdata[0]}: captured in %{customdata[1]}<extra></extra>")]
    decode = sum(c["stage"] == "decode" for c in rows)
    x_title = ("batch size" if decode == len(rows) else "capture size" if not decode
               else "decode batch size, others as named")
    layout: dict[str, Any] = dict(xaxis=dict(title=dict(text=x_title), type="category"),
                                  yaxis=dict(title=dict(text="capture time (ms)" if ms else "capture time (s)"),
                                             tickformat=",~r", rangemode="tozero"))
    deltas = [c.get("pool_delta_bytes") for c in rows]
    if any(v is not None for v in deltas):
        unit, scale = bytes_axis(deltas)
        traces.append(dict(type="scatter", x=labels, y=scaled(deltas, scale), yaxis="y2",
                           name=f"pool delta ({unit})", mode="lines+markers", line=dict(color="#1f4e9c"),
                           customdata=[[n, formats.size(v, missing)] for n, v in zip(names, deltas)],
                           hovertemplate="%{customdata[0]}: pool delta %{customdata[1]}<extra></extra>"))
        layout["yaxis2"] = dict(title=dict(text=unit), overlaying="y", side="right", tickmode="auto",
                                showgrid=False, tickformat=",~r", rangemode="tozero")
    else:
        layout["annotations"] = [dict(text=f"pool memory per capture {missing}", showarrow=False, xref="paper",
                                      yref="paper", x=1, y=1.01, xanchor="right", yanchor="bottom")]
        layout["margin"] = dict(LAYOUT["margin"], t=44)          # room above the bars for it
    return figure(traces, **layout)


def startup_diff(phases: list[dict[str, Any]], captures: list[dict[str, Any]],
                 base_phases: list[dict[str, Any]], base_captures: list[dict[str, Any]], *,
                 size_name: SizeName, base_size_name: SizeName) -> list[dict[str, Any]]:
    """Per phase and per capture size: this run, the baseline, and the difference (s); each
    run's sizes named by its own ``size_name`` (a baseline may be of another engine)."""
    def totals(phs, caps, name):
        out: dict[str, float] = {}
        for p in phs:
            if p["duration_s"] is not None:
                out[f"phase {p['phase']}"] = out.get(f"phase {p['phase']}", 0.0) + float(p["duration_s"])
        for c in caps:
            if c["duration_s"] is None:
                continue
            key = f"capture {capture_size(c, name)}"
            out[key] = out.get(key, 0.0) + float(c["duration_s"])
        return out
    mine, base = totals(phases, captures, size_name), totals(base_phases, base_captures, base_size_name)
    keys = [k for k in mine] + [k for k in base if k not in mine]
    return [{"item": k, "run_s": mine.get(k), "baseline_s": base.get(k),
             "diff_s": (mine.get(k) or 0.0) - (base.get(k) or 0.0)} for k in keys]


def diff_figure(diff: list[dict[str, Any]]) -> go.Figure:
    if not diff:
        return empty("choose a baseline run")
    return figure([dict(type="bar", x=[d["item"] for d in diff], y=[d["diff_s"] for d in diff],
                         marker=dict(color=["#c8453b" if d["diff_s"] > 0 else "#2e8b57" for d in diff]),
                         name="run − baseline (s)", customdata=[formats.signed_seconds(d["diff_s"]) for d in diff],
                         hovertemplate="%{x}: %{customdata}<extra></extra>")],
                   yaxis=dict(title=dict(text="run − baseline (s)")))


# name -> (label, unit): what the fleet chart can plot, from replayscope.collector.analysis.fleet's series points.
