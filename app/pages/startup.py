"""Startup (/startup/<run_id>): a post-mortem of a slow start — waterfall, each capture's
time and memory, failures, a baseline comparison and the ranked diagnosis."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from replayscope.app import charts, data
from replayscope.app import components as c
from replayscope.app.callbacks import Callbacks

dash.register_page(__name__, path_template="/startup/<run_id>", title="replayscope · startup",
                   name="Startup")
callback = Callbacks()


DIFF_COLUMNS = (
    c.Column("item", "phase / size", min_width=160, flex=2),
    c.Column("run_s", "this run", numeric=True, shown=lambda r: c.seconds(r["run_s"], "not in this run"),
             min_width=100),
    c.Column("baseline_s", "baseline", numeric=True,
             shown=lambda r: c.seconds(r["baseline_s"], "not in the baseline"), min_width=100),
    c.Column("diff_s", "difference", numeric=True, shown=lambda r: c.signed_seconds(r["diff_s"]), min_width=100),
)


CAPTURE_COLUMNS = (
    c.Column("graph_bs", "size", numeric=True, shown=lambda r: r["size"], min_width=100),
    c.Column("stage", "stage", min_width=90),
    c.Column("status", "status", min_width=80),
    c.Column("duration_s", "capture time", numeric=True, shown=lambda r: c.seconds(r["duration_s"], r["missing"]),
             min_width=110),
    c.Column("pool_delta_bytes", "pool delta", numeric=True,
             shown=lambda r: c.size(r["pool_delta_bytes"], r["missing"]), min_width=110),
)


def capture_rows(captures: list[dict[str, Any]], missing: str, size_name: Any) -> list[dict[str, Any]]:
    """Every capture the run recorded, for the table shown where no size has a time; its size
    in the run's words (``size_name``: "bs 8", "512 tokens" for an engine's prefill or mixed graph)."""
    return c.grid_rows(CAPTURE_COLUMNS, ({"key": f"{x['stage']}-{x['graph_bs']}-{i}", "graph_bs": x["graph_bs"],
                                          "size": size_name(x["stage"], x["graph_bs"]),
                                          "stage": x["stage"], "status": x["status"], "missing": missing,
                                          "duration_s": x.get("duration_s"),
                                          "pool_delta_bytes": x.get("pool_delta_bytes")}
                                         for i, x in enumerate(captures)))


def capture_table(captures: list[dict[str, Any]], missing: str, size_name: Any) -> list[Any]:
    """The sizes as a table where the log gives no time per size (a chart would draw nothing)."""
    if not captures or any(x.get("duration_s") is not None for x in captures):
        return []
    return [c.grid("startup-captures-table", CAPTURE_COLUMNS, capture_rows(captures, missing, size_name),
                   filters=False, row_id="key")]


BASELINE_HINT = ("Choose a baseline run above: each phase and capture size of this run is then set against "
                 "the baseline's, with the difference.")


def baseline_body(diff: list[dict[str, Any]], figure: Any) -> list[Any]:
    if not diff:
        return [html.P(BASELINE_HINT, className="hint")]
    return [c.graph("startup-diff", figure, height=300),
            c.grid("startup-diff-table", DIFF_COLUMNS, c.grid_rows(DIFF_COLUMNS, diff), filters=False, row_id="item")]


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
    rows = []
    for entry in data.queries.rank_table(store, run_id):
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
    if not str(summary.get("source") or "").endswith("-log"):
        return None
    figures = data.stated_figures(summary.get("config") or {})
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
    queries = data.queries
    summary = queries.run_summary(store, run_id)
    if summary is None:
        return None
    phases, caps, degrades = (queries.phases(store, run_id), queries.captures(store, run_id),
                              queries.degrades(store, run_id))
    diagnosis = data.diagnose_run(store, run_id).as_dict()     # what GET /v1/runs/{id}/diagnosis returns
    unknown = c.unknown(summary["source"])
    size_name = data.size_namer(summary["source"], summary.get("config"))
    out: dict[str, Any] = {
        "summary": summary,
        "size_name": size_name,
        "unknown": unknown,
        "diagnosis": diagnosis,
        "startup_s": diagnosis["startup_s"],
        "captures": caps,
        "failed": [x for x in caps if x["status"] == "failed"],
        "degrades": degrades,
        "findings": diagnosis["findings"],
        "stats": stats(diagnosis, time_to_failure(summary, phases, caps)),
        "waterfall": charts.waterfall_figure(phases, caps, diagnosis["unaccounted"], diagnosis["startup_from"],
                                             diagnosis["ready_at"], size_name=size_name),
        "capture_fig": charts.capture_figure(caps, unknown, none=no_sizes(diagnosis["capture"], bool(caps)),
                                             size_name=size_name),
        "diff": [],
        "diff_fig": charts.diff_figure([]),
    }
    if baseline and baseline != run_id and queries.run_exists(store, baseline):
        base = queries.run_summary(store, baseline)
        diff = charts.startup_diff(phases, caps, queries.phases(store, baseline), queries.captures(store, baseline),
                                   size_name=size_name,
                                   base_size_name=data.size_namer(base["source"], base.get("config")))
        out["diff"] = diff
        out["diff_fig"] = charts.diff_figure(diff)
        out["baseline_startup_s"] = data.diagnose_run(store, baseline).startup_s
    return out


def no_sizes(capture: dict[str, Any], sized: bool = False) -> str:
    """What the capture chart says for a run with no per-size capture time: a count the log gave
    (with the sizes, ``sized``: vLLM's passes, or without), or nothing at all."""
    if not capture["count"]:
        return "no captures reported"
    total = f" in {c.seconds(capture['total_s'])}" if capture["total_s"] is not None else ""
    if sized:
        return (f"the log gives the sizes of its {c.plural(capture['count'], 'capture')}{total} "
                f"(the capture list per pass), but not the time of each")
    return f"the log gives {c.plural(capture['count'], 'capture')}{total}, but no size or time of each"


PROVENANCE_NOTE = {"measured": "measured", "log": "from the log", "inferred": "inferred",
                   "estimated": "estimated", None: "not recorded"}


def time_to_failure(summary: dict[str, Any], phases: list[dict[str, Any]],
                    captures: list[dict[str, Any]]) -> float | None:
    """How long a failed start ran: from its first phase's start to the failure (the run's end
    event); None for a run that did not fail or without the times to say."""
    failed_at = (summary.get("failure") or {}).get("ts")
    if summary.get("status") != "failed" or failed_at is None:
        return None
    starts = [float(r["start_ts"]) if r.get("start_ts") is not None else float(r["ts"]) - float(r["duration_s"] or 0)
              for r in list(phases) + list(captures) if r.get("start_ts") is not None or r.get("ts") is not None]
    return float(failed_at) - min(starts) if starts and float(failed_at) > min(starts) else None


def stats(diagnosis: dict[str, Any], failed_after: float | None = None) -> dict[str, str]:
    """The four numbers at the top, from what the run recorded or its log stated; what
    neither said is "not in the log" / "not measured", never 0. A failed start's length is
    the time to its failure (``failed_after``), not to the last phase it finished."""
    capture = diagnosis["capture"]
    unknown = c.unknown(diagnosis["source"])
    startup = c.seconds(diagnosis["startup_s"]) if diagnosis["startup_s"] else unknown
    if failed_after is not None:
        startup = f"{c.seconds(failed_after)} to the failure"
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
    queries, store = data.queries, data.store()
    summary = queries.run_summary(store, run_id) if run_id else None
    if summary is None:
        return c.not_found("run", run_id or "")
    others = [r for r in queries.list_runs(store) if r["run_id"] != run_id]
    return html.Div([
        c.nav(run_id),
        dcc.Store(id="startup-run-id", data=run_id),
        html.H2(["Startup of ", html.Span(c.inert(summary["name"]), id="startup-name")]),
        html.Div([html.Span(f"source {summary['source']}"), html.Span(f"backend {c.inert(summary['backend'])}"),
                  html.Span(f"model {c.inert(summary['model'])}"), html.Span(f"device {c.inert(summary['device'])}")],
                 className="meta"),
        html.Div([c.stat("startup", "…", "startup-total"), c.stat("captures", "…", "startup-captures"),
                  c.stat("capture time", "…", "startup-capture-s"), c.stat("failed", "…", "startup-failed")],
                 className="stats"),
        c.section("Post-mortem: the outcome, then what took longer than expected",
                  html.Div(id="startup-diagnosis")),
        _log_figures_section(summary),
        c.section("Waterfall", c.graph("startup-waterfall", height=420)),
        c.section("Capture time and pool memory per size", c.graph("startup-captures-fig"),
                  html.Div(capture_table(queries.captures(store, run_id), c.unknown(summary["source"]),
                                         data.size_namer(summary["source"], summary.get("config"))))),
        c.section("Failed captures and degradation", html.Div(id="startup-failures")),
        _ranks_section(store, run_id),
        c.section("Against a baseline run",
                  dcc.Dropdown(id="startup-baseline",
                               options=[{"label": c.inert(f"{r['name']} ({r['run_id']})"), "value": r["run_id"]}
                                        for r in others],
                               placeholder="choose a baseline run", clearable=True),
                  html.Div(id="startup-baseline-summary", className="hint"),
                  html.Div(baseline_body([], None), id="startup-baseline-body")),
    ], className="page")


def _failures(shown: dict[str, Any]) -> list[Any]:
    size_name = shown["size_name"]
    items = [f"capture of {size_name(x['stage'], x['graph_bs'])} ({x['stage']}) failed"
             + (f" after {c.seconds(x['duration_s'])}" if x.get("duration_s") else "")
             + f": {x.get('error') or 'no error text'}" for x in shown["failed"]]
    items += [f"degraded {d['from']} → {d['to']}"                    # a degradation has no stage: a batch size
              + (f" ({size_name(None, d['graph_bs'])})" if d.get("graph_bs") else "")
              + (f": {d['error']}" if d.get("error") else "") for d in shown["degrades"]]
    failure = shown["summary"].get("failure")
    if failure and failure.get("error"):
        items.insert(0, f"the run failed: {failure['error']}")
    if items:
        return [c.bullet_list(items, "failures")]
    capture = shown["diagnosis"]["capture"]
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


def diagnosis_children(shown: dict[str, Any]) -> list[Any]:
    diagnosis = shown["diagnosis"]
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
          Output("startup-baseline-body", "children"),
          Output("startup-baseline-summary", "children"),
          Input("startup-baseline", "value"), State("startup-run-id", "data"))
def refresh(baseline, run_id):
    shown = page_data(data.store(), run_id, baseline)
    if shown is None:
        raise dash.exceptions.PreventUpdate
    baseline_text = ""
    if shown.get("baseline_startup_s") is not None and shown["startup_s"] is not None:
        delta = shown["startup_s"] - shown["baseline_startup_s"]
        baseline_text = (f"This run {c.seconds(shown['startup_s'])}, baseline {c.seconds(shown['baseline_startup_s'])} "
                         f"({c.signed_seconds(delta)}).")
    stat = shown["stats"]
    return (stat["startup-total"], stat["startup-captures"], stat["startup-capture-s"], stat["startup-failed"],
            diagnosis_children(shown), shown["waterfall"], shown["capture_fig"], _failures(shown),
            baseline_body(shown["diff"], shown["diff_fig"]),
            baseline_text)
