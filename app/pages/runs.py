"""Runs (/): every run with its mode mix, padding, capture time and firing alerts; live."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, dcc, html

from replayscope.app import components as c
from replayscope.app import data, headlines
from replayscope.app.callbacks import Callbacks

dash.register_page(__name__, path="/", title="replayscope · runs", name="Runs")
callback = Callbacks()

REFRESH_MS = 3000
RUN_LINK = "/run/{run_id}"
COLUMNS = (
    c.Column("name", "name", link=RUN_LINK, min_width=130, flex=2),
    c.Column("run_id", "run id", link=RUN_LINK, min_width=100, flex=1.5),
    c.Column("source", "source", min_width=80),
    c.Column("backend", "backend", min_width=80),
    c.Column("model", "model", min_width=75),
    c.Column("device", "device", min_width=70),
    c.Column("status", "status", min_width=80),
    c.Column("started", "started (UTC)", min_width=140, flex=1.5),
    c.Column("steps", "steps", numeric=True, shown=lambda r: c.count(r["steps"]), min_width=70),
    c.Column("eager_pct", "eager % of decode", numeric=True, shown=headlines.eager_value, min_width=90),
    c.Column("padded_pct", "padding % of decode", numeric=True, min_width=95, flex=1.2,
             shown=headlines.padding_value),
    c.Column("capture_s", "capture", numeric=True, min_width=85,
             shown=lambda r: c.seconds(r["capture_total_s"], c.unknown(r["source"]))),
    c.Column("alerts_firing", "alerts", numeric=True, min_width=65),
)


def table_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's rows from ``queries.list_runs``: percentages sort and filter as numbers."""
    return c.grid_rows(COLUMNS, ({
        **r, "started": c.when(r["started_at"], seconds=False),
        "eager_pct": headlines.eager_pct(r),
        "padded_pct": None if r["decode_padded_ratio"] is None else round(r["decode_padded_ratio"] * 100, 1),
        "capture_s": r["capture_total_s"],
    } for r in runs))


def page_data(store: Any) -> list[dict[str, Any]]:
    return table_rows(data.queries.list_runs(store))


def layout(**_query: Any) -> html.Div:
    return html.Div([
        c.nav(),
        html.H2("Runs"),
        html.P("Click a run's name or id to open it. Sort by any column; type under a header to filter "
               "(a number under eager % keeps the runs at or above it). Eager % counts the decode stages' steps (decode and mixed); prefill always runs eager and is counted apart on the run's page.", className="hint"),
        dcc.Interval(id="runs-interval", interval=REFRESH_MS),
        c.grid("runs-table", COLUMNS, page_size=25, row_id="run_id",
               row_classes={"row-alerting": "params.data.alerts_firing > 0",
                            "row-running": "params.data.status === 'running'"}),
        html.Div(id="runs-count", className="hint"),
    ], className="page")


@callback(Output("runs-table", "rowData"), Output("runs-count", "children"),
          Input("runs-interval", "n_intervals"))
def refresh(_n):
    rows = page_data(data.store())
    return rows, c.plural(len(rows), "run")
