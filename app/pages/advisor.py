"""Advisor (/advisor/<run_id>): capture sizes for a budget of K graphs, from the run's
observed batch sizes, with the flags to copy into replayscope, vLLM and SGLang."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, callback, dcc, html

from app import charts
from app import components as c

dash.register_page(__name__, path_template="/advisor/<run_id>", title="replayscope · advisor",
                   name="Advisor")

PLAN_COLUMNS = (
    c.Column("plan", "plan", min_width=90),
    c.Column("graphs", "graphs", numeric=True, min_width=80),
    c.Column("sizes", "sizes", min_width=160, flex=3),
    c.Column("coverage", "coverage", numeric=True, shown=lambda r: c.pct(r["coverage"]), min_width=95),
    c.Column("padding", "padding share", numeric=True, shown=lambda r: c.pct(r["padding"]), min_width=110),
    c.Column("eager_steps", "eager steps", numeric=True, shown=lambda r: c.count(r["eager_steps"]), min_width=100),
    c.Column("padded_rows", "padded rows", numeric=True, shown=lambda r: c.count(r["padded_rows"]), min_width=105),
    c.Column("capture", "capture time", numeric=True, shown=lambda r: c.seconds(r["capture"], r["unknown"]),
             min_width=105),
    c.Column("pool", "pool memory", numeric=True, shown=lambda r: c.size(r["pool"], r["unknown"]), min_width=105),
)
FLAG_LABELS = (("replayscope", "replayscope run"), ("vllm", "vLLM (command line)"),
               ("vllm_config", "vLLM (Python / config)"), ("sglang", "SGLang"))


def page_data(store: Any, run_id: str, budget: int | None = None,
              inputs: dict[str, Any] | None = None) -> dict[str, Any] | None:
    from collector.advisor import advise_run, default_budget, run_inputs

    inputs = inputs or run_inputs(store, run_id)
    if inputs is None:
        return None
    distinct = len(inputs["distribution"])
    budget = max(1, budget or default_budget(inputs))
    # the same function as GET /v1/runs/{id}/advice?budget=K
    advice = advise_run(store, run_id, budget, inputs=inputs)
    unknown = c.unknown(inputs["summary"]["source"])
    records = []
    for name, plan in (("current", advice.current), ("proposed", advice.predicted)):
        if plan is None:
            continue
        current = name == "current"
        records.append({"plan": name, "graphs": len(plan.sizes), "sizes": ", ".join(map(str, plan.sizes)),
                        "coverage": plan.coverage, "padding": plan.waste_share,
                        "eager_steps": plan.eager_steps, "padded_rows": plan.padded_rows,
                        "capture": advice.capture_s_current if current else advice.capture_s_predicted,
                        "pool": advice.pool_bytes_current if current else advice.pool_bytes_predicted,
                        "unknown": unknown})
    rows = c.grid_rows(PLAN_COLUMNS, records)
    hist = [{"raw_bs": bs, "mode": "graph", "steps": n, "num_tokens": 0, "padded_tokens": 0}
            for bs, n in sorted(inputs["distribution"].items())]
    return {"summary": inputs["summary"], "advice": advice, "rows": rows, "distinct": distinct,
            "budget": budget, "figure": charts.batch_histogram_figure(hist, advice.sizes)}


def layout(run_id: str | None = None, **_query: Any) -> html.Div:
    from collector.advisor import run_inputs

    inputs = run_inputs(c.store(), run_id) if run_id else None
    if inputs is None:
        return c.not_found("run", run_id or "")
    distinct = max(1, len(inputs["distribution"]))
    initial = page_data(c.store(), run_id, inputs=inputs)["budget"]
    top = max(distinct, initial)
    marks = {k: str(k) for k in sorted({1, top, *range(4, top + 1, 4)}) if k <= top}
    return html.Div([
        c.nav(run_id),
        dcc.Store(id="advisor-run-id", data=run_id),
        html.H2(["Capture sizes for ", html.Span(inputs["summary"]["name"], id="advisor-name")]),
        html.P(f"From {c.plural(sum(inputs['distribution'].values()), 'decode step')} over "
               f"{c.plural(len(inputs['distribution']), 'distinct batch size')}. Sizes are chosen exactly (dynamic programming) to minimise padded rows "
               f"plus eager fallbacks weighted {inputs['eager_weight']:.2f}× per row; the largest observed size "
               f"is always covered.", className="hint"),
        html.Div([html.Label("Budget: graphs to capture", htmlFor="advisor-budget"),
                  dcc.Slider(id="advisor-budget", min=1, max=top, step=1, value=initial, marks=marks,
                             tooltip={"placement": "bottom", "always_visible": True})],
                 className="slider"),
        c.grid("advisor-table", PLAN_COLUMNS, filters=False, row_id="plan"),
        html.Div(id="advisor-saved", className="hint"),
        c.section("Flags to copy", html.Div(id="advisor-flags")),
        c.section("Observed batch sizes (▲ proposed sizes)", c.graph("advisor-hist")),
    ], className="page")


@callback(Output("advisor-table", "rowData"), Output("advisor-flags", "children"),
          Output("advisor-saved", "children"), Output("advisor-hist", "figure"),
          Input("advisor-budget", "value"), State("advisor-run-id", "data"))
def refresh(budget, run_id):
    data = page_data(c.store(), run_id, budget)
    if data is None:
        raise dash.exceptions.PreventUpdate
    advice = data["advice"]
    flags = []
    for key, label in FLAG_LABELS:
        flags.append(html.Div([html.Div(label, className="flag-engine"),
                               html.Pre(advice.flags[key], id=f"advisor-flag-{key}", className="flag-text"),
                               dcc.Clipboard(target_id=f"advisor-flag-{key}", title="copy",
                                             className="copy")], className="flag-copy"))
    saved = []
    if advice.capture_s_saved is not None:
        saved.append(f"capture time saved {c.seconds(advice.capture_s_saved)}" if advice.capture_s_saved >= 0
                     else f"capture time added {c.seconds(-advice.capture_s_saved)}")
    if advice.pool_bytes_saved is not None:
        saved.append(f"pool memory saved {c.size(advice.pool_bytes_saved)}" if advice.pool_bytes_saved >= 0
                     else f"pool memory added {c.size(-advice.pool_bytes_saved)}")
    note = ("; ".join(saved) + " against the current plan (scaled from this run's captures)") if saved else ""
    return data["rows"], flags, note, data["figure"]
