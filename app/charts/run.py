"""The run page's step charts: modes over time, the eager ratio and a rule's judgement,
batch sizes and their padding, step time by mode, replay parity."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import plotly.graph_objects as go

from replayscope.app import formats
from replayscope.app.charts.base import (MODE_COLORS, MODE_ORDER, SizeName, empty, figure, hline, per_bucket,
                                         size_axis, time_axis, utc_times)


GRAPH_OR_PADDED = "graph, padded or not (/metrics cannot tell)"


def mode_mix_figure(timeline: list[dict[str, Any]], bucket_s: float = 1.0, counted: str = "steps",
                    padding_known: bool = True) -> go.Figure:
    """Steps per bucket, stacked graph / padded / eager, and "mode unknown" where the source
    counted steps without their mode (``counted``: what a step count is, "logged steps (1 in
    40 decode)" where the log samples them). Where the source cannot tell a padded replay from
    one of its own size (``padding_known`` false: an engine's /metrics), the replays are one bar
    that says so."""
    if not timeline:
        return empty("no steps yet")
    x = utc_times(p["t"] + bucket_s / 2 for p in timeline)         # a bar spans its bucket
    modes = [m for m in MODE_ORDER if padding_known or m != "padded"]
    modes += ["unknown"] if any(p.get("unknown") for p in timeline) else []
    names = {m: m for m in modes} | {"unknown": "mode unknown"}
    if not padding_known:
        names["graph"] = GRAPH_OR_PADDED

    def count(p: dict[str, Any], mode: str) -> int:
        return p.get(mode, 0) + (p.get("padded", 0) if mode == "graph" and not padding_known else 0)
    return figure([dict(type="bar", x=x, y=[count(p, m) for p in timeline], name=names[m],
                        width=bucket_s * 1000 * 0.9, marker=dict(color=MODE_COLORS[m])) for m in modes],
                   barmode="stack", bargap=0.05, xaxis=time_axis([p["t"] for p in timeline], bucket_s),
                   yaxis=dict(title=dict(text=f"{counted} per {per_bucket(bucket_s)}")))


def eager_ratio_figure(timeline: list[dict[str, Any]], thresholds: list[tuple[str, float]] = (),
                       spans: list[dict[str, Any]] = (), now: float | None = None,
                       scope: str | None = None) -> go.Figure:
    """Eager ratio per bucket with each applicable alert threshold and the alert spans shaded
    (``scope``: the stages the timeline is over, in words; None: every step)."""
    if not timeline:
        return empty(f"no {scope} steps yet" if scope else "no steps yet")
    x = utc_times(p["t"] for p in timeline)
    shapes, notes = [], []
    for name, threshold in thresholds:
        shape, note = hline(threshold, f"{name} ≥ {threshold:.0%}")
        shapes.append(shape)
        notes.append(note)
    end_default = now if now is not None else timeline[-1]["t"]
    for span in spans:
        x0, x1 = utc_times([span["started_at"], span.get("ended_at") or end_default])
        shapes.append(dict(type="rect", xref="x", x0=x0, x1=x1, yref="paper", y0=0, y1=1,
                           fillcolor="#c8453b", opacity=0.12, line=dict(width=0), layer="below"))
    return figure([dict(type="scatter", x=x, y=[p["eager_ratio"] for p in timeline], name="eager ratio",
                         mode="lines+markers", marker=dict(size=4), line=dict(color=MODE_COLORS["eager"]),
                         customdata=[formats.plural(p["steps"], "step") for p in timeline],
                         hovertemplate="%{x}: %{y:.1%} eager of %{customdata}<extra></extra>")],
                   shapes=shapes, annotations=notes,
                   yaxis=dict(title=dict(text="eager share of steps"), tickformat=".0%", range=[0, 1.05]))


RULE_COLORS = ("#c8453b", "#7a3fb0", "#1f4e9c", "#b5651d")


def rule_ratio_figure(judged: list[dict[str, Any]], scope: str, every_s: int = 1) -> go.Figure:
    """The eager ratio as each eager-ratio rule watching the run judges it, against that
    rule's threshold, with that rule's alert spans shaded. ``judged``: per rule, its ``rule``
    row, ``points`` (``replayscope.collector.alerting.eager_ratio.judged_ratios``: a gap where fewer than min steps ran)
    and ``spans`` (its alerts for this run)."""
    if not any(p["ratio"] is not None for j in judged for p in j["points"]):
        rules = "<br>".join(f"{j['rule'].name}: {j['rule'].min_steps:,} steps in "
                            f"{formats.seconds(j['rule'].window_s)}" for j in judged)
        return empty(f"no window had the {scope} steps its rule needs to judge:<br>{rules}")
    traces, shapes, notes, ts = [], [], [], []
    for i, j in enumerate(judged):
        rule, color = j["rule"], RULE_COLORS[i % len(RULE_COLORS)]
        ts += [p["t"] for p in j["points"]]
        traces.append(dict(
            type="scatter", mode="lines+markers", marker=dict(size=4), line=dict(color=color), connectgaps=False,
            name=f"{rule.name}: last {formats.seconds(rule.window_s)}, ≥ {rule.min_steps:,} steps",
            x=utc_times(p["t"] for p in j["points"]), y=[p["ratio"] for p in j["points"]],
            customdata=[formats.plural(p["steps"], "step") for p in j["points"]],
            hovertemplate="%{x}: %{y:.1%} eager of %{customdata} in the window<extra></extra>"))
        shape, note = hline(rule.threshold, f"{rule.name} > {formats.pct(rule.threshold)}", color)
        shapes.append(shape)
        notes.append({**note, "x": 1, "xanchor": "right"} if i % 2 else note)
        end = max(p["t"] for p in j["points"]) if j["points"] else None
        for span in j["spans"]:
            x0, x1 = utc_times([span["started_at"], span.get("ended_at") or end or span["started_at"]])
            shapes.append(dict(type="rect", xref="x", x0=x0, x1=x1, yref="paper", y0=0, y1=1,
                               fillcolor=color, opacity=0.12, line=dict(width=0), layer="below"))
    return figure(traces, shapes=shapes, annotations=notes, xaxis=time_axis(ts, every_s), showlegend=True,
                   yaxis=dict(title=dict(text=f"eager share of {scope} steps"), tickformat=".0%", range=[0, 1.05]))


def _stages(rows: list[dict[str, Any]]) -> list[str | None]:
    """The stages rows are split by (``stage``: the page splits a run's rows where a stage's
    sizes are tokens and another's batch sizes), in their order; [None]: rows of every stage."""
    return list(dict.fromkeys(r["stage"] for r in rows)) if rows and "stage" in rows[0] else [None]


def _by_stage(stage: str | None, stages: list[str | None], size_name: SizeName | None,
              rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What a trace of one stage's rows adds: its sizes in their units ("bs 8 (decode)", "512
    tokens (mixed)") to hover over, and a hatch that tells a later stage's bars apart."""
    if stage is None:
        return {}
    return {"customdata": [f"{size_name(stage, r['raw_bs'])} ({stage})" for r in rows],
            "pattern": dict(shape="/") if stage != stages[0] else None}


def _counted(n: int, counted: str) -> str:
    """'1 step', '12 steps', '1 logged step (1 in 40 decode)': a bar's count in words."""
    return f"{n:,} {counted.replace('steps', 'step', 1) if n == 1 else counted}"


def _hatch(staged: dict[str, Any]) -> dict[str, Any]:
    return {"pattern": staged["pattern"]} if staged.get("pattern") else {}


def batch_histogram_figure(hist: list[dict[str, Any]], captured: Iterable[int] = (),
                           scope: str = "decode", counted: str = "steps",
                           captured_names: dict[int, str] | None = None, size_name: SizeName | None = None,
                           x_title: str | None = None) -> go.Figure:
    """Steps (``counted``, as for ``mode_mix_figure``) per batch size, coloured by mode, with the
    captured sizes marked (``scope``: the stages ``hist`` is over, in words); a marker's hover
    names the graphs of its size in their units (``captured_names``: "bs 16, 16 tokens (mixed)"),
    else "size N" (a capture list that names no stage). Rows with a ``stage`` (an engine's run
    whose mixed sizes are tokens) are drawn per stage, each size named by ``size_name`` in its
    unit ("bs 8 (decode)", "512 tokens (mixed)"), the axis titled ``x_title``."""
    if not hist:
        return empty(f"no {scope} steps yet")
    sizes = sorted(set(captured))
    x, xaxis = size_axis([r["raw_bs"] for r in hist] + sizes, x_title)
    stages = _stages(hist)
    traces = []
    for mode in MODE_ORDER:
        for stage in stages:
            rows = [r for r in hist if r["mode"] == mode and stage in (None, r.get("stage"))]
            if not rows:
                continue
            trace = dict(type="bar", x=[x(r["raw_bs"]) for r in rows], y=[r["steps"] for r in rows],
                         name=mode, marker=dict(color=MODE_COLORS[mode]))
            staged = _by_stage(stage, stages, size_name, rows)
            if staged:
                trace.update(name=f"{mode} ({stage})",
                             customdata=[[words, _counted(r["steps"], counted)]
                                         for words, r in zip(staged["customdata"], rows)],
                             hovertemplate=f"%{{customdata[0]}}: %{{customdata[1]}} ran {mode}<extra></extra>")
                trace["marker"].update(_hatch(staged))
            traces.append(trace)
    if sizes:
        traces.append(dict(type="scatter", x=[x(s) for s in sizes], y=[0] * len(sizes), mode="markers",
                           name="captured size", marker=dict(symbol="triangle-up", size=11, color="#1f4e9c"),
                           customdata=[(captured_names or {}).get(s, f"size {s}") for s in sizes],
                           hovertemplate="captured %{customdata}<extra></extra>"))
    return figure(traces, barmode="stack", xaxis=xaxis, yaxis=dict(title=dict(text=counted)))


def advisor_histogram_figure(hist: list[dict[str, Any]], proposed: Iterable[int], current: Iterable[int],
                             x_title: str = "batch size (raw)",
                             size_name: Callable[[int], str] | None = None) -> go.Figure:
    """The steps the advisor chose from, per batch size, coloured by how they really ran,
    with the proposed sizes (▲ under the axis) and the run's current sizes (▼ above it); each
    size named in the list's unit by ``size_name`` ("bs 8", "512 tokens"), else "bs N"."""
    if not hist:
        return empty("no decode steps a list of capture sizes decides")
    name = size_name or (lambda size: f"bs {size}")
    traces = []
    sizes_seen = [r["raw_bs"] for r in hist]
    width = max(0.8, (max(sizes_seen) - min(sizes_seen)) / 150)     # sparse token counts: bars stay bars
    for mode in MODE_ORDER:
        rows = [r for r in hist if r["mode"] == mode]
        if rows:
            traces.append(dict(type="bar", x=[r["raw_bs"] for r in rows], y=[r["steps"] for r in rows],
                               width=width, name=f"ran {mode}", marker=dict(color=MODE_COLORS[mode]),
                               customdata=[f"{name(r['raw_bs'])}: {r['steps']:,} step{'s' if r['steps'] != 1 else ''}"
                                           for r in rows],
                               hovertemplate=f"%{{customdata}} ran {mode}<extra></extra>"))
    for label, sizes, symbol, y, color in (("proposed size", proposed, "triangle-up", 0, "#1f4e9c"),
                                           ("current size", current, "triangle-down", 1, "#7a7a7a")):
        sizes = sorted(set(sizes))
        if sizes:
            traces.append(dict(type="scatter", x=sizes, y=[y] * len(sizes), yaxis="y2", mode="markers", name=label,
                               marker=dict(symbol=symbol, size=11, color=color),
                               customdata=[name(s) for s in sizes],
                               hovertemplate=f"{label.split()[0]} %{{customdata}}<extra></extra>"))
    return figure(traces, barmode="stack", xaxis=dict(title=dict(text=x_title), rangemode="nonnegative"),
                   yaxis=dict(title=dict(text="steps")),
                   yaxis2=dict(overlaying="y", range=[-0.05, 1.05], visible=False, fixedrange=True))


def padding_by_size(hist: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per batch size: raw_bs, num_tokens, padded_tokens and share = padded / (num + padded);
    per stage and size, with its ``stage``, where the rows carry one."""
    per_bs: dict[tuple[str | None, int], list[int]] = {}
    for r in hist:
        acc = per_bs.setdefault((r.get("stage"), r["raw_bs"]), [0, 0])
        acc[0] += r["num_tokens"]
        acc[1] += r["padded_tokens"]
    return [{**({} if stage is None else {"stage": stage}), "raw_bs": bs, "num_tokens": tok, "padded_tokens": pad,
             "share": pad / (tok + pad) if tok + pad else None}
            for (stage, bs), (tok, pad) in sorted(per_bs.items(), key=lambda kv: (kv[0][1], kv[0][0] or ""))]


def padding_figure(hist: list[dict[str, Any]], scope: str = "decode", size_name: SizeName | None = None,
                   x_title: str | None = None) -> go.Figure:
    """Padded tokens as a share of the tokens computed (padded + real), per batch size: the
    same share as the run's padding figure, size by size (``hist`` is over the decode stages;
    ``scope`` names them in words). Rows with a ``stage`` are bars per stage side by side, each
    size in its unit (``batch_histogram_figure``)."""
    rows = [r for r in padding_by_size(hist) if r["share"] is not None]
    if not any(r["padded_tokens"] for r in rows):
        return empty("no padding")
    x, xaxis = size_axis((r["raw_bs"] for r in rows), x_title)
    order = _stages(hist)                     # the hatch as on the histogram, whichever stage padded
    stages = [s for s in order if any(r.get("stage") == s for r in rows)]
    traces = []
    for stage in stages:
        mine = [r for r in rows if stage in (None, r.get("stage"))]
        staged = _by_stage(stage, order, size_name, mine)
        of = f"{stage} tokens" if staged else f"{scope} tokens"
        traces.append(dict(type="bar", x=[x(r["raw_bs"]) for r in mine], y=[r["share"] for r in mine],
                           name=stage if staged else "padding share",     # the legend: short, clear of the modebar
                           marker=dict(color=MODE_COLORS["padded"], **_hatch(staged)),
                           customdata=[[formats.pct(r["share"]), formats.count(r["padded_tokens"]),
                                        formats.count(r["num_tokens"] + r["padded_tokens"])]
                                       + ([words] if staged else []) for r, words in
                                       zip(mine, staged.get("customdata") or [None] * len(mine))],
                           hovertemplate=("%{customdata[3]}" if staged else "bs %{x}")
                           + ": %{customdata[0]} padding (%{customdata[1]} of "
                           f"%{{customdata[2]}} {of})<extra></extra>"))
    return figure(traces, **(dict(barmode="group") if len(stages) > 1 else {}), xaxis=xaxis,
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
        return empty("no timed steps")
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
    return figure(traces, barmode="group", yaxis=dict(title=dict(text="mean step time (ms)"), tickformat=",~r"))


def parity_figure(parity: list[dict[str, Any]]) -> go.Figure:
    """Divergence between graph replay and eager on the same inputs, per checked size: on a
    log axis, unless a check matched exactly (0 has no place on a log axis, and an exact
    match must be seen, not dropped)."""
    if not parity:
        return empty("no parity checks in this run")
    values = [p[k] for p in parity for k in ("max_abs_diff", "rel_err")]
    log = all(v > 0 for v in values)
    shapes, notes = [], []
    for tol in sorted({p["tolerance"] for p in parity if p.get("tolerance") is not None}):
        shape, note = hline(tol, f"tolerance {formats.number(tol)}", "#c8453b")
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
    return figure(traces, shapes=shapes, annotations=notes, xaxis=dict(title=dict(text="graph batch size")),
                   yaxis=dict(title=dict(text="divergence"), **yaxis))
