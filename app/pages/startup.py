"""Startup (/startup/<run_id>): a post-mortem of a slow start — waterfall, each capture's
time and memory, failures, a baseline comparison and the ranked diagnosis."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, callback, dcc, html

from app import charts
from app import components as c

dash.register_page(__name__, path_template="/startup/<run_id>", title="replayscope · startup",
                   name="Startup")


DIFF_COLUMNS = (
    c.Column("item", "phase / size", min_width=160, flex=2),
    c.Column("run_s", "this run", numeric=True, shown=lambda r: c.seconds(r["run_s"], "not in this run"),
             min_width=100),
    c.Column("baseline_s", "baseline", numeric=True,
             shown=lambda r: c.seconds(r["baseline_s"], "not in the baseline"), min_width=100),
    c.Column("diff_s", "difference", numeric=True, shown=lambda r: c.signed_seconds(r["diff_s"]), min_width=100),
)


def page_data(store: Any, run_id: str, baseline: str | None = None) -> dict[str, Any] | None:
    from collector import queries
    from collector.diagnosis import diagnose, startup_seconds

    summary = queries.run_summary(store, run_id)
    if summary is None:
        return None
    phases, caps, degrades = (queries.phases(store, run_id), queries.captures(store, run_id),
                              queries.degrades(store, run_id))
    captured = sorted({x["graph_bs"] for x in caps if x["status"] == "ok"})
    used: set[int] = set()
    for row in queries.batch_histogram(store, run_id):
        if row["mode"] in ("graph", "padded"):
            size = next((s for s in captured if s >= row["raw_bs"]), None)
            if size is not None:
                used.add(size)
    findings = diagnose(phases, caps, degrades, config=summary.get("config") or {},
                        used_sizes=used if summary["steps"] and used else None)
    unknown = c.unknown(summary["source"])
    out: dict[str, Any] = {
        "summary": summary,
        "unknown": unknown,
        "startup_s": startup_seconds(phases, caps),
        "captures": caps,
        "failed": [x for x in caps if x["status"] == "failed"],
        "degrades": degrades,
        "findings": [f.as_dict() for f in findings],
        "waterfall": charts.waterfall_figure(phases, caps),
        "capture_fig": charts.capture_figure(caps, unknown),
        "diff": [],
        "diff_fig": charts.diff_figure([]),
    }
    if baseline and baseline != run_id and queries.run_exists(store, baseline):
        diff = charts.startup_diff(phases, caps, queries.phases(store, baseline), queries.captures(store, baseline))
        out["diff"] = diff
        out["diff_fig"] = charts.diff_figure(diff)
        out["baseline_startup_s"] = startup_seconds(queries.phases(store, baseline),
                                                    queries.captures(store, baseline))
    return out


def layout(run_id: str | None = None, **_query: Any) -> html.Div:
    from collector import queries

    store = c.store()
    summary = queries.run_summary(store, run_id) if run_id else None
    if summary is None:
        return c.not_found("run", run_id or "")
    others = [r for r in queries.list_runs(store) if r["run_id"] != run_id]
    return html.Div([
        c.nav(run_id),
        dcc.Store(id="startup-run-id", data=run_id),
        html.H2(["Startup of ", html.Span(summary["name"], id="startup-name")]),
        html.Div([html.Span(f"source {summary['source']}"), html.Span(f"backend {summary['backend']}"),
                  html.Span(f"model {summary['model']}"), html.Span(f"device {summary['device']}")],
                 className="meta"),
        html.Div([c.stat("startup", "…", "startup-total"), c.stat("captures", "…", "startup-captures"),
                  c.stat("capture time", "…", "startup-capture-s"), c.stat("failed", "…", "startup-failed")],
                 className="stats"),
        c.section("Ranked diagnosis", html.Div(id="startup-diagnosis")),
        c.section("Waterfall", c.graph("startup-waterfall", height=420)),
        c.section("Capture time and pool memory per size", c.graph("startup-captures-fig")),
        c.section("Failed captures and degradation", html.Div(id="startup-failures")),
        c.section("Against a baseline run",
                  dcc.Dropdown(id="startup-baseline",
                               options=[{"label": f"{r['name']} ({r['run_id']})", "value": r["run_id"]}
                                        for r in others],
                               placeholder="choose a baseline run", clearable=True),
                  html.Div(id="startup-baseline-summary", className="hint"),
                  c.graph("startup-diff", height=300),
                  c.grid("startup-diff-table", DIFF_COLUMNS, filters=False, row_id="item")),
    ], className="page")


def _failures(data: dict[str, Any]) -> list[Any]:
    items = [f"capture of bs {x['graph_bs']} ({x['stage']}) failed after "
             f"{c.seconds(x['duration_s'], data['unknown'])}: "
             f"{x.get('error') or 'no error text'}" for x in data["failed"]]
    items += [f"degraded {d['from']} → {d['to']}" + (f" (bs {d['graph_bs']})" if d.get("graph_bs") else "")
              + (f": {d['error']}" if d.get("error") else "") for d in data["degrades"]]
    if not items:
        return [html.P("Every capture succeeded; no degradation.", className="hint")]
    return [c.bullet_list(items, "failures")]


@callback(Output("startup-total", "children"), Output("startup-captures", "children"),
          Output("startup-capture-s", "children"), Output("startup-failed", "children"),
          Output("startup-diagnosis", "children"), Output("startup-waterfall", "figure"),
          Output("startup-captures-fig", "figure"), Output("startup-failures", "children"),
          Output("startup-diff", "figure"), Output("startup-diff-table", "rowData"),
          Output("startup-baseline-summary", "children"),
          Input("startup-baseline", "value"), State("startup-run-id", "data"))
def refresh(baseline, run_id):
    data = page_data(c.store(), run_id, baseline)
    if data is None:
        raise dash.exceptions.PreventUpdate
    caps = data["captures"]
    findings = data["findings"]
    diagnosis = ([c.finding_card(f, i) for i, f in enumerate(findings, 1)] if findings
                 else [html.P("Nothing stands out: no failures, few sizes, no outliers.", className="hint")])
    baseline_text = ""
    if "baseline_startup_s" in data:
        delta = data["startup_s"] - data["baseline_startup_s"]
        baseline_text = (f"This run {c.seconds(data['startup_s'])}, baseline {c.seconds(data['baseline_startup_s'])} "
                         f"({c.signed_seconds(delta)}).")
    return (c.seconds(data["startup_s"]), c.count(len(caps)),
            c.seconds(_known_sum(x["duration_s"] for x in caps), data["unknown"]), c.count(len(data["failed"])),
            diagnosis, data["waterfall"], data["capture_fig"], _failures(data), data["diff_fig"],
            c.grid_rows(DIFF_COLUMNS, data["diff"]),
            baseline_text)


def _known_sum(values) -> float | None:
    """The sum of the known values; None when none is known (unknown is not zero)."""
    known = [float(v) for v in values if v is not None]
    return sum(known) if known else None
