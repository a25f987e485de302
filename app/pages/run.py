"""Run (/run/<run_id>): the mode mix, eager ratio against alerts, batch sizes, padding,
fallback reasons explained, step times, pool memory and parity; live while running.

The eager ratio over time, batch sizes and padding are over the decode stages
(``replayscope.contract.wire.DECODE_STAGES``), as the default alert rule, the advisor and the Prometheus
rule are: a vLLM run's decode and mixed batches, a runner's or SGLang's decode steps."""

from __future__ import annotations

from functools import partial
from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from replayscope.app import charts, comparisons, data, headlines, recordings
from replayscope.app import components as c
from replayscope.app.callbacks import Callbacks
from replayscope.contract.wire import DECODE_STAGES, DECODE_VIEW

dash.register_page(__name__, path_template="/run/<run_id>", title="replayscope · run", name="Run")
callback = Callbacks()
recordings.register(callback)

REFRESH_MS = 2000
BARS = 120              # time buckets on the mode mix at most
RATIO_POINTS = 600      # points of a rule's judged ratio at most
STAT_IDS = ("run-steps", "run-eager", "run-padded", "run-capture", "run-status", "run-alerts")


def rules_for(rules: list[Any], run_name: str) -> list[Any]:
    """The enabled eager-ratio alert rules that watch a run of this name."""
    return [r for r in rules if r.enabled and r.kind == "eager_ratio" and data.watches(r, run_name)]


def decode_scope(stage_steps: dict[str, int]) -> str:
    """The words for what the decode figures count in this run: 'decode', 'decode and
    mixed' or 'mixed' (the decode stages it has steps in; 'decode' before any step)."""
    present = [s for s in DECODE_STAGES if stage_steps.get(s)]
    return " and ".join(present) if present else DECODE_STAGES[0]


def padding_note(scope: str) -> str:
    return f"of {scope} tokens: padded ÷ ({scope} + padded)"


def stage_note(summary: dict[str, Any]) -> str | None:
    """How an imported run's steps got their stages, with its steps per stage."""
    rule = data.STAGE_NOTES.get(summary["source"])
    if rule is None:
        return None
    counts = " · ".join(f"{summary['stage_steps'][s]:,} {s}" for s in sorted(summary["stage_steps"]))
    return (f"Steps by stage: {counts or 'none yet'}. {rule} Batch sizes, padding and the eager ratio over "
            f"time count its {decode_scope(summary['stage_steps'])} steps, as the default alert rule and the "
            f"advisor do (the decode stages: {' and '.join(DECODE_STAGES)}).")


def decode_histogram(store: Any, summary: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """(the decode stages' steps per batch size and mode, the title of their axis). Where a
    stage's sizes are tokens (``data.size_in_tokens``: a vLLM run's mixed batches), each row
    carries its ``stage`` and the title names each unit (``charts.size_title``); else the
    stages' rows are one, under the charts' own title (None)."""
    present = [s for s in DECODE_STAGES if summary["stage_steps"].get(s)]
    title = charts.size_title(present, partial(data.size_in_tokens, source=summary["source"],
                                               config=summary.get("config")))
    if title is None:
        return data.queries.batch_histogram(store, summary["run_id"], stage=DECODE_VIEW), None
    return [{**row, "stage": stage} for stage in present
            for row in data.queries.batch_histogram(store, summary["run_id"], stage=stage)], title


def page_data(store: Any, run_id: str) -> dict[str, Any] | None:
    """Everything the run page shows, from the query layer; None for an unknown run."""
    queries = data.queries
    summary = queries.run_summary(store, run_id)
    if summary is None:
        return None
    span_s = max(0.0, (summary.get("last_event_ts") or summary["started_at"]) - summary["started_at"])
    bucket_s = queries.choose_bucket_s(span_s, BARS)       # bars a few pixels wide, whatever the length
    timeline = queries.mode_timeline(store, run_id, bucket_s=bucket_s)
    if len(timeline) > BARS:           # its steps span more than its clock says (stamps ahead of arrival)
        span_s = timeline[-1]["t"] - timeline[0]["t"]
        bucket_s = queries.choose_bucket_s(span_s, BARS)
        timeline = queries.mode_timeline(store, run_id, bucket_s=bucket_s)
    decode_timeline = queries.mode_timeline(store, run_id, stage=DECODE_VIEW)
    size_name = data.size_namer(summary["source"], summary.get("config"))
    hist, size_title = decode_histogram(store, summary)
    scope = decode_scope(summary["stage_steps"])
    step_times = queries.step_time_by_mode(store, run_id)
    caps = queries.captures(store, run_id)
    spans = queries.alert_events(store, run_id=run_id)
    every_s = queries.choose_bucket_s(span_s, RATIO_POINTS)
    judged = [{"rule": rule, "points": data.judged_ratios(store, rule, run_id, every_s),
               "spans": [s for s in spans if s["rule_id"] == rule.id]}
              for rule in rules_for(queries.alert_rules(store), summary["name"])]
    graphs = [x for x in caps if x["status"] == "ok" and x["stage"] in DECODE_STAGES]
    captured = sorted({x["graph_bs"] for x in graphs})
    captured_names = {bs: ", ".join(dict.fromkeys(charts.capture_size(x, size_name) for x in graphs
                                                  if x["graph_bs"] == bs)) for bs in captured}
    if not captured:
        captured = sorted((summary.get("config") or {}).get("capture_sizes") or [])
    costs = data.explain_run(store, run_id)
    unknown = c.unknown(summary["source"])
    sample = summary["step_detail"].get("log_sample")
    counted = f"logged steps (1 in {sample['every']} {sample['stage']})" if sample else "steps"
    return {
        "summary": summary,
        "stats": {
            "run-steps": c.count(summary["steps"]),
            "run-eager": headlines.eager_value(summary, marked=False),     # its note says it is a sample
            "run-padded": headlines.padding_value(summary, scope),
            "run-capture": c.seconds(summary["capture_total_s"], unknown),
            "run-status": summary["status"],
            "run-alerts": c.count(summary["alerts_firing"]),
        },
        "figures": {
            "run-mode-mix": charts.mode_mix_figure(timeline, bucket_s, counted, summary["padding_known"]),
            "run-eager-ratio": (charts.rule_ratio_figure(judged, scope, every_s) if judged else
                                charts.eager_ratio_figure(decode_timeline, scope=scope)),
            "run-batch-hist": charts.batch_histogram_figure(hist, captured, scope, counted, captured_names,
                                                            size_name, size_title),
            "run-padding": charts.padding_figure(hist, scope, size_name, size_title),
            "run-step-time": charts.step_time_figure(step_times),
            "run-pool": charts.pool_figure(caps, size_name=size_name),
            "run-parity": charts.parity_figure(queries.parity(store, run_id)),
        },
        "reasons": [(cost, data.cost_sentence(cost)) for cost in costs],
        "evidence": queries.step_evidence(store, run_id),
        "alerts": spans,
        "comparison": data.regressions.run_regressions(store, run_id),
        "scope": scope,
    }


TRACED_NOTE = ("Traced by replayscope trace: each step's mode is what the process did (the graphs it replayed), "
               "its cause what the trace saw (an engine's own dispatcher, Inductor's words); an eager step "
               "nothing explained is listed as 'unknown'.")


def header(summary: dict[str, Any]) -> list[Any]:
    source_note = None if summary["source"] in ("runner", "library") else (
        comparisons.not_measured_note(summary)
        or (TRACED_NOTE if summary["source"] == "trace" else
            f"Imported from {summary['source']}: steps and their modes come from the engine's own "
            "reports; an eager step without a reported cause is listed as 'unknown'."))
    parts = [
        html.H2(c.inert(summary["name"]), id="run-name"),
        html.Div([html.Span(f"run {c.inert(summary['run_id'])}"), html.Span(f"source {summary['source']}", id="run-source"),
                  html.Span(f"backend {c.inert(summary['backend'])}"), html.Span(f"model {c.inert(summary['model'])}"),
                  html.Span(f"device {c.inert(summary['device'])}"), html.Span(f"started {c.when(summary['started_at'])}")],
                 className="meta"),
    ]
    if source_note:
        parts.append(html.P(source_note, className="note imported", id="run-source-note"))
    stages = stage_note(summary)
    if stages:
        parts.append(html.P(stages, className="note imported", id="run-stages"))
    if data.is_stand_in(summary):
        parts.append(html.P(data.STAND_IN_NOTE, className="note stand-in", id="run-stand-in"))
    if summary.get("error"):
        parts.append(html.P(f"{headlines.ended_how(summary.get('status'))}: {c.inert(summary['error'])}", className="note error",
                            id="run-error"))
    if summary.get("clock_ahead_s"):
        parts.append(html.P(comparisons.clock_note(summary["clock_ahead_s"]), className="note imported",
                            id="run-clock"))
    notes = comparisons.detail_notes(summary["step_detail"])
    if notes:
        parts.append(html.Div([html.P(n) for n in notes], className="note imported", id="run-detail"))
    return parts


def layout(run_id: str | None = None, **_query: Any) -> html.Div:
    summary = data.queries.run_summary(data.store(), run_id) if run_id else None
    if summary is None:
        return c.not_found("run", run_id or "")
    scope = decode_scope(summary["stage_steps"])
    sample = summary["step_detail"].get("log_sample")
    steps_note = f"logged: 1 in {sample['every']} {sample['stage']} batches" if sample else None
    return html.Div([
        c.nav(run_id),
        dcc.Store(id="run-id", data=run_id),
        dcc.Interval(id="run-interval", interval=REFRESH_MS, disabled=False),
        html.Div(header(summary), id="run-header"),
        html.Div([c.stat("steps", "…", "run-steps", steps_note),
                  c.stat("eager", "…", "run-eager", headlines.eager_note(summary)),
                  c.stat("padding", "…", "run-padded", padding_note(scope) if summary["padding_known"] else
                         "the engine's /metrics count graph replays, not the batch they padded from"),
                  c.stat("capture time", "…", "run-capture"), c.stat("status", "…", "run-status"),
                  c.stat("alerts firing", "…", "run-alerts")], className="stats"),
        html.Div(id="run-live", className="hint"),
        html.Div([
            c.section("Mode mix over time", c.graph("run-mode-mix")),
            c.section(f"Eager ratio of {scope} steps, alert thresholds and alert spans", c.graph("run-eager-ratio")),
        ], className="grid2"),
        html.Div([
            c.section(f"Batch sizes of {scope} steps by mode (▲ captured sizes)", c.graph("run-batch-hist")),
            c.section(f"Padding per batch size (share of {scope} tokens)", c.graph("run-padding")),
        ], className="grid2"),
        c.section("Compared with earlier runs of this model and configuration", html.Div(id="run-regressions"),
                  id="run-regressions-section"),
        c.section("Why steps ran eager", html.Div(id="run-reasons"), id="run-reasons-section"),
        recordings.section(),
        html.Div([
            c.section("Step time by mode", c.graph("run-step-time")),
            c.section("Graph pool memory per capture", c.graph("run-pool")),
        ], className="grid2"),
        c.section("Parity: graph replay vs eager on the same inputs", c.graph("run-parity", height=280)),
    ], className="page")


def reason_cards(reasons: list[tuple[dict[str, Any], str]], evidence: dict[str, Any]) -> list[Any]:
    """A card per eager reason, with what the steps' evidence said; then the notes graph steps
    carry (vLLM's PIECEWISE steps: why not FULL)."""
    rows = evidence["rows"]
    read = "" if evidence["complete"] else f" (in the first {c.count(evidence['read_steps'])} steps with evidence)"
    cards = [c.explanation_card(cost, text, [r for r in rows if r["mode"] == "eager" and r["reason"] == cost["reason"]],
                                read) for cost, text in reasons] or [html.P("No step ran eager.", className="hint")]
    notes = [r for r in rows if r["mode"] != "eager"]
    if notes:
        cards.append(html.Div([
            html.Div(html.Span("Steps on graphs, with a note of why not the full graph", className="card-title"),
                     className="card-head"),
            html.P("What the engine's dispatcher decided for these steps, as the trace read it" + read + "."),
            c.bullet_list([f"{r['head']}: {c.plural(r['steps'], 'step')} ({r['mode']}); e.g. {r['example']}"
                           for r in notes])], className="card explanation", **{"data-notes": "graph"}))
    return cards


FIGURE_IDS = ("run-mode-mix", "run-eager-ratio", "run-batch-hist", "run-padding", "run-step-time",
              "run-pool", "run-parity")


@callback([Output(i, "children") for i in STAT_IDS]
          + [Output(i, "figure") for i in FIGURE_IDS]
          + [Output("run-reasons", "children"), Output("run-regressions", "children"),
             Output("run-live", "children"), Output("run-interval", "disabled")],
          Input("run-interval", "n_intervals"), State("run-id", "data"))
def refresh(_n, run_id):
    shown = page_data(data.store(), run_id)
    if shown is None:
        raise dash.exceptions.PreventUpdate
    running = shown["summary"]["status"] == "running"
    live = (f"live: refreshing every {REFRESH_MS // 1000} s, last event {c.when(shown['summary']['last_event_ts'])}"
            if running else f"run {shown['summary']['status']}: not refreshing")
    return ([shown["stats"][i] for i in STAT_IDS] + [shown["figures"][i] for i in FIGURE_IDS]
            + [reason_cards(shown["reasons"], shown["evidence"]), comparisons.comparison_block(shown["comparison"]), live, not running])
