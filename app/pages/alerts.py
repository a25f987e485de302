"""Alerts (/alerts): rules of every kind (eager ratio over a window; a regression against a
run's baseline) listed with their kind, created, edited and deleted through the collector's
own rule writes (``replayscope.app.data``, as the API's routes), and the firing / resolved history with
each alert's dominant reason. Shares (thresholds, peaks) read as percentages throughout.

With a token configured (REPLAYSCOPE_TOKEN) the page is read-only until the token is given
once (wrong tokens are limited per address, replayscope.collector.api.throttle; the right one always
signs in): the sign-in callback
sets a signed, HttpOnly session cookie (replayscope.collector.api.auth), and
every callback that changes the store checks it, so a callback posted without it changes
nothing. Readers without it see webhook URLs as scheme and host only."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, ctx, dcc, html

from replayscope.app import components as c
from replayscope.app import data
from replayscope.app.callbacks import Callbacks
from replayscope.contract.errors import TooManyRequests

dash.register_page(__name__, path="/alerts", title="replayscope · alerts", name="Alerts")
callback = Callbacks()

REFRESH_MS = 5000
# The form starts at the rule's defaults, with the built-in rule's threshold (replayscope.collector.alert_rule).
FORM_DEFAULTS = {**data.alert_rule.DEFAULTS, "threshold": data.alerts.BUILTIN_EAGER_RATIO_RULE["threshold"]}
KIND_WORDS = {"eager_ratio": "eager ratio", "regression": "regression"}
RULE_COLUMNS = (
    c.Column("id", "id", numeric=True, min_width=50, flex=0.4),
    c.Column("name", "name", min_width=110, flex=1.5),
    c.Column("kind", "kind", shown=lambda r: kind_text(r), min_width=110, flex=1.2),
    c.Column("threshold", "threshold", numeric=True, shown=lambda r: c.pct(r["threshold"]), min_width=85),
    c.Column("resolve_threshold", "resolves at", numeric=True, shown=lambda r: c.pct(r["resolve_threshold"]),
             min_width=85),
    c.Column("window_s", "window (s)", numeric=True, min_width=80),
    c.Column("for_s", "for (s)", numeric=True, min_width=65),
    c.Column("keep_firing_for_s", "hold (s)", numeric=True, min_width=65),
    c.Column("min_steps", "min steps", numeric=True, min_width=70),
    c.Column("stage", "stage", min_width=75),
    c.Column("run_pattern", "runs (glob)", min_width=90, flex=1.2),
    c.Column("webhook_url", "webhook", min_width=90, flex=1.2),
    c.Column("enabled", "enabled", min_width=70),
)


def kind_text(row: dict[str, Any]) -> str:
    """A rules-table row's kind: 'eager ratio', or 'regression of graph step time' / 'regression
    of any metric'."""
    if row["kind"] != "regression":
        return KIND_WORDS.get(row["kind"], row["kind"])
    metric = data.REGRESSION_METRICS.get(row.get("metric"))
    return f"regression of {metric.label if metric else 'any metric'}"
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


def rule_rows(rules: list[Any], writer: bool = True) -> list[dict[str, Any]]:
    rules = [data.alerts.public_rule(r, writer) for r in rules]
    return c.grid_rows(RULE_COLUMNS, ({
        "id": r.id, "name": r.name, "kind": r.kind, "metric": r.metric,
        "threshold": r.threshold, "window_s": r.window_s,
        "resolve_threshold": r.threshold if r.resolve_threshold is None else r.resolve_threshold,
        "for_s": r.for_s, "keep_firing_for_s": r.keep_firing_for_s,
        "min_steps": r.min_steps, "stage": r.stage, "run_pattern": r.run_pattern or "(all runs)",
        "webhook_url": r.webhook_url or "(default)", "enabled": "yes" if r.enabled else "no"}
        for r in rules))


def history_rows(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return c.grid_rows(HISTORY_COLUMNS, ({
        "id": e["id"], "rule_name": e["rule_name"], "run_name": e["run_name"], "run_id": e["run_id"],
        "status": e["status"], "threshold": e["threshold"], "peak": e["peak"], "value": e["value"],
        "steps": e["steps"], "reason": e["reason"] or "none reported",
        "started": c.when(e["started_at"], seconds=False),
        "ended": c.when(e["ended_at"], seconds=False, missing="still firing" if e["status"] == "firing" else "not recorded")}
        for e in events))


def page_data(store: Any, writer: bool = True) -> dict[str, Any]:
    return {"rules": rule_rows(data.queries.alert_rules(store), writer),
            "history": history_rows(data.queries.alert_events(store))}


def _auth_text(writer: bool) -> str:
    if not data.token():
        return "No token is configured (REPLAYSCOPE_TOKEN): anyone who reaches this page can change rules."
    if writer:
        return "Signed in: you can change rules."
    return "Read-only: give the collector's token (REPLAYSCOPE_TOKEN) to change rules."


def _field(label: str, component: Any) -> html.Div:
    return html.Div([html.Label(label, htmlFor=component.id), component], className="field")


def layout(**_query: Any) -> html.Div:
    return html.Div([
        c.nav(),
        html.H2("Alerts"),
        html.P("An eager-ratio rule fires for a run when, over its last window, at least 'min steps' steps "
               "of the stage ran and the eager share of them is above the threshold. A regression rule fires "
               "when a finished run's figure is beyond its baseline's spread by at least the threshold (share "
               "points for the eager share, a share of the baseline for times and memory).", className="hint"),
        dcc.Interval(id="alerts-interval", interval=REFRESH_MS),
        dcc.Store(id="auth-changed", data=0),
        c.section("Access", html.Div(id="auth-status", role="status", className="hint"), html.Div([
            _field("token", dcc.Input(id="auth-token", type="password", autoComplete="off", debounce=False)),
            html.Div([html.Button("Sign in", id="auth-sign-in", n_clicks=0),
                      html.Button("Sign out", id="auth-sign-out", n_clicks=0)], className="buttons"),
        ], className="form", style=None if data.token() else {"display": "none"}), id="alerts-access"),
        c.section("Rules", c.grid("alerts-rules", RULE_COLUMNS, filters=False, row_id="id", selectable=True),
            html.P("Select a rule to edit or delete it; clear the selection to create a new one.",
                   className="hint")),
        c.section("Rule", html.Div([
            _field("name", dcc.Input(id="rule-name", type="text", placeholder="eager-high", debounce=False)),
            _field("kind", dcc.Dropdown(id="rule-kind", options=[{"label": w, "value": k} for k, w in KIND_WORDS.items()],
                                        value=FORM_DEFAULTS["kind"], clearable=False)),
            _field("metric (regression rules; empty = any)",
                   dcc.Dropdown(id="rule-metric", options=[{"label": m.label, "value": k}
                                                           for k, m in data.REGRESSION_METRICS.items()])),
            _field("threshold (a share, 0..1: 0.2 is 20%)", dcc.Input(id="rule-threshold", type="number", value=FORM_DEFAULTS["threshold"])),
            _field("window (s)", dcc.Input(id="rule-window", type="number", value=FORM_DEFAULTS["window_s"])),
            _field("min steps", dcc.Input(id="rule-min-steps", type="number", value=FORM_DEFAULTS["min_steps"])),
            _field("for (s): active this long before it fires", dcc.Input(id="rule-for", type="number", value=FORM_DEFAULTS["for_s"])),
            _field("hold (s): clear this long before it resolves",
                   dcc.Input(id="rule-keep", type="number", value=FORM_DEFAULTS["keep_firing_for_s"])),
            _field("resolves at (empty = the threshold)", dcc.Input(id="rule-resolve", type="number")),
            _field("stage (decode+mixed: the decode stages, where every source's decode steps are)",
                   dcc.Dropdown(id="rule-stage", options=list(data.alert_rule.FIELDS["stage"].choices),
                                value=FORM_DEFAULTS["stage"], clearable=False)),
            _field("runs (glob on name, empty = all)", dcc.Input(id="rule-pattern", type="text")),
            _field("webhook URL (empty = default)", dcc.Input(id="rule-webhook", type="text")),
            _field("enabled", dcc.Checklist(id="rule-enabled", options=[{"label": "enabled", "value": "on"}],
                                            value=["on"] if FORM_DEFAULTS["enabled"] else [])),
        ], className="form"),
            html.Div([html.Button("Create", id="rule-create", n_clicks=0),
                      html.Button("Save changes", id="rule-update", n_clicks=0),
                      html.Button("Delete", id="rule-delete", n_clicks=0, className="danger")],
                     className="buttons"),
            html.Div(id="rule-message", role="status", className="message")),
        c.section("History", c.grid("alerts-history", HISTORY_COLUMNS, page_size=20, row_id="id",
                                    row_classes={"row-alerting": "params.data.status === 'firing'"})),
    ], className="page")


def form_data(name, kind, metric, threshold, window, min_steps, for_s, keep, resolve, stage, pattern, webhook,
              enabled) -> dict[str, Any]:
    """The form as a rule object, checked by the same validation as the API's writes
    (``replayscope.collector.alerting.alerts.validate_rule``: the bounds and messages of
    ``replayscope.collector.alert_rule``) when it is created or saved."""
    regression = kind == "regression"
    return {"name": (name or "").strip(), "kind": kind or "eager_ratio", "metric": metric if regression else None,
            "threshold": threshold, "window_s": window, "min_steps": min_steps,
            "for_s": for_s, "keep_firing_for_s": keep, "resolve_threshold": resolve,
            "stage": stage, "run_pattern": (pattern or "").strip() or None,
            "webhook_url": (webhook or "").strip() or None, "enabled": "on" in (enabled or [])}


@callback(Output("auth-status", "children"), Output("auth-token", "value"), Output("auth-changed", "data"),
          Input("auth-sign-in", "n_clicks"), Input("auth-sign-out", "n_clicks"), State("auth-token", "value"),
          State("auth-changed", "data"))
def sign_in(_in, _out, token, changed):
    """Sign in (the token once, then a session cookie) or out; say which the page is."""
    auth = data.auth
    configured = data.token()
    trigger = ctx.triggered_id
    if configured and trigger == "auth-sign-in":
        try:
            right = auth.check_token((token or "").strip(), configured, client=ctx.remote or None,
                                     limiter=data.wrong_tokens())
        except TooManyRequests as error:      # only a wrong token is refused so
            return f"That is not the collector's token, and {error}.", "", changed
        if not right:
            return "That is not the collector's token.", "", changed
        secure = (ctx.headers or {}).get("x-forwarded-proto", "") == "https" or \
            str((ctx.headers or {}).get("origin", "")).startswith("https:")
        ctx.response.set_cookie(auth.SESSION_COOKIE, auth.new_session(configured), max_age=auth.SESSION_TTL_S, path="/",
                                httponly=True, samesite="strict", secure=secure)
        return _auth_text(True), "", (changed or 0) + 1
    if configured and trigger == "auth-sign-out":
        ctx.response.set_cookie(auth.SESSION_COOKIE, "", max_age=0, path="/", httponly=True, samesite="strict")
        return _auth_text(False), "", (changed or 0) + 1
    return _auth_text(data.request_is_writer()), dash.no_update, dash.no_update


@callback(Output("alerts-rules", "rowData"), Output("alerts-history", "rowData"), Output("rule-message", "children"),
          Output("rule-message", "className"), Output("alerts-rules", "selectedRows"),
          Input("alerts-interval", "n_intervals"), Input("rule-create", "n_clicks"),
          Input("rule-update", "n_clicks"), Input("rule-delete", "n_clicks"), Input("auth-changed", "data"),
          State("alerts-rules", "selectedRows"),
          State("rule-name", "value"), State("rule-kind", "value"), State("rule-metric", "value"),
          State("rule-threshold", "value"), State("rule-window", "value"),
          State("rule-min-steps", "value"), State("rule-for", "value"), State("rule-keep", "value"),
          State("rule-resolve", "value"), State("rule-stage", "value"), State("rule-pattern", "value"),
          State("rule-webhook", "value"), State("rule-enabled", "value"))
def act(_n, _create, _update, _delete, _auth, selected, *form):
    message, kind, keep = dash.no_update, dash.no_update, dash.no_update
    trigger = ctx.triggered_id
    writer = data.request_is_writer()
    selected_id = selected[0]["id"] if selected else None
    try:
        if trigger in ("rule-create", "rule-update", "rule-delete") and not writer:
            message, kind = "Not saved: changing rules needs the collector's token; sign in above.", "message error"
        elif trigger == "rule-create":
            rule = data.create_rule(form_data(*form))
            message, kind, keep = f"Created rule {rule.name!s}.", "message ok", []
        elif trigger in ("rule-update", "rule-delete"):
            if selected_id is None:
                message, kind = "Select a rule in the table first.", "message error"
            elif trigger == "rule-update":
                rule = data.replace_rule(selected_id, form_data(*form))
                message, kind = f"Saved rule {rule.name!s}.", "message ok"
            else:
                data.delete_rule(selected_id)
                message, kind, keep = "Deleted the rule; its history stays.", "message ok", []
    except (data.InvalidRule, data.UnknownRule) as error:
        message, kind = f"Not saved: {error}", "message error"
    shown = page_data(data.store(), writer)
    return shown["rules"], shown["history"], message, kind, keep


@callback(Output("rule-name", "value"), Output("rule-kind", "value"), Output("rule-metric", "value"),
          Output("rule-threshold", "value"), Output("rule-window", "value"),
          Output("rule-min-steps", "value"), Output("rule-for", "value"), Output("rule-keep", "value"),
          Output("rule-resolve", "value"), Output("rule-stage", "value"), Output("rule-pattern", "value"),
          Output("rule-webhook", "value"), Output("rule-enabled", "value"),
          Input("alerts-rules", "selectedRows"), prevent_initial_call=True)
def load_rule(selected):
    if not selected:
        raise dash.exceptions.PreventUpdate
    rule = data.rule_for_form(selected[0]["id"])
    return (rule.name, rule.kind, rule.metric, rule.threshold, rule.window_s, rule.min_steps, rule.for_s,
            rule.keep_firing_for_s, rule.resolve_threshold, rule.stage, rule.run_pattern or "",
            rule.webhook_url or "", ["on"] if rule.enabled else [])
