"""Startup (/startup/<run_id>): a post-mortem of a slow start — waterfall, each capture's
time and memory, failures, a baseline comparison and the ranked diagnosis."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, callback, dash_table, dcc, html

from app import charts
from app import components as c

dash.register_page(__name__, path_template="/startup/<run_id>", title="replayscope · startup",
                   name="Startup")


def page_data(store: Any, run_id: str, baseline: str | None = None) -> dict[str, Any] | None:
    from collector import queries
    from collector.diagnosis import diagnose_run, startup_seconds

    summary = queries.run_summary(store, run_id)
    if summary is None:
        return None
    phases, caps, degrades = (queries.phases(store, run_id), queries.captures(store, run_id),
                              queries.degrades(store, run_id))
    diagnosis = diagnose_run(store, run_id).as_dict()     # what GET /v1/runs/{id}/diagnosis returns
    out: dict[str, Any] = {
        "summary": summary,
        "diagnosis": diagnosis,
        "startup_s": startup_seconds(phases, caps),
        "captures": caps,
        "failed": [x for x in caps if x["status"] == "failed"],
        "degrades": degrades,
        "findings": diagnosis["findings"],
        "stats": stats(diagnosis),
        "waterfall": charts.waterfall_figure(phases, caps),
        "capture_fig": charts.capture_figure(caps),
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


PROVENANCE_NOTE = {"measured": "measured", "log": "from the log", "inferred": "inferred",
                   "estimated": "estimated", None: "not recorded"}


def stats(diagnosis: dict[str, Any]) -> dict[str, str]:
    """The four numbers at the top, from what the run recorded or its log stated; what
    neither said is "not in the log" / "not measured", never 0."""
    capture = diagnosis["capture"]
    unknown = "not in the log" if diagnosis["source"].endswith("-log") else "not measured"
    startup = c.seconds(diagnosis["startup_s"]) if diagnosis["startup_s"] else unknown
    count = capture["count"]
    if count:
        captures = f"{c.count(count)}"
        if capture["planned"] and capture["planned"] != count:
            captures += f" of {c.count(capture['planned'])}"
        if not capture["sizes"]:
            captures += " (a count: the log names no sizes)"
    elif capture["planned"]:
        captures = f"0 of {c.count(capture['planned'])}"
    else:
        captures = "none recorded"
    total = (f"{c.seconds(capture['total_s'])} ({PROVENANCE_NOTE[capture['total_provenance']]})"
             if capture["total_s"] is not None else unknown)
    failed = c.count(capture["failed"]) if count or capture["failed"] else unknown
    return {"startup-total": startup, "startup-captures": captures, "startup-capture-s": total,
            "startup-failed": failed}


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
                  dash_table.DataTable(id="startup-diff-table",
                                       columns=[{"id": "item", "name": "phase / size"},
                                                {"id": "run_s", "name": "this run (s)", "type": "numeric"},
                                                {"id": "baseline_s", "name": "baseline (s)", "type": "numeric"},
                                                {"id": "diff_s", "name": "difference (s)", "type": "numeric"}],
                                       data=[], sort_action="native",
                                       style_cell={"fontFamily": "inherit", "fontSize": "13px"})),
    ], className="page")


def _failures(data: dict[str, Any]) -> list[Any]:
    items = [f"capture of bs {x['graph_bs']} ({x['stage']}) failed"
             + (f" after {c.seconds(x['duration_s'])}" if x.get("duration_s") else "")
             + f": {x.get('error') or 'no error text'}" for x in data["failed"]]
    items += [f"degraded {d['from']} → {d['to']}" + (f" (bs {d['graph_bs']})" if d.get("graph_bs") else "")
              + (f": {d['error']}" if d.get("error") else "") for d in data["degrades"]]
    failure = data["summary"].get("failure")
    if failure and failure.get("error"):
        items.insert(0, f"the run failed: {failure['error']}")
    if items:
        return [c.bullet_list(items, "failures")]
    capture = data["diagnosis"]["capture"]
    if capture["count"]:
        return [html.P(f"All {c.count(capture['count'])} captures recorded succeeded; no degradation.",
                       className="hint")]
    return [html.P("No capture was recorded for this run, and no failure.", className="hint")]


def finding_card(finding: dict[str, Any], rank: int) -> html.Div:
    """A finding: title, severity, the seconds over the expectation, evidence with where each
    figure came from, and what to do in each engine."""
    head = [html.Span(f"{rank}. {finding['title']}", className="card-title"),
            html.Span(finding["severity"], className=f"badge badge-{finding['severity']}")]
    if finding["seconds"] is not None:
        head.append(html.Span(f"+{c.seconds(finding['seconds'])} over expected", className="card-seconds"))
    evidence = html.Ul([html.Li([e["text"], " ", html.Span(PROVENANCE_NOTE[e["provenance"]],
                                                            className=f"provenance provenance-{e['provenance']}")])
                        for e in finding["evidence"]])
    actions = finding["actions"]
    return html.Div([
        html.Div(head, className="card-head"),
        html.Div([html.B("Evidence"), evidence]),
        html.Div([html.B("What to do"), c.engine_flags(actions.get("replayscope", []), actions.get("vllm", []),
                                                       actions.get("sglang", []))]),
    ], className="card finding", **{"data-cause": finding["cause"]})


def diagnosis_children(data: dict[str, Any]) -> list[Any]:
    diagnosis = data["diagnosis"]
    children: list[Any] = []
    if diagnosis["timing_note"]:
        children.append(html.P(diagnosis["timing_note"], className="note stand-in"))
    if diagnosis["findings"]:
        children += [finding_card(f, i) for i, f in enumerate(diagnosis["findings"], 1)]
        return children
    capture = diagnosis["capture"]
    said = [f"the run {diagnosis['status']}"]
    if diagnosis["startup_s"]:
        said.append(f"startup took {c.seconds(diagnosis['startup_s'])}")
    if capture["count"] and capture["total_s"] is not None:
        said.append(f"{c.count(capture['count'])} captures in {c.seconds(capture['total_s'])}")
    children.append(html.P("Nothing took longer than expected: " + ", ".join(said) + ".", className="hint"))
    return children


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


@callback(Output("startup-total", "children"), Output("startup-captures", "children"),
          Output("startup-capture-s", "children"), Output("startup-failed", "children"),
          Output("startup-diagnosis", "children"), Output("startup-waterfall", "figure"),
          Output("startup-captures-fig", "figure"), Output("startup-failures", "children"),
          Output("startup-diff", "figure"), Output("startup-diff-table", "data"),
          Output("startup-baseline-summary", "children"),
          Input("startup-baseline", "value"), State("startup-run-id", "data"))
def refresh(baseline, run_id):
    data = page_data(c.store(), run_id, baseline)
    if data is None:
        raise dash.exceptions.PreventUpdate
    baseline_text = ""
    if "baseline_startup_s" in data:
        delta = data["startup_s"] - data["baseline_startup_s"]
        baseline_text = (f"This run {c.seconds(data['startup_s'])}, baseline {c.seconds(data['baseline_startup_s'])} "
                         f"({'+' if delta >= 0 else '−'}{c.seconds(abs(delta))}).")
    stat = data["stats"]
    return (stat["startup-total"], stat["startup-captures"], stat["startup-capture-s"], stat["startup-failed"],
            diagnosis_children(data), data["waterfall"], data["capture_fig"], _failures(data), data["diff_fig"],
            [{**d, "run_s": _round(d["run_s"]), "baseline_s": _round(d["baseline_s"]),
              "diff_s": _round(d["diff_s"])} for d in data["diff"]],
            baseline_text)
