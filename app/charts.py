"""Figure builders: plain dicts shaped like the query layer's results in, plotly figures out.

Pure functions, no store access, so the pages, the tests and the benchmark build the
same figures from the same rows.
"""

from __future__ import annotations

import datetime as dt
import math
from functools import lru_cache
from typing import Any, Callable, Iterable

import plotly.graph_objects as go

from app import formats

MODE_COLORS = {"graph": "#2e8b57", "padded": "#e0a100", "eager": "#c8453b"}
MODE_ORDER = ("graph", "padded", "eager")
_LAYOUT = dict(margin=dict(l=50, r=20, t=30, b=40),
               legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))


@lru_cache(maxsize=1)
def _template() -> dict[str, Any]:
    import plotly.io as pio

    return pio.templates["plotly_white"].to_plotly_json()


def _figure(traces: list[dict[str, Any]], **layout: Any) -> go.Figure:
    """A figure from plain trace dicts, skipping plotly's per-property validation: it
    costs more than the queries on a page of a million-step run (see the benchmark)."""
    return go.Figure({"data": traces, "layout": {"template": _template(), **_LAYOUT, **layout}},
                     _validate=False)


def _hline(y: float, text: str, color: str = "#555") -> tuple[dict[str, Any], dict[str, Any]]:
    shape = dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=y, y1=y,
                 line=dict(dash="dash", color=color))
    note = dict(xref="paper", x=0, yref="y", y=y, text=text, showarrow=False, xanchor="left",
                yanchor="bottom")
    return shape, note


def _times(ts: Iterable[float]) -> list[dt.datetime]:
    return [dt.datetime.fromtimestamp(t, dt.timezone.utc) for t in ts]


def _empty(message: str) -> go.Figure:
    return _figure([], xaxis=dict(visible=False), yaxis=dict(visible=False),
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
    return dict(type="date", range=_times([lo, hi]), dtick=step * 1000, tick0=_times([0])[0],
                tickformat="%H:%M:%S" if step < 60 else "%H:%M" if step < 86400 else "%Y-%m-%d")


def mode_mix_figure(timeline: list[dict[str, Any]], bucket_s: float = 1.0, counted: str = "steps") -> go.Figure:
    """Steps per bucket, stacked graph / padded / eager (``counted``: what a step count is,
    "logged steps (1 in 40 decode)" where the log samples them)."""
    if not timeline:
        return _empty("no steps yet")
    x = _times(p["t"] + bucket_s / 2 for p in timeline)         # a bar spans its bucket
    return _figure([dict(type="bar", x=x, y=[p[m] for p in timeline], name=m, width=bucket_s * 1000 * 0.9,
                         marker=dict(color=MODE_COLORS[m])) for m in MODE_ORDER],
                   barmode="stack", bargap=0.05, xaxis=time_axis([p["t"] for p in timeline], bucket_s),
                   yaxis=dict(title=dict(text=f"{counted} per {per_bucket(bucket_s)}")))


def eager_ratio_figure(timeline: list[dict[str, Any]], thresholds: list[tuple[str, float]] = (),
                       spans: list[dict[str, Any]] = (), now: float | None = None,
                       scope: str | None = None) -> go.Figure:
    """Eager ratio per bucket with each applicable alert threshold and the alert spans shaded
    (``scope``: the stages the timeline is over, in words; None: every step)."""
    if not timeline:
        return _empty(f"no {scope} steps yet" if scope else "no steps yet")
    x = _times(p["t"] for p in timeline)
    shapes, notes = [], []
    for name, threshold in thresholds:
        shape, note = _hline(threshold, f"{name} ≥ {threshold:.0%}")
        shapes.append(shape)
        notes.append(note)
    end_default = now if now is not None else timeline[-1]["t"]
    for span in spans:
        x0, x1 = _times([span["started_at"], span.get("ended_at") or end_default])
        shapes.append(dict(type="rect", xref="x", x0=x0, x1=x1, yref="paper", y0=0, y1=1,
                           fillcolor="#c8453b", opacity=0.12, line=dict(width=0), layer="below"))
    return _figure([dict(type="scatter", x=x, y=[p["eager_ratio"] for p in timeline], name="eager ratio",
                         mode="lines+markers", marker=dict(size=4), line=dict(color=MODE_COLORS["eager"]),
                         customdata=[formats.plural(p["steps"], "step") for p in timeline],
                         hovertemplate="%{x}: %{y:.1%} eager of %{customdata}<extra></extra>")],
                   shapes=shapes, annotations=notes,
                   yaxis=dict(title=dict(text="eager share of steps"), tickformat=".0%", range=[0, 1.05]))


RULE_COLORS = ("#c8453b", "#7a3fb0", "#1f4e9c", "#b5651d")


def rule_ratio_figure(judged: list[dict[str, Any]], scope: str, every_s: int = 1) -> go.Figure:
    """The eager ratio as each eager-ratio rule watching the run judges it, against that
    rule's threshold, with that rule's alert spans shaded. ``judged``: per rule, its ``rule``
    row, ``points`` (``collector.alerting.eager_ratio.judged_ratios``: a gap where fewer than min steps ran)
    and ``spans`` (its alerts for this run)."""
    if not any(p["ratio"] is not None for j in judged for p in j["points"]):
        rules = "<br>".join(f"{j['rule']['name']}: {j['rule']['min_steps']:,} steps in "
                            f"{formats.seconds(j['rule']['window_s'])}" for j in judged)
        return _empty(f"no window had the {scope} steps its rule needs to judge:<br>{rules}")
    traces, shapes, notes, ts = [], [], [], []
    for i, j in enumerate(judged):
        rule, color = j["rule"], RULE_COLORS[i % len(RULE_COLORS)]
        ts += [p["t"] for p in j["points"]]
        traces.append(dict(
            type="scatter", mode="lines+markers", marker=dict(size=4), line=dict(color=color), connectgaps=False,
            name=f"{rule['name']}: last {formats.seconds(rule['window_s'])}, ≥ {rule['min_steps']:,} steps",
            x=_times(p["t"] for p in j["points"]), y=[p["ratio"] for p in j["points"]],
            customdata=[formats.plural(p["steps"], "step") for p in j["points"]],
            hovertemplate="%{x}: %{y:.1%} eager of %{customdata} in the window<extra></extra>"))
        shape, note = _hline(rule["threshold"], f"{rule['name']} > {formats.pct(rule['threshold'])}", color)
        shapes.append(shape)
        notes.append({**note, "x": 1, "xanchor": "right"} if i % 2 else note)
        end = max(p["t"] for p in j["points"]) if j["points"] else None
        for span in j["spans"]:
            x0, x1 = _times([span["started_at"], span.get("ended_at") or end or span["started_at"]])
            shapes.append(dict(type="rect", xref="x", x0=x0, x1=x1, yref="paper", y0=0, y1=1,
                               fillcolor=color, opacity=0.12, line=dict(width=0), layer="below"))
    return _figure(traces, shapes=shapes, annotations=notes, xaxis=time_axis(ts, every_s), showlegend=True,
                   yaxis=dict(title=dict(text=f"eager share of {scope} steps"), tickformat=".0%", range=[0, 1.05]))


# Batch sizes spread thinner than one in this many over their range (an engine's token
# counts: 7, 12, 140, 2048) are drawn on a category axis: on a linear one their bars would be
# too thin to see.
SPARSE_SIZES = 4


def _size_axis(sizes: Iterable[int]) -> tuple[Callable[[int], Any], dict[str, Any]]:
    """(x value of a size, x axis) for a chart over batch sizes: linear, or categories in
    size order when the sizes are sparse over their range."""
    ordered = sorted(set(sizes))
    title = dict(title=dict(text="batch size (raw)"))
    if not ordered or ordered[-1] <= SPARSE_SIZES * len(ordered):
        return (lambda bs: bs), title
    return str, dict(title, type="category", categoryorder="array", categoryarray=[str(s) for s in ordered])


def batch_histogram_figure(hist: list[dict[str, Any]], captured: Iterable[int] = (),
                           scope: str = "decode", counted: str = "steps") -> go.Figure:
    """Steps (``counted``, as for ``mode_mix_figure``) per batch size, coloured by mode, with the captured sizes marked (``scope``: the
    stages ``hist`` is over, in words)."""
    if not hist:
        return _empty(f"no {scope} steps yet")
    sizes = sorted(set(captured))
    x, xaxis = _size_axis([r["raw_bs"] for r in hist] + sizes)
    traces = []
    for mode in MODE_ORDER:
        rows = [r for r in hist if r["mode"] == mode]
        if rows:
            traces.append(dict(type="bar", x=[x(r["raw_bs"]) for r in rows], y=[r["steps"] for r in rows],
                               name=mode, marker=dict(color=MODE_COLORS[mode])))
    if sizes:
        traces.append(dict(type="scatter", x=[x(s) for s in sizes], y=[0] * len(sizes), mode="markers",
                           name="captured size", marker=dict(symbol="triangle-up", size=11, color="#1f4e9c"),
                           hovertemplate="captured bs %{x}<extra></extra>"))
    return _figure(traces, barmode="stack", xaxis=xaxis, yaxis=dict(title=dict(text=counted)))


def advisor_histogram_figure(hist: list[dict[str, Any]], proposed: Iterable[int], current: Iterable[int],
                             x_title: str = "batch size (raw)") -> go.Figure:
    """The steps the advisor chose from, per batch size, coloured by how they really ran,
    with the proposed sizes (▲ under the axis) and the run's current sizes (▼ above it)."""
    if not hist:
        return _empty("no decode steps a list of capture sizes decides")
    traces = []
    sizes_seen = [r["raw_bs"] for r in hist]
    width = max(0.8, (max(sizes_seen) - min(sizes_seen)) / 150)     # sparse token counts: bars stay bars
    for mode in MODE_ORDER:
        rows = [r for r in hist if r["mode"] == mode]
        if rows:
            traces.append(dict(type="bar", x=[r["raw_bs"] for r in rows], y=[r["steps"] for r in rows],
                               width=width, name=f"ran {mode}", marker=dict(color=MODE_COLORS[mode]),
                               hovertemplate=f"bs %{{x}}: %{{y:,}} steps ran {mode}<extra></extra>"))
    for name, sizes, symbol, y, color in (("proposed size", proposed, "triangle-up", 0, "#1f4e9c"),
                                          ("current size", current, "triangle-down", 1, "#7a7a7a")):
        sizes = sorted(set(sizes))
        if sizes:
            traces.append(dict(type="scatter", x=sizes, y=[y] * len(sizes), yaxis="y2", mode="markers", name=name,
                               marker=dict(symbol=symbol, size=11, color=color),
                               hovertemplate=f"{name} %{{x}}<extra></extra>"))
    return _figure(traces, barmode="stack", xaxis=dict(title=dict(text=x_title), rangemode="nonnegative"),
                   yaxis=dict(title=dict(text="steps")),
                   yaxis2=dict(overlaying="y", range=[-0.05, 1.05], visible=False, fixedrange=True))


def padding_by_size(hist: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per batch size: raw_bs, num_tokens, padded_tokens and share = padded / (num + padded)."""
    per_bs: dict[int, list[int]] = {}
    for r in hist:
        acc = per_bs.setdefault(r["raw_bs"], [0, 0])
        acc[0] += r["num_tokens"]
        acc[1] += r["padded_tokens"]
    return [{"raw_bs": bs, "num_tokens": tok, "padded_tokens": pad,
             "share": pad / (tok + pad) if tok + pad else None} for bs, (tok, pad) in sorted(per_bs.items())]


def padding_figure(hist: list[dict[str, Any]], scope: str = "decode") -> go.Figure:
    """Padded tokens as a share of the tokens computed (padded + real), per batch size: the
    same share as the run's padding figure, size by size (``hist`` is over the decode stages;
    ``scope`` names them in words)."""
    rows = [r for r in padding_by_size(hist) if r["share"] is not None]
    if not any(r["padded_tokens"] for r in rows):
        return _empty("no padding")
    x, xaxis = _size_axis(r["raw_bs"] for r in rows)
    return _figure([dict(type="bar", x=[x(r["raw_bs"]) for r in rows], y=[r["share"] for r in rows],
                         name="padding share", marker=dict(color=MODE_COLORS["padded"]),
                         customdata=[[formats.pct(r["share"]), formats.count(r["padded_tokens"]),
                                      formats.count(r["num_tokens"] + r["padded_tokens"])] for r in rows],
                         hovertemplate="bs %{x}: %{customdata[0]} padding (%{customdata[1]} of "
                                       f"%{{customdata[2]}} {scope} tokens)<extra></extra>")],
                   xaxis=xaxis,
                   yaxis=dict(title=dict(text=f"padded share of {scope} tokens"), tickformat=".0%",
                              rangemode="tozero"))


def _timed_of(timed: int, steps: int) -> str:
    """What a mean step time is taken over: 'N steps', or 'N timed steps of M' when not all were."""
    if timed == steps:
        return formats.plural(steps, "step")
    return f"{formats.plural(timed, 'timed step')} of {steps:,}"


def step_time_figure(step_times: list[dict[str, Any]]) -> go.Figure:
    """Mean step time per mode, grouped by stage."""
    timed = [r for r in step_times if r.get("mean_s") is not None]
    if not timed:
        return _empty("no timed steps")
    traces = []
    for mode in MODE_ORDER:
        rows = [r for r in timed if r["mode"] == mode]
        if rows:
            traces.append(dict(type="bar", x=[r["stage"] for r in rows], y=[r["mean_s"] * 1000 for r in rows],
                               name=mode, marker=dict(color=MODE_COLORS[mode]),
                               customdata=[[formats.seconds(r["mean_s"]),
                                            _timed_of(r.get("timed_steps", r["steps"]), r["steps"])]
                                           for r in rows],
                               hovertemplate="%{x} " + mode + ": %{customdata[0]} mean over %{customdata[1]}"
                                                              "<extra></extra>"))
    return _figure(traces, barmode="group", yaxis=dict(title=dict(text="mean step time (ms)"), tickformat=",~r"))


def _bytes_axis(values: Iterable[float | None]) -> tuple[str, int]:
    """The unit a bytes axis reads best in, from its largest known value."""
    return formats.byte_unit(max((abs(v) for v in values if v is not None), default=0))


def _scaled(values: list[float | None], scale: int) -> list[float | None]:
    """Bytes in the axis unit; unknown stays a gap, never a zero."""
    return [None if v is None else v / scale for v in values]


def pool_figure(captures: list[dict[str, Any]]) -> go.Figure:
    """Graph-pool memory per capture, in capture order: the delta and the pool after."""
    rows = [c for c in captures if c.get("pool_bytes") is not None or c.get("pool_delta_bytes") is not None]
    if not rows:
        return _empty("no pool memory reported")
    labels = [f"bs {c['graph_bs']} ({c['stage']})" for c in rows]
    deltas, pools = [c.get("pool_delta_bytes") for c in rows], [c.get("pool_bytes") for c in rows]
    unit, scale = _bytes_axis(deltas + pools)
    return _figure([
        dict(type="bar", x=labels, y=_scaled(deltas, scale), name="delta", marker=dict(color="#6a8fc8"),
             customdata=[formats.size(v) for v in deltas], hovertemplate="%{x}: delta %{customdata}<extra></extra>"),
        dict(type="scatter", x=labels, y=_scaled(pools, scale), name="pool after", mode="lines+markers",
             line=dict(color="#1f4e9c"), customdata=[formats.size(v) for v in pools],
             hovertemplate="%{x}: pool %{customdata}<extra></extra>"),
    ], yaxis=dict(title=dict(text=unit), tickformat=",~r", rangemode="tozero"),
        xaxis=dict(title=dict(text="capture (in order)")))


def parity_figure(parity: list[dict[str, Any]]) -> go.Figure:
    """Divergence between graph replay and eager on the same inputs, per checked size: on a
    log axis, unless a check matched exactly (0 has no place on a log axis, and an exact
    match must be seen, not dropped)."""
    if not parity:
        return _empty("no parity checks in this run")
    values = [p[k] for p in parity for k in ("max_abs_diff", "rel_err")]
    log = all(v > 0 for v in values)
    shapes, notes = [], []
    for tol in sorted({p["tolerance"] for p in parity if p.get("tolerance") is not None}):
        shape, note = _hline(tol, f"tolerance {formats.number(tol)}", "#c8453b")
        shapes.append(shape)
        notes.append({**note, "y": math.log10(tol) if log and tol > 0 else tol})
    exact = sum(1 for p in parity if p["max_abs_diff"] == 0)
    checks = formats.plural(len(parity), "check") + (f", {exact} exact" if exact else "")
    traces = []
    for key, name, symbol in (("max_abs_diff", "max |diff|", "circle"), ("rel_err", "relative error", "diamond")):
        traces.append(dict(type="scatter", x=[p["graph_bs"] for p in parity], y=[p[key] for p in parity],
                           mode="markers", marker=dict(size=9, symbol=symbol),
                           name=f"{name} ({checks})" if key == "max_abs_diff" else name,
                           customdata=[formats.number(p[key]) for p in parity],
                           hovertemplate="bs %{x}: " + name + " %{customdata}<extra></extra>"))
    yaxis = (dict(type="log", tickformat=".1~e") if log
             else dict(type="linear", rangemode="tozero", tickformat=".2~g"))
    return _figure(traces, shapes=shapes, annotations=notes, xaxis=dict(title=dict(text="graph batch size")),
                   yaxis=dict(title=dict(text="divergence"), **yaxis))


def waterfall_rows(phases: list[dict[str, Any]], captures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Startup bars: label, start (s from the first phase), duration, kind. The capture
    phase is replaced by one bar per captured size when captures are known."""
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
        bars.append({"label": f"capture bs {c['graph_bs']}" + ("" if c["stage"] == "decode" else f" ({c['stage']})"),
                     "abs": start_of(c), "duration": float(c["duration_s"]),
                     "kind": "failed" if c.get("status") == "failed" else "capture"})
    known = [b["abs"] for b in bars if b["abs"] is not None]
    origin = min(known) if known else 0.0
    cursor = 0.0
    for b in bars:
        b["start"] = b["abs"] - origin if b["abs"] is not None else cursor
        cursor = b["start"] + b["duration"]
    return bars


def waterfall_figure(phases: list[dict[str, Any]], captures: list[dict[str, Any]]) -> go.Figure:
    bars = waterfall_rows(phases, captures)
    if not bars:
        return _empty("no startup phases reported")
    colors = {"phase": "#6a8fc8", "capture": "#2e8b57", "failed": "#c8453b"}
    traces = []
    for kind in ("phase", "capture", "failed"):
        rows = [b for b in bars if b["kind"] == kind]
        if rows:
            traces.append(dict(type="bar", y=[b["label"] for b in rows], x=[b["duration"] for b in rows],
                               base=[b["start"] for b in rows], orientation="h", name=kind,
                               marker=dict(color=colors[kind]),
                               customdata=[[formats.seconds(b["duration"]), formats.seconds(b["start"])]
                                           for b in rows],
                               hovertemplate="%{y}: %{customdata[0]} from %{customdata[1]}<extra></extra>"))
    return _figure(traces, xaxis=dict(title=dict(text="seconds since startup began")),
                   yaxis=dict(autorange="reversed", categoryorder="array",
                              categoryarray=[b["label"] for b in bars]),
                   height=max(260, 26 * len(bars) + 80))


def capture_figure(captures: list[dict[str, Any]], missing: str = formats.NOT_MEASURED,
                   none: str = "no captures reported") -> go.Figure:
    """Capture duration per size (failed ones red), in ms where all are under a second, with
    the pool delta on a second axis where any was measured (else the chart says so); an
    unknown duration or delta is a gap (its hover says ``missing``), never a zero. Where no
    size has a time the chart says so (the page lists the sizes in a table)."""
    if not captures:
        return _empty(none)
    if all(c.get("duration_s") is None for c in captures):
        return _empty(f"time per size {missing}: the sizes are listed below")
    rows = sorted(captures, key=lambda c: (c["stage"], c["graph_bs"]))
    labels = [str(c["graph_bs"]) if c["stage"] == "decode" else f"{c['graph_bs']} {c['stage']}" for c in rows]
    durations = [c.get("duration_s") for c in rows]
    ms = max(d for d in durations if d is not None) < 1
    traces = [dict(type="bar", x=labels, y=[None if d is None else d * (1000 if ms else 1) for d in durations],
                   name="capture time", marker=dict(color=["#c8453b" if c.get("status") == "failed" else "#2e8b57"
                                                           for c in rows]),
                   customdata=[formats.seconds(d, missing) for d in durations],
                   hovertemplate="bs %{x}: captured in %{customdata}<extra></extra>")]
    layout: dict[str, Any] = dict(xaxis=dict(title=dict(text="batch size"), type="category"),
                                  yaxis=dict(title=dict(text="capture time (ms)" if ms else "capture time (s)"),
                                             tickformat=",~r", rangemode="tozero"))
    deltas = [c.get("pool_delta_bytes") for c in rows]
    if any(v is not None for v in deltas):
        unit, scale = _bytes_axis(deltas)
        traces.append(dict(type="scatter", x=labels, y=_scaled(deltas, scale), yaxis="y2",
                           name=f"pool delta ({unit})", mode="lines+markers", line=dict(color="#1f4e9c"),
                           customdata=[formats.size(v, missing) for v in deltas],
                           hovertemplate="bs %{x}: pool delta %{customdata}<extra></extra>"))
        layout["yaxis2"] = dict(title=dict(text=unit), overlaying="y", side="right", tickmode="auto",
                                showgrid=False, tickformat=",~r", rangemode="tozero")
    else:
        layout["annotations"] = [dict(text=f"pool memory per capture {missing}", showarrow=False, xref="paper",
                                      yref="paper", x=1, y=1.01, xanchor="right", yanchor="bottom")]
        layout["margin"] = dict(_LAYOUT["margin"], t=44)          # room above the bars for it
    return _figure(traces, **layout)


def startup_diff(phases: list[dict[str, Any]], captures: list[dict[str, Any]],
                 base_phases: list[dict[str, Any]], base_captures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per phase and per capture size: this run, the baseline, and the difference (s)."""
    def totals(phs, caps):
        out: dict[str, float] = {}
        for p in phs:
            if p["duration_s"] is not None:
                out[f"phase {p['phase']}"] = out.get(f"phase {p['phase']}", 0.0) + float(p["duration_s"])
        for c in caps:
            if c["duration_s"] is None:
                continue
            key = f"capture bs {c['graph_bs']}" + ("" if c["stage"] == "decode" else f" {c['stage']}")
            out[key] = out.get(key, 0.0) + float(c["duration_s"])
        return out
    mine, base = totals(phases, captures), totals(base_phases, base_captures)
    keys = [k for k in mine] + [k for k in base if k not in mine]
    return [{"item": k, "run_s": mine.get(k), "baseline_s": base.get(k),
             "diff_s": (mine.get(k) or 0.0) - (base.get(k) or 0.0)} for k in keys]


def diff_figure(diff: list[dict[str, Any]]) -> go.Figure:
    if not diff:
        return _empty("choose a baseline run")
    return _figure([dict(type="bar", x=[d["item"] for d in diff], y=[d["diff_s"] for d in diff],
                         marker=dict(color=["#c8453b" if d["diff_s"] > 0 else "#2e8b57" for d in diff]),
                         name="run − baseline (s)", customdata=[formats.signed_seconds(d["diff_s"]) for d in diff],
                         hovertemplate="%{x}: %{customdata}<extra></extra>")],
                   yaxis=dict(title=dict(text="run − baseline (s)")))


# name -> (label, unit): what the fleet chart can plot, from collector.analysis.fleet's series points.
FLEET_METRICS = {
    "eager_ratio": ("eager share of steps", "ratio"),
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
        return _empty(f"no run has a {label.split(' (')[0]}")
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
        traces.append(dict(type="scatter", mode="lines+markers", name=group,
                           x=_times(p["t"] + bucket_s / 2 for p in mine), y=[p[metric] * scale for p in mine],
                           customdata=[[shown(p[metric]), formats.plural(p["runs"], "run"),
                                        _bucket_text(p["t"], bucket_s)] for p in mine],
                           hovertemplate="%{fullData.name}<br>runs started %{customdata[2]}: %{customdata[0]} over "
                                         "%{customdata[1]}<extra></extra>"))
    xaxis = time_axis([p["t"] + bucket_s / 2 for p in points], bucket_s)
    xaxis["title"] = dict(text=f"runs started (UTC), per {per_bucket(bucket_s)}")
    return _figure(traces, yaxis=axis, xaxis=xaxis, showlegend=True, margin=dict(l=60, r=20, t=20, b=40),
                   legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))


def _bucket_text(t: float, bucket_s: int) -> str:
    """'2026-12-02 17:00–18:00' (UTC) for a fleet bucket."""
    start, end = _times([t, t + bucket_s])
    if bucket_s < 86400:
        return f"{start:%Y-%m-%d %H:%M}–{end:%H:%M}"
    return f"{start:%Y-%m-%d} to {end:%Y-%m-%d}"
