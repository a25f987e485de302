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


# -- ranks side by side (engine logs name every rank's figures) --------------------------
RANK_PHASES = ("load_weights", "compile", "kv_cache", "capture", "engine_init")


def _phase_text(name: str):
    def shown(row: dict[str, Any]) -> str:
        cell = row.get(name + "_cell")
        if cell is None:
            return "not in the log"
        text = c.seconds(cell["duration_s"]) if cell["duration_s"] is not None else "time not in the log"
        return text + (f" · {c.size(cell['mem_bytes'])}" if cell["mem_bytes"] is not None else "")
    return shown


RANK_COLUMNS = (c.Column("rank_label", "rank", min_width=110),
                *(c.Column(name, name.replace("_", " "), numeric=True, shown=_phase_text(name), min_width=130)
                  for name in RANK_PHASES),
                c.Column("failed", "failed", shown=lambda r: r["failed"] or "no", min_width=160, flex=2))


def rank_rows(store: Any, run_id: str) -> list[dict[str, Any]]:
    """One row per rank the log named: its own startup figures and whether it failed."""
    from collector.models import queries

    rows = []
    for entry in queries.rank_table(store, run_id):
        row: dict[str, Any] = {"rank_label": entry["rank"] or "no rank (driver)", "failed": entry["failed"]}
        for name in RANK_PHASES:
            cell = entry["phases"].get(name)
            row[name + "_cell"] = cell
            row[name] = cell["duration_s"] if cell else None
        rows.append(row)
    return rows


def _ranks_section(store: Any, run_id: str) -> Any:
    rows = rank_rows(store, run_id)
    if len(rows) < 2:
        return c.section("Ranks side by side", html.P("One process in this run: no ranks to compare.",
                                                       className="hint"))
    return c.section("Ranks side by side",
                     html.P("Each rank's own figures from the log; the run's headline is rank 0's, or the "
                            "lowest rank that printed it (see docs/importing.md).", className="hint"),
                     c.grid("startup-ranks", RANK_COLUMNS, c.grid_rows(RANK_COLUMNS, rows), filters=False,
                            row_id="rank_label"))


# -- what an engine's log states about its capture sizes and KV cache ----------------------

def log_figures(summary: dict[str, Any]) -> list[str] | None:
    """The capture-size count and largest size, and the KV cache's capacity in tokens and
    blocks (per rank where ranks differ), as an imported log states them; None for a run
    that is not from a log. What the log does not state reads "not in the log"."""
    from collector.importers.parser import stated_figures

    if not str(summary.get("source") or "").endswith("-log"):
        return None
    figures = stated_figures(summary.get("config") or {})
    unknown = c.unknown(summary["source"])
    sizes, kv = figures["capture_sizes"], figures["kv_cache"]
    capped = f", capped from {c.count(sizes['capped_from'])}" if sizes["capped_from"] else ""
    lines = [f"capture sizes: {c.count(sizes['count'], unknown)} (largest {c.count(sizes['max'], unknown)}{capped})"]
    for name, key in (("KV cache tokens", "tokens"), ("KV cache GPU blocks", "gpu_blocks")):
        ranks = kv[key + "_by_rank"]
        each = f" ({', '.join(f'{rank} {c.count(v)}' for rank, v in ranks.items())})" if ranks else ""
        lines.append(f"{name}: {c.count(kv[key], unknown)}{each}")
    if kv["cpu_blocks"] is not None:
        lines.append(f"KV cache CPU blocks: {c.count(kv['cpu_blocks'])}")
    if figures["graph_mem_estimate_bytes"] is not None:
        lines.append(f"graph memory the engine estimated: {c.size(figures['graph_mem_estimate_bytes'])} (estimated)")
    return lines


def _log_figures_section(summary: dict[str, Any]) -> Any:
    lines = log_figures(summary)
    if lines is None:
        return None
    return c.section("Sizes and KV cache, as the log states them", c.bullet_list(lines, "startup-log-figures"),
                     id="startup-log-figures")


def page_data(store: Any, run_id: str, baseline: str | None = None) -> dict[str, Any] | None:
    from collector.models import queries
    from collector.analysis.diagnosis import diagnose_run, startup_seconds

    summary = queries.run_summary(store, run_id)
    if summary is None:
        return None
    phases, caps, degrades = (queries.phases(store, run_id), queries.captures(store, run_id),
                              queries.degrades(store, run_id))
    diagnosis = diagnose_run(store, run_id).as_dict()     # what GET /v1/runs/{id}/diagnosis returns
    unknown = c.unknown(summary["source"])
    out: dict[str, Any] = {
        "summary": summary,
        "unknown": unknown,
        "diagnosis": diagnosis,
        "startup_s": startup_seconds(phases, caps),
        "captures": caps,
        "failed": [x for x in caps if x["status"] == "failed"],
        "degrades": degrades,
        "findings": diagnosis["findings"],
        "stats": stats(diagnosis),
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


PROVENANCE_NOTE = {"measured": "measured", "log": "from the log", "inferred": "inferred",
                   "estimated": "estimated", None: "not recorded"}


def stats(diagnosis: dict[str, Any]) -> dict[str, str]:
    """The four numbers at the top, from what the run recorded or its log stated; what
    neither said is "not in the log" / "not measured", never 0."""
    capture = diagnosis["capture"]
    unknown = c.unknown(diagnosis["source"])
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
    from collector.models import queries

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
        c.section("Post-mortem: the outcome, then what took longer than expected",
                  html.Div(id="startup-diagnosis")),
        _log_figures_section(summary),
        c.section("Waterfall", c.graph("startup-waterfall", height=420)),
        c.section("Capture time and pool memory per size", c.graph("startup-captures-fig")),
        c.section("Failed captures and degradation", html.Div(id="startup-failures")),
        _ranks_section(store, run_id),
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
    ], className="card finding", **{"data-cause": finding["cause"],
                                    "data-failure-class": finding["failure_class"] or ""})


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
    baseline_text = ""
    if "baseline_startup_s" in data:
        delta = data["startup_s"] - data["baseline_startup_s"]
        baseline_text = (f"This run {c.seconds(data['startup_s'])}, baseline {c.seconds(data['baseline_startup_s'])} "
                         f"({c.signed_seconds(delta)}).")
    stat = data["stats"]
    return (stat["startup-total"], stat["startup-captures"], stat["startup-capture-s"], stat["startup-failed"],
            diagnosis_children(data), data["waterfall"], data["capture_fig"], _failures(data), data["diff_fig"],
            c.grid_rows(DIFF_COLUMNS, data["diff"]),
            baseline_text)
