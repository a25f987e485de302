"""Runs (/): every run with its mode mix, padding, capture time and firing alerts; live."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, callback, dash_table, dcc, html

from app import components as c

dash.register_page(__name__, path="/", title="replayscope · runs", name="Runs")

REFRESH_MS = 3000
COLUMNS = [
    ("name", "name", "text"), ("run_id", "run id", "text"), ("source", "source", "text"),
    ("backend", "backend", "text"), ("model", "model", "text"), ("device", "device", "text"),
    ("status", "status", "text"), ("started", "started (UTC)", "text"), ("steps", "steps", "numeric"),
    ("eager_pct", "eager %", "numeric"), ("padded_pct", "padded %", "numeric"),
    ("capture_s", "capture s", "numeric"), ("alerts_firing", "alerts firing", "numeric"),
]


def table_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's rows from ``queries.list_runs``: numbers rounded as shown."""
    return [{
        "name": r["name"], "run_id": r["run_id"], "source": r["source"], "backend": r["backend"],
        "model": r["model"], "device": r["device"], "status": r["status"],
        "started": c.when(r["started_at"]), "steps": r["steps"],
        "eager_pct": round(r["eager_ratio"] * 100, 1), "padded_pct": round(r["padded_ratio"] * 100, 1),
        "capture_s": None if r["capture_total_s"] is None else round(r["capture_total_s"], 2), "alerts_firing": r["alerts_firing"],
    } for r in runs]


def page_data(store: Any) -> list[dict[str, Any]]:
    from collector import queries

    return table_rows(queries.list_runs(store))


def layout(**_query: Any) -> html.Div:
    return html.Div([
        c.nav(),
        html.H2("Runs"),
        html.P("Click a row to open the run. Sort by any column; type in the header row to filter "
               "(e.g. > 10 under eager %).", className="hint"),
        dcc.Interval(id="runs-interval", interval=REFRESH_MS),
        dcc.Location(id="runs-location", refresh="callback-nav"),
        dash_table.DataTable(
            id="runs-table",
            columns=[{"id": cid, "name": name, "type": typ} for cid, name, typ in COLUMNS],
            data=[], sort_action="native", filter_action="native", page_size=25,
            sort_by=[], style_table={"overflowX": "auto"},
            style_cell={"fontFamily": "inherit", "fontSize": "13px", "padding": "4px 8px",
                        "maxWidth": "260px", "overflow": "hidden", "textOverflow": "ellipsis"},
            style_header={"fontWeight": "600", "backgroundColor": "#f1f3f6"},
            style_data_conditional=[
                {"if": {"filter_query": "{alerts_firing} > 0"}, "backgroundColor": "#fdecea"},
                {"if": {"filter_query": '{status} = "running"', "column_id": "status"}, "color": "#2e8b57",
                 "fontWeight": "600"},
            ],
        ),
        html.Div(id="runs-count", className="hint"),
    ], className="page")


@callback(Output("runs-table", "data"), Output("runs-count", "children"),
          Input("runs-interval", "n_intervals"))
def refresh(_n):
    rows = page_data(c.store())
    return rows, f"{len(rows)} runs"


@callback(Output("runs-location", "pathname"), Input("runs-table", "active_cell"),
          State("runs-table", "derived_viewport_data"), prevent_initial_call=True)
def open_run(active_cell, viewport):
    if not active_cell or not viewport:
        raise dash.exceptions.PreventUpdate
    row = viewport[active_cell["row"]]
    return f"/run/{row['run_id']}"
