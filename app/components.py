"""Pieces every page uses: number formats, stat tiles, cards, tables, the navigation.

Everything shown from the store goes into components as text, which Dash escapes; no page
uses raw HTML or markdown for stored strings. (The store itself: ``replayscope.app.data``.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

import dash_ag_grid as dag
from dash import dcc, html

# The pages' number formats live in replayscope.app.formats; re-exported so a page needs one import.
from replayscope.app.formats import (count, inert, number, pct, plural, seconds, signed_seconds, size,
                                     unknown, when)

# -- layout pieces ---------------------------------------------------------------------
NAV = (("Runs", "/"), ("Fleet", "/fleet"), ("Alerts", "/alerts"))


def nav(run_id: str | None = None) -> html.Nav:
    links = [dcc.Link(label, href=href, className="nav-link") for label, href in NAV]
    if run_id:
        links += [html.Span("·", className="nav-sep"),
                  dcc.Link("Run", href=f"/run/{run_id}", className="nav-link"),
                  dcc.Link("Startup", href=f"/startup/{run_id}", className="nav-link"),
                  dcc.Link("Advisor", href=f"/advisor/{run_id}", className="nav-link")]
    return html.Nav([html.Span("replayscope", className="brand")] + links, className="nav")


def stat(label: str, value: str, id: str | None = None, note: str | None = None) -> html.Div:
    value_props = {"id": id} if id else {}
    children = [html.Div(label, className="stat-label"), html.Div(value, className="stat-value", **value_props)]
    if note:
        children.append(html.Div(note, className="stat-note"))
    return html.Div(children, className="stat")


def graph(id: str, figure: Any = None, height: int = 320) -> dcc.Graph:
    """A chart that follows its container's width (window resizes included)."""
    return dcc.Graph(id=id, figure=figure if figure is not None else {}, responsive=True,
                     config={"displaylogo": False}, style={"height": f"{height}px"})


# -- tables (AG Grid) -------------------------------------------------------------------
SHOWN = "__shown"    # a row's display text for a column: row[field + SHOWN]


@dataclass(frozen=True)
class Column:
    """One grid column.

    ``field`` is the row key the column sorts and filters on (a number for ``numeric``
    columns, so "eager % ≥ 10" compares numbers). ``shown`` makes the text displayed from
    the whole row (so unknown values can say why they are unknown); without it the raw
    value is shown. Either way a text column shows stored strings ``inert`` (bidirectional
    controls as their code points), while it sorts, filters and links on the raw value. ``link`` is a path template filled from the row ("/run/{run_id}"),
    which makes the cell a link. ``min_width`` is in pixels; columns share the rest of the
    width by ``flex``.
    """

    field: str
    header: str
    numeric: bool = False
    shown: Callable[[dict[str, Any]], str] | None = None
    link: str | None = None
    min_width: int = 80
    flex: float = 1.0

    def definition(self, filters: bool) -> dict[str, Any]:
        d: dict[str, Any] = {"field": self.field, "headerName": self.header, "minWidth": self.min_width,
                             "flex": self.flex, "headerTooltip": self.header}
        if self.numeric:
            d.update(type="rightAligned", cellDataType="number", filter="agNumberColumnFilter",
                     filterParams={"defaultOption": "greaterThanOrEqual", "buttons": ["reset"]})
        else:
            d.update(cellDataType="text", filter="agTextColumnFilter", tooltipField=self.field,
                     filterParams={"buttons": ["reset"]})
        if not filters:
            d["filter"] = False
        if self.shown is not None or not self.numeric:
            d.pop("tooltipField", None)
            d["valueFormatter"] = {"function": "shown(params)"}
            d["tooltipValueGetter"] = {"function": "shown(params)"}
        if self.link is not None:
            d["cellRenderer"] = "Link"
            d["cellRendererParams"] = {"href": self.link}
        return d


def grid_rows(columns: Iterable[Column], records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows for ``grid``: each record with its display text for every formatted column, and
    for a text column whose value has bidirectional controls (shown ``inert``)."""
    columns = list(columns)
    formatted = [col for col in columns if col.shown is not None]
    texts = [col for col in columns if col.shown is None and not col.numeric]
    rows = []
    for r in records:
        shown = {col.field + SHOWN: inert(col.shown(r)) for col in formatted}
        for col in texts:
            value = r.get(col.field)
            if isinstance(value, str) and inert(value) != value:
                shown[col.field + SHOWN] = inert(value)
        rows.append({**r, **shown})
    return rows


def grid(id: str, columns: Iterable[Column], rows: Iterable[dict[str, Any]] = (), *,
         filters: bool = True, page_size: int | None = None, row_id: str | None = None,
         row_classes: dict[str, str] | None = None, selectable: bool = False) -> Any:
    """The dashboard's table: sortable, filterable (a filter row under the headers),
    columns sized to the page width, row heights to the content (no inner scrollbar); a
    cell's text wraps (long names and ids break) rather than being cut off.

    ``rows`` come from ``grid_rows``. ``row_id`` names the field that identifies a row,
    so a refresh updates rows in place; ``row_classes`` maps a CSS class to a JavaScript
    condition on ``params.data``; ``selectable`` lets one row be selected (``selectedRows``).
    """
    columns = list(columns)
    options: dict[str, Any] = {"domLayout": "autoHeight", "animateRows": False, "enableCellTextSelection": True,
                               "ensureDomOrder": True, "tooltipShowDelay": 400, "suppressCellFocus": not selectable}
    if page_size:
        options.update(pagination=True, paginationPageSize=page_size, paginationPageSizeSelector=False)
    if selectable:
        options["rowSelection"] = {"mode": "singleRow", "checkboxes": False, "enableClickSelection": True}
    props: dict[str, Any] = {}
    if row_id:
        props["getRowId"] = f"'' + params.data[{row_id!r}]"
    if row_classes:
        props["rowClassRules"] = row_classes
    return dag.AgGrid(
        id=id, columnDefs=[col.definition(filters) for col in columns], rowData=list(rows),
        defaultColDef={"sortable": True, "resizable": True, "floatingFilter": filters,
                       "wrapHeaderText": True, "autoHeaderHeight": True, "wrapText": True, "autoHeight": True,
                       "suppressHeaderMenuButton": True},
        dashGridOptions=options, className="grid",
        style={"height": None, "width": "100%"}, **props)


def section(title: str, *children: Any, id: str | None = None) -> html.Section:
    props = {"id": id} if id else {}
    return html.Section([html.H3(title)] + list(children), className="section", **props)


def bullet_list(items: list[str], className: str = "") -> html.Ul:
    return html.Ul([html.Li(item) for item in items], className=className)


def engine_flags(change: list[str] | tuple[str, ...], vllm: list[str] | tuple[str, ...],
                 sglang: list[str] | tuple[str, ...]) -> html.Div:
    return flag_rows([{"engine": label, "lines": list(items)}
                      for label, items in (("replayscope", change), ("vLLM", vllm), ("SGLang", sglang)) if items])


def flag_rows(flags: list[dict[str, Any]]) -> html.Div:
    """Each engine's lines under its name, in the order given (a run's own engine first)."""
    return html.Div([html.Div([html.Span(f["engine"], className="flag-engine"),
                               bullet_list(f["lines"], "flag-list")], className="flag-row") for f in flags],
                    className="flags")


def explanation_card(cost: dict[str, Any], cost_text: str, seen: list[dict[str, Any]] = (),
                     seen_note: str = "") -> html.Div:
    """An explanation card: what happened, why, what it cost here (or saved: eager measured
    faster than replay at the same sizes is no cost), what to change; ``seen``: what the steps'
    evidence said (``queries.step_evidence`` rows of this reason)."""
    e = cost["explanation"]
    compared = cost.get("compared") or {}
    cost_label = "What it saved here. " if (compared.get("extra_s") or 0) < 0 else "What it cost here. "
    return html.Div([
        html.Div([html.Span(e["title"], className="card-title"),
                  html.Code(cost["reason"], className="card-reason")], className="card-head"),
        html.P([html.B("What happened. "), e["what"]]),
        html.P([html.B("Why a graph cannot serve it. "), e["why"]]),
        html.P([html.B(cost_label), cost_text], className="card-cost"),
        *([html.Div([html.B(f"What the steps' evidence says{seen_note}."),
                     bullet_list([f"{r['example']} ({plural(r['steps'], 'step')})" for r in seen[:3]])])]
          if seen else []),
        html.Div([html.B("What to change."), flag_rows(cost["flags"])]),
    ], className="card explanation", **{"data-reason": cost["reason"]})


def finding_card(finding: dict[str, Any], rank: int) -> html.Div:
    return html.Div([
        html.Div([html.Span(f"{rank}. {finding['title']}", className="card-title"),
                  html.Span(finding["severity"], className=f"badge badge-{finding['severity']}"),
                  html.Span(seconds(finding["seconds"]), className="card-seconds")],
                 className="card-head"),
        html.Div([html.B("Evidence"), bullet_list(finding["evidence"])]),
        html.Div([html.B("What to do"), engine_flags(finding["actions"], finding["vllm"], finding["sglang"])]),
    ], className="card finding", **{"data-cause": finding["cause"]})


def not_found(what: str, key: str) -> html.Div:
    return html.Div([nav(), html.H2(f"No {what} {key!s}"),
                     html.P("It may not have been ingested yet."),
                     dcc.Link("All runs", href="/")], className="page")
