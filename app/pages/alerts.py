"""Alerts (/alerts): eager-ratio rules listed, created, edited and deleted (validated by
collector.alerts), and the firing / resolved history with each alert's dominant reason."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, callback, ctx, dcc, html

from app import components as c

dash.register_page(__name__, path="/alerts", title="replayscope · alerts", name="Alerts")

REFRESH_MS = 5000
RULE_COLUMNS = (
    c.Column("id", "id", numeric=True, min_width=60, flex=0.5),
    c.Column("name", "name", min_width=120, flex=1.5),
    c.Column("threshold", "threshold", numeric=True, min_width=95),
    c.Column("window_s", "window (s)", numeric=True, min_width=95),
    c.Column("min_steps", "min steps", numeric=True, min_width=95),
    c.Column("stage", "stage", min_width=80),
    c.Column("run_pattern", "runs (glob)", min_width=110, flex=1.5),
    c.Column("webhook_url", "webhook", min_width=110, flex=1.5),
    c.Column("enabled", "enabled", min_width=85),
)
HISTORY_COLUMNS = (
    c.Column("rule_name", "rule", min_width=100),
    c.Column("run_name", "run", link="/run/{run_id}", min_width=120, flex=1.5),
    c.Column("run_id", "run id", link="/run/{run_id}", min_width=100),
    c.Column("status", "status", min_width=85),
    c.Column("threshold", "threshold", numeric=True, shown=lambda r: c.pct(r["threshold"]), min_width=95),
    c.Column("peak", "peak", numeric=True, shown=lambda r: c.pct(r["peak"]), min_width=75),
    c.Column("value", "latest", numeric=True, shown=lambda r: c.pct(r["value"]), min_width=80),
    c.Column("steps", "steps", numeric=True, shown=lambda r: c.count(r["steps"]), min_width=75),
    c.Column("reason", "dominant reason", min_width=120, flex=1.5),
    c.Column("started", "started (UTC)", min_width=150, flex=1.5),
    c.Column("ended", "ended (UTC)", min_width=150, flex=1.5),
)


def rule_rows(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return c.grid_rows(RULE_COLUMNS, ({
        "id": r["id"], "name": r["name"], "threshold": r["threshold"], "window_s": r["window_s"],
        "min_steps": r["min_steps"], "stage": r["stage"], "run_pattern": r["run_pattern"] or "(all runs)",
        "webhook_url": r["webhook_url"] or "(default)", "enabled": "yes" if r["enabled"] else "no"}
        for r in rules))


def history_rows(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return c.grid_rows(HISTORY_COLUMNS, ({
        "id": e["id"], "rule_name": e["rule_name"], "run_name": e["run_name"], "run_id": e["run_id"],
        "status": e["status"], "threshold": e["threshold"], "peak": e["peak"], "value": e["value"],
        "steps": e["steps"], "reason": e["reason"] or "none reported",
        "started": c.when(e["started_at"], seconds=False),
        "ended": c.when(e["ended_at"], seconds=False, missing="still firing" if e["status"] == "firing" else "not recorded")}
        for e in events))


def page_data(store: Any) -> dict[str, Any]:
    from collector import queries

    return {"rules": rule_rows(queries.alert_rules(store)),
            "history": history_rows(queries.alert_events(store))}


def _field(label: str, component: Any) -> html.Div:
    return html.Div([html.Label(label, htmlFor=component.id), component], className="field")


def layout(**_query: Any) -> html.Div:
    from runner.wire import STEP_STAGES

    return html.Div([
        c.nav(),
        html.H2("Alerts"),
        html.P("A rule fires for a run when, over its last window, at least 'min steps' steps of the "
               "stage ran and the eager share of them is above the threshold (0..1).", className="hint"),
        dcc.Interval(id="alerts-interval", interval=REFRESH_MS),
        c.section("Rules", c.grid("alerts-rules", RULE_COLUMNS, filters=False, row_id="id", selectable=True),
            html.P("Select a rule to edit or delete it; clear the selection to create a new one.",
                   className="hint")),
        c.section("Rule", html.Div([
            _field("name", dcc.Input(id="rule-name", type="text", placeholder="eager-high", debounce=False)),
            _field("threshold (eager share 0..1)", dcc.Input(id="rule-threshold", type="number", value=0.2)),
            _field("window (s)", dcc.Input(id="rule-window", type="number", value=300)),
            _field("min steps", dcc.Input(id="rule-min-steps", type="number", value=100)),
            _field("stage", dcc.Dropdown(id="rule-stage", options=list(STEP_STAGES), value="decode",
                                         clearable=False)),
            _field("runs (glob on name, empty = all)", dcc.Input(id="rule-pattern", type="text")),
            _field("webhook URL (empty = default)", dcc.Input(id="rule-webhook", type="text")),
            _field("enabled", dcc.Checklist(id="rule-enabled", options=[{"label": "enabled", "value": "on"}],
                                            value=["on"])),
        ], className="form"),
            html.Div([html.Button("Create", id="rule-create", n_clicks=0),
                      html.Button("Save changes", id="rule-update", n_clicks=0),
                      html.Button("Delete", id="rule-delete", n_clicks=0, className="danger")],
                     className="buttons"),
            html.Div(id="rule-message", role="status", className="message")),
        c.section("History", c.grid("alerts-history", HISTORY_COLUMNS, page_size=20, row_id="id",
                                    row_classes={"row-alerting": "params.data.status === 'firing'"})),
    ], className="page")


def form_data(name, threshold, window, min_steps, stage, pattern, webhook, enabled) -> dict[str, Any]:
    """The form as a rule object for collector.alerts (which validates it)."""
    return {"name": (name or "").strip(), "threshold": threshold, "window_s": window, "min_steps": min_steps,
            "stage": stage, "run_pattern": (pattern or "").strip() or None,
            "webhook_url": (webhook or "").strip() or None, "enabled": "on" in (enabled or [])}


@callback(Output("alerts-rules", "rowData"), Output("alerts-history", "rowData"), Output("rule-message", "children"),
          Output("rule-message", "className"), Output("alerts-rules", "selectedRows"),
          Input("alerts-interval", "n_intervals"), Input("rule-create", "n_clicks"),
          Input("rule-update", "n_clicks"), Input("rule-delete", "n_clicks"),
          State("alerts-rules", "selectedRows"),
          State("rule-name", "value"), State("rule-threshold", "value"), State("rule-window", "value"),
          State("rule-min-steps", "value"), State("rule-stage", "value"), State("rule-pattern", "value"),
          State("rule-webhook", "value"), State("rule-enabled", "value"))
def act(_n, _create, _update, _delete, selected, *form):
    from collector import alerts

    store = c.store()
    message, kind, keep = dash.no_update, dash.no_update, dash.no_update
    trigger = ctx.triggered_id
    selected_id = selected[0]["id"] if selected else None
    try:
        if trigger == "rule-create":
            rule = alerts.create_rule(store, form_data(*form))
            message, kind, keep = f"Created rule {rule['name']!s}.", "message ok", []
        elif trigger in ("rule-update", "rule-delete"):
            if selected_id is None:
                message, kind = "Select a rule in the table first.", "message error"
            elif trigger == "rule-update":
                rule = alerts.update_rule(store, selected_id, form_data(*form), partial=False)
                message, kind = f"Saved rule {rule['name']!s}.", "message ok"
            else:
                alerts.delete_rule(store, selected_id)
                message, kind, keep = "Deleted the rule; its history stays.", "message ok", []
    except (alerts.InvalidRule, alerts.UnknownRule) as error:
        message, kind = f"Not saved: {error}", "message error"
    data = page_data(store)
    return data["rules"], data["history"], message, kind, keep


@callback(Output("rule-name", "value"), Output("rule-threshold", "value"), Output("rule-window", "value"),
          Output("rule-min-steps", "value"), Output("rule-stage", "value"), Output("rule-pattern", "value"),
          Output("rule-webhook", "value"), Output("rule-enabled", "value"),
          Input("alerts-rules", "selectedRows"), prevent_initial_call=True)
def load_rule(selected):
    if not selected:
        raise dash.exceptions.PreventUpdate
    from collector import alerts

    rule = alerts.get_rule(c.store(), selected[0]["id"])
    return (rule["name"], rule["threshold"], rule["window_s"], rule["min_steps"], rule["stage"],
            rule["run_pattern"] or "", rule["webhook_url"] or "", ["on"] if rule["enabled"] else [])
