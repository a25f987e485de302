"""Any address that is no page: says so, with the navigation (Dash shows the page registered
as ``not_found_404`` for every unmatched path)."""

from __future__ import annotations

from typing import Any

import dash
from dash import dcc, html

from replayscope.app import components as c
from replayscope.app.callbacks import Callbacks

dash.register_page(__name__, path="/404", title="replayscope · no such page", name="Not found")
callback = Callbacks()


def layout(**_query: Any) -> html.Div:
    return html.Div([c.nav(), html.H2("No page here"),
                     html.P("This address is none of the dashboard's pages: Runs, Fleet and Alerts are above; a "
                            "run's pages are /run/<run id>, /startup/<run id> and /advisor/<run id>."),
                     dcc.Link("All runs", href="/")], className="page", id="not-found")
