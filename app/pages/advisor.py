"""Advisor (/advisor/<run_id>): capture sizes for a budget of K graphs, chosen on the first
part of the run and scored on the held-back rest, priced, checked against each engine's
rules, with the flags to copy. Every figure is the API's (``GET /v1/runs/{id}/advice``)."""

from __future__ import annotations

from functools import partial
from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from replayscope.app import charts, data
from replayscope.app import components as c
from replayscope.app.callbacks import Callbacks
from replayscope.contract.wire import DECODE_VIEW

dash.register_page(__name__, path_template="/advisor/<run_id>", title="replayscope · advisor",
                   name="Advisor")
callback = Callbacks()

FLAG_ORDER = ("runner", "vllm", "sglang")
PROVENANCE = {"fit": "fit", "estimated": "estimated", "measured": None, "log": None, "none": None}


def _price(figure: dict[str, Any], unknown: str, unit: str) -> str:
    if figure["value"] is None:
        return unknown
    if figure["provenance"] == "none":
        return "none"
    text = c.seconds(figure["value"]) if unit == "s" else c.size(figure["value"])
    if figure["error"]:
        text += " ± " + (c.seconds(figure["error"]) if unit == "s" else c.size(figure["error"]))
    tag = PROVENANCE.get(figure["provenance"], figure["provenance"])
    return f"{text} ({tag})" if tag else text


def _per_step(value: float | None, unit: str) -> str:
    if value is None:
        return "no steps"
    return c.seconds(value) if unit == "s" else f"{c.number(value)} rows"


def plan_columns(scored: str, unit: str, estimated: bool = False) -> tuple[c.Column, ...]:
    on = "held back" if scored == "held_back" else "all steps"
    cost_on = ("estimated, " if estimated else "") + on          # the shares are counted, the time estimated
    return (
        c.Column("plan", "plan", min_width=90),
        c.Column("graphs", "graphs", numeric=True, min_width=75),
        c.Column("sizes", "sizes", min_width=140, flex=3),
        c.Column("eager", f"eager share ({on})", numeric=True, shown=lambda r: c.pct(r["eager"]), min_width=115),
        c.Column("padding", f"padding waste ({on})", numeric=True, shown=lambda r: c.pct(r["padding"]),
                 min_width=120),
        c.Column("cost", f"{'step time' if unit == 's' else 'rows per step'} ({cost_on})", numeric=True,
                 shown=lambda r: _per_step(r["cost"], r["unit"]), min_width=120),
        c.Column("capture", "capture time", numeric=True, shown=lambda r: r["capture_text"], min_width=180),
        c.Column("pool", "pool memory", numeric=True, shown=lambda r: r["pool_text"], min_width=180),
    )


# (store, run, its last event and ingest, steps) -> the run's facts: moving the budget reads no steps again
_FACTS: dict[tuple, Any] = {}
_FACTS_KEPT = 8


def _facts(store: Any, run_id: str):
    summary = data.queries.run_summary(store, run_id)
    if summary is None:
        return None
    key = (store.safe_url, run_id, summary["last_event_ts"], summary["last_seen_at"], summary["steps"])
    if key not in _FACTS:
        while len(_FACTS) >= _FACTS_KEPT:
            _FACTS.pop(next(iter(_FACTS)))
        _FACTS[key] = data.run_facts(store, run_id, summary)
    return _FACTS[key]


def page_data(store: Any, run_id: str, budget: int | None = None) -> dict[str, Any] | None:
    """The API's advice for the run (``GET /v1/runs/{id}/advice?budget=K``) and the page's rows."""
    facts = _facts(store, run_id)
    if facts is None:
        return None
    advice = data.advise(facts, budget)
    unknown = c.unknown(advice["source"])
    scored = "held_back" if advice["split"]["held_back_steps"] else "fit"
    unit = advice["objective"]["unit"]
    records = []
    for p in advice["plans"]:
        s = p[scored]
        records.append({"plan": p["name"], "graphs": len(p["sizes"]),
                        "sizes": ", ".join(map(str, p["sizes"])) or "graphs off",
                        "eager": s["eager_share"], "padding": s["waste_share"], "cost": s["cost_per_step"],
                        "unit": unit, "capture": p["capture_s"]["value"], "pool": p["pool_bytes"]["value"],
                        "capture_text": _price(p["capture_s"], unknown, "s"),
                        "pool_text": _price(p["pool_bytes"], unknown, "bytes")})
    current = next((p["sizes"] for p in advice["plans"] if p["name"] == "current"), [])
    in_tokens = data.size_in_tokens(advice["stage"], facts.run.get("source"), facts.run.get("config"))
    x_title = "batch size (tokens)" if in_tokens else "batch size (requests)"     # the rule size_name follows
    estimated = advice["objective"]["provenance"] == "estimated"
    size_name = partial(data.size_namer(facts.run.get("source"), facts.run.get("config")), advice["stage"])
    return {"advice": advice, "scored": scored, "unit": unit, "estimated": estimated, "records": records,
            "rows": c.grid_rows(plan_columns(scored, unit, estimated), records), "size_name": size_name,
            "figure": charts.advisor_histogram_figure(advice["histogram"], advice["sizes"], current, x_title,
                                                      size_name)}


def intro(advice: dict[str, Any]) -> list[Any]:
    obj, split = advice["objective"], advice["split"]
    stage = {"decode": "decode steps", "mixed": "batches (vLLM mixes prefill and decode tokens in one batch)",
             DECODE_VIEW: "decode and mixed batches (vLLM sizes both by their token count)"}.get(advice["stage"], "steps")
    parts = [html.P(f"{advice['engine_label']}: sizes chosen exactly (dynamic programming) to minimise the cost of "
                    f"the run's {stage}. Cost: {obj['basis']}.", className="hint", id="advisor-objective")]
    if split["held_back_steps"]:
        parts.append(html.P(f"Chosen from the first {c.plural(split['fit_steps'], 'step')} (in time order), scored "
                            f"on the {c.plural(split['held_back_steps'], 'step')} after "
                            f"{c.when(split['held_back_from_ts'])}, which they were not chosen from.",
                            className="hint", id="advisor-split"))
    else:
        parts.append(html.P(f"All {c.plural(split['fit_steps'], 'step')}: too few to hold any back, so the sizes are "
                            f"scored on the steps they were chosen from.", className="hint", id="advisor-split"))
    if advice["left_out"]:
        left = ", ".join(f"{reason} {n:,}" for reason, n in sorted(advice["left_out"].items(), key=lambda kv: -kv[1]))
        parts.append(html.P(f"Left out: decode steps that ran eager for a reason no list of sizes decides ({left}).",
                            className="hint"))
    for note in advice["notes"]:
        parts.append(html.P(note, className="hint"))
    return parts


def graphs_off_banner(advice: dict[str, Any]) -> Any:
    if not advice["graphs_off"]:
        return None
    steps = advice["decode_steps"]
    return html.Div([html.B("Graphs were off for this run. "),
                     f"Every one of its {c.plural(steps, 'decode step')} ran eager ({advice['graphs_off']}). "
                     f"The proposal shows what graphs would have served and at what price."],
                    className="banner banner-warn", id="advisor-graphs-off")


def verdict(advice: dict[str, Any]) -> html.Div:
    v = advice["verdict"]
    return html.Div(v["text"], id="advisor-verdict",
                    className="verdict" + (" verdict-worse" if v.get("worse") else "")
                    + (" verdict-estimated" if v.get("estimated") else ""))


def dropped(advice: dict[str, Any]) -> Any:
    """The sizes the choice found and left off (each in its unit, as the advice names it), and why."""
    if not advice.get("dropped"):
        return None
    left = "; ".join(f"{d['named']} ({d['why']})" for d in advice["dropped"])
    return html.P(f"Left off, the gain does not pay for them: {left}.", className="hint", id="advisor-dropped")


def price_notes(advice: dict[str, Any]) -> html.Ul:
    items = []
    for p in advice["plans"]:
        for key, what in (("capture_s", "capture time"), ("pool_bytes", "pool memory")):
            items.append(html.Li([html.B(f"{p['name']}, {what}: "), p[key]["basis"]]))
    return html.Ul(items, className="hint", id="advisor-price")


def validity(advice: dict[str, Any]) -> html.Div:
    rows = []
    for v in advice["validity"]:
        ok = not v["problems"]
        details = [html.Li(f) for f in v["facts"]] + [html.Li(f"not known: {u}") for u in v["unknown"]]
        rows.append(html.Div([
            html.Div([html.Span(v["label"], className="flag-engine"),
                      html.Span("valid" if ok else "not as given", className="badge " + ("badge-ok" if ok else
                                                                                         "badge-high")),
                      html.Span("; ".join(v["problems"]), className="validity-problems")],
                     className="validity-head"),
            html.Details([html.Summary("the rules applied"), html.Ul(details)], className="validity-rules"),
        ], className="validity-row", **{"data-engine": v["engine"], "data-valid": "yes" if ok else "no"}))
    return html.Div(rows, id="advisor-validity")


def flags(advice: dict[str, Any]) -> html.Div:
    rows = []
    order = [advice["engine"]] + [e for e in FLAG_ORDER if e != advice["engine"]]     # the run's engine first
    for i, f in enumerate(sorted(advice["flags"], key=lambda f: (order.index(f["engine"]), not f["for_this_run"]))):
        label = f["label"] + (" (Python)" if f["kind"] == "Python" and "Python" not in f["label"] else "") + (
            " — this run" if f["for_this_run"] else "")
        rows.append(html.Div([html.Div(label, className="flag-engine"),
                              html.Pre(f["text"], id=f"advisor-flag-{i}", className="flag-text",
                                       **{"data-engine": f["engine"], "data-this-run": "yes" if f["for_this_run"]
                                          else "no"}),
                              dcc.Clipboard(target_id=f"advisor-flag-{i}", title="copy", className="copy")],
                             className="flag-copy"))
    return html.Div(rows, id="advisor-flags-list")


def budget_text(advice: dict[str, Any]) -> str:
    used = advice["graphs_used"]
    text = f"at most {c.plural(advice['budget'], 'graph')} ({advice['budget_basis']})"
    if used < advice["budget"]:
        text += (f"; {used} used: more would not pay for their graphs" if advice.get("dropped") else
                 f"; {used} used: more would not lower the cost" if used < advice["distinct_batch_sizes"]
                 else f"; {used} used, one per batch size the run had")
    return text


def body(shown: dict[str, Any]) -> list[Any]:
    advice = shown["advice"]
    return [verdict(advice), dropped(advice),
            c.section("Price of each list", price_notes(advice)),
            c.section("Validity per engine", validity(advice)),
            c.section("Flags to copy", flags(advice)),
            c.section("Batch sizes the sizes were chosen from, by how they ran", c.graph("advisor-hist",
                                                                                         shown["figure"]))]


def layout(run_id: str | None = None, **_query: Any) -> html.Div:
    shown = page_data(data.store(), run_id) if run_id else None
    if shown is None:
        return c.not_found("run", run_id or "")
    advice = shown["advice"]
    initial = advice["budget"]
    top = max(advice["distinct_batch_sizes"], initial, 1)
    # the ends, the run's own count and every 8th, none so close to another that their labels touch
    near = max(2, top // 25)
    fixed = {1, top, initial}
    marks = {k: str(k) for k in sorted(fixed | {m for m in range(8, top + 1, 8)
                                                if all(abs(m - f) > near for f in fixed)}) if k <= top}
    return html.Div([
        c.nav(run_id),
        dcc.Store(id="advisor-run-id", data=run_id),
        html.H2(["Capture sizes for ", html.Span(c.inert(advice["name"]), id="advisor-name")]),
        *intro(advice),
        graphs_off_banner(advice),
        html.Div([html.Label(["Budget: ", html.Span(budget_text(advice), id="advisor-budget-value")],
                             htmlFor="advisor-budget"),
                  dcc.Slider(id="advisor-budget", min=1, max=top, step=1, value=initial, marks=marks)],
                 className="slider"),
        c.grid("advisor-table", plan_columns(shown["scored"], shown["unit"], shown["estimated"]), shown["rows"],
               filters=False,
               row_id="plan"),
        html.Div(body(shown), id="advisor-body"),
    ], className="page")


@callback(Output("advisor-table", "rowData"), Output("advisor-body", "children"),
          Output("advisor-budget-value", "children"),
          Input("advisor-budget", "value"), State("advisor-run-id", "data"), prevent_initial_call=True)
def refresh(budget, run_id):
    shown = page_data(data.store(), run_id, budget)
    if shown is None:
        raise dash.exceptions.PreventUpdate
    return shown["rows"], body(shown), budget_text(shown["advice"])
