"""The run page's section on Inductor's CUDA-graph recordings (torch.compile reduce-overhead,
from ``replayscope trace``): per compiled function, how often it was recorded and why, PyTorch's
count against its re-record limit, whether it now runs eager for good; and, for a run without
any CUDA graph, why. Shown only for runs that have something of it; refreshed with the page
(``register`` puts its callback on the app, from the run page)."""

from __future__ import annotations

from typing import Any

from dash import Input, Output, State, html

from replayscope.app import components as c
from replayscope.app import data

SECTION_ID = "run-recordings-section"
CAUSE_WORDS = {
    "first": "first",
    "new_shape": "new input shape",
    "recompiled": "recompiled",
    "static_input_moved": "static input moved",
    "managed_input_moved": "graph-pool input moved",
    "output_alive": "earlier output still alive",
    "new_path": "new place in the graph tree",
    "unknown": "not said by PyTorch",
}
NOTE_CODES = ("no_cuda_graphs", "rerecord_limit")
NO_LIMIT = "no limit in this PyTorch"
COLUMNS = (
    c.Column("function", "compiled function", min_width=180, flex=1.5),
    c.Column("recordings", "recordings", numeric=True, min_width=90, flex=0.6),
    c.Column("causes", "why recorded", min_width=340, flex=4),
    c.Column("rerecords", "re-records counted by PyTorch", numeric=True, min_width=130,
             shown=lambda r: c.count(r["rerecords"], "not kept by this PyTorch")),
    c.Column("limit", "PyTorch's limit", numeric=True, min_width=110,
             shown=lambda r: c.count(r["limit"], NO_LIMIT)),
    c.Column("now", "now", min_width=120, flex=0.8),
)


def function_rows(recordings: list[dict[str, Any]], warnings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per compiled function: its recordings and their causes, in order of first recording."""
    gave_up = [w["message"] for w in warnings if w.get("code") == "rerecord_limit"]
    rows: dict[str, dict[str, Any]] = {}
    for r in recordings:
        row = rows.setdefault(r["function"], {"function": r["function"], "recordings": 0, "by_cause": {},
                                              "rerecords": None, "limit": None})
        row["recordings"] = max(row["recordings"], r["recordings"])
        row["by_cause"][r["cause"]] = row["by_cause"].get(r["cause"], 0) + 1
        row["rerecords"], row["limit"] = r.get("rerecords"), r.get("rerecord_limit")
    for row in rows.values():
        row["causes"] = ", ".join(f"{CAUSE_WORDS.get(cause, cause)} ×{n}" for cause, n in row.pop("by_cause").items())
        past_limit = any(f" {row['function']} past" in message for message in gave_up)
        row["now"] = "eager for good" if past_limit else "graphs"
    return list(rows.values())


def notes(warnings: list[dict[str, Any]]) -> list[str]:
    return [w["message"] for w in warnings if w.get("code") in NOTE_CODES]


def panel(recordings: list[dict[str, Any]], warnings: list[dict[str, Any]]) -> list[Any]:
    """The section's content: what the run says of its graphs, then the functions' table."""
    parts: list[Any] = [html.P(text, className="note") for text in notes(warnings)]
    if recordings:
        parts.append(c.grid("run-recordings-table", COLUMNS, c.grid_rows(COLUMNS, function_rows(recordings, warnings)),
                            filters=False, row_id="function"))
    return parts


def section() -> html.Section:
    """The section for the run page's layout (hidden until the run has something of it)."""
    return html.Section([html.H3("CUDA-graph recordings of compiled functions"), html.Div(id="run-recordings")],
                        className="section", id=SECTION_ID, style={"display": "none"})


def register(callback: Any) -> None:
    """Keep the section's callback with the run page's (``replayscope.app.callbacks.Callbacks``)."""
    callback(Output("run-recordings", "children"), Output(SECTION_ID, "style"),
             Input("run-interval", "n_intervals"), State("run-id", "data"))(refresh)


def refresh(_n, run_id):
    store = data.store()
    recordings = data.queries.recordings(store, run_id) if run_id else []
    warnings = data.queries.warnings(store, run_id) if run_id else []
    if not recordings and not notes(warnings):
        return [], {"display": "none"}
    return panel(recordings, warnings), {}
