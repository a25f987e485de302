"""Fleet (/fleet): every run grouped by model, backend, device and version; their shares,
step times, capture and startup over time; regressions against each run's baseline.

Reads ``replayscope.collector.analysis.fleet`` only (rollups, captures and phases, kept for good). Filters are
also query parameters (``/fleet?model=llama-8b&period=7d``), so a filtered view is a link.
"""

from __future__ import annotations

import time
from typing import Any

import dash
from dash import Input, Output, dcc, html

from replayscope.app import charts, comparisons, data, headlines
from replayscope.app import components as c
from replayscope.app.callbacks import Callbacks

dash.register_page(__name__, path="/fleet", title="replayscope · fleet", name="Fleet")
callback = Callbacks()

REFRESH_MS = 30_000
FILTERS = ("model", "backend", "device", "version")
PERIODS = {"1d": ("last 24 hours", 86400), "7d": ("last 7 days", 7 * 86400), "30d": ("last 30 days", 30 * 86400),
           "90d": ("last 90 days", 90 * 86400), "all": ("all time", None)}
DEFAULT_PERIOD = "30d"
RUN_LINK = "/run/{run_id}"
GROUP_LINK = "/run/{latest_run_id}"


def _step(field: str, header: str) -> c.Column:
    return c.Column(field, header, numeric=True, min_width=80, shown=lambda r: c.seconds(r[field], "no timed steps"))


GROUP_COLUMNS = (
    c.Column("model", "model", min_width=100, flex=1.5), c.Column("backend", "backend", min_width=80),
    c.Column("device", "device", min_width=70, flex=1.3),
    c.Column("version", "version", min_width=80, shown=lambda r: r["version"] or "not recorded"),
    c.Column("runs", "runs", numeric=True, min_width=50),
    c.Column("eager_pct", "eager % of decode", numeric=True, min_width=75, shown=lambda r: c.pct(r["eager_ratio"], "no decode steps")),
    c.Column("padded_pct", "padding % of decode", numeric=True, min_width=75,
             shown=lambda r: c.pct(r["decode_padded_ratio"], "no decode tokens")),
    _step("graph_step_s", "graph step"), _step("padded_step_s", "padded step"), _step("eager_step_s", "eager step"),
    c.Column("capture_total_s", "capture (median)", numeric=True, min_width=80,
             shown=lambda r: c.seconds(r["capture_total_s"])),
    c.Column("startup_s", "startup (median)", numeric=True, min_width=80, shown=lambda r: c.seconds(r["startup_s"])),
    c.Column("pool_bytes", "pool (largest)", numeric=True, min_width=80, shown=lambda r: c.size(r["pool_bytes"])),
    c.Column("regressions", "runs regressed", numeric=True, min_width=80),
    c.Column("latest", "latest run", link=GROUP_LINK, min_width=90, flex=1.3),
)

RUN_COLUMNS = (
    c.Column("name", "run", link=RUN_LINK, min_width=100, flex=1.6),
    c.Column("model", "model", min_width=85), c.Column("backend", "backend", min_width=80),
    c.Column("device", "device", min_width=65),
    c.Column("version", "version", min_width=85, shown=lambda r: r["version"] or "not recorded"),
    c.Column("started", "started (UTC)", min_width=90),
    c.Column("steps", "steps", numeric=True, min_width=70, shown=lambda r: c.count(r["steps"])),
    c.Column("eager_pct", "eager % of decode", numeric=True, min_width=70, shown=lambda r: c.pct(r["eager_ratio"], "no decode steps")),
    c.Column("padded_pct", "padding % of decode", numeric=True, min_width=70,
             shown=lambda r: c.pct(r["decode_padded_ratio"], headlines.PADDING_UNKNOWN if r["source"].endswith("-metrics")
                                   else "no decode tokens")),
    _step("graph_step_s", "graph step"),
    c.Column("capture_total_s", "capture", numeric=True, min_width=80,
             shown=lambda r: c.seconds(r["capture_total_s"], c.unknown(r["source"]))),
    c.Column("startup_s", "startup", numeric=True, min_width=80,
             shown=lambda r: c.seconds(r["startup_s"], c.unknown(r["source"]))),
    c.Column("pool_bytes", "pool", numeric=True, min_width=80,
             shown=lambda r: c.size(r["pool_bytes"], c.unknown(r["source"]))),
    c.Column("detail", "step detail", min_width=60),
    c.Column("regressed", "beyond the baseline", min_width=90, flex=2),
)


def _pct(ratio: float | None) -> float | None:
    return None if ratio is None else round(ratio * 100, 2)


def group_rows(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return c.grid_rows(GROUP_COLUMNS, ({
        **{k: v for k, v in g.items() if k != "step_s"}, "key": "|".join(str(g[k]) for k in FILTERS),
        "eager_pct": _pct(g["eager_ratio"]), "padded_pct": _pct(g["decode_padded_ratio"]), "latest": g["latest_name"],
    } for g in groups))


def run_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return c.grid_rows(RUN_COLUMNS, ({
        "run_id": r["run_id"], "name": r["name"], "source": r["source"], "model": r["model"],
        "backend": r["backend"], "device": r["device"], "version": r["version"], "status": r["status"],
        "started": c.when(r["started_at"], seconds=False), "started_at": r["started_at"], "steps": r["steps"],
        "eager_ratio": r["eager_ratio"], "eager_pct": _pct(r["eager_ratio"]),
        "decode_padded_ratio": r["decode_padded_ratio"], "padded_pct": _pct(r["decode_padded_ratio"]),
        "graph_step_s": r["graph_step_s"], "capture_total_s": r["capture_total_s"], "startup_s": r["startup_s"],
        "pool_bytes": r["pool_bytes"], "graph_sample": r["graph_sample"], "detail": comparisons.detail_short(r),
        "regressed": (comparisons.short_findings(r["regressions"]) + f" (vs {r['baseline']['text']})"
                      if r["regressions"] else ""),
        "regression_count": len(r["regressions"]),
    } for r in runs))


def filters_of(model=None, backend=None, device=None, version=None, period=DEFAULT_PERIOD, now=None):
    seconds = PERIODS.get(period or DEFAULT_PERIOD, PERIODS[DEFAULT_PERIOD])[1]
    now = time.time() if now is None else now
    return data.fleet.Filters.of(model=model, backend=backend, device=device, version=version,
                      since=None if seconds is None else now - seconds)


def page_data(store: Any, metric: str = "eager_ratio", **chosen: Any) -> dict[str, Any]:
    """Everything the fleet page shows for the chosen filters, from ``replayscope.collector.analysis.fleet``."""
    found = data.fleet.fleet(store, filters_of(**chosen))
    runs, total = found["runs"], found["runs_total"]
    regressed = sum(g["regressions"] for g in found["groups"])
    listed = "" if len(runs) == total else f"; the newest {len(runs):,} are listed below (filter to narrow)"
    return {
        "groups": group_rows(found["groups"]), "runs": run_rows(runs), "options": found["options"],
        "figure": charts.fleet_figure(found["series"], metric),
        "summary": (f"{c.plural(total, 'run')} in {c.plural(len(found['groups']), 'group')}; "
                    f"{c.plural(regressed, 'run')} beyond the spread of its baseline{listed}"),
    }


def _dropdown(name: str, options: list[str], value: str | None) -> html.Div:
    return html.Div([html.Label(name, htmlFor=f"fleet-{name}"),
                     dcc.Dropdown(id=f"fleet-{name}", options=[{"label": c.inert(o), "value": o} for o in options],
                                  value=value if value in options else None, placeholder=f"every {name}",
                                  clearable=True)], className="field")


def layout(**query: Any) -> html.Div:
    options = data.fleet.fleet_options(data.store())
    period = query.get("period") if query.get("period") in PERIODS else DEFAULT_PERIOD
    metric = query.get("metric") if query.get("metric") in charts.FLEET_METRICS else "eager_ratio"
    return html.Div([
        c.nav(),
        html.H2("Fleet"),
        html.P("Every run, grouped by model, backend, device and version. Shares are weighted by steps and "
               "tokens, step times by timed steps; capture and startup are the median run's. A run is "
               "compared with the earlier finished runs of its model and configuration: a figure beyond "
               "their spread is listed with that baseline named. All of it comes from rollups kept for good, "
               "so old runs stay here after their raw steps expire.", className="hint"),
        html.Div([_dropdown(name, options[name], query.get(name)) for name in FILTERS]
                 + [html.Div([html.Label("runs started", htmlFor="fleet-period"),
                              dcc.Dropdown(id="fleet-period", value=period, clearable=False,
                                           options=[{"label": label, "value": key}
                                                    for key, (label, _s) in PERIODS.items()])], className="field")],
                 className="form fleet-filters"),
        html.Div(id="fleet-summary", className="hint"),
        dcc.Interval(id="fleet-interval", interval=REFRESH_MS),
        c.section("Groups", c.grid("fleet-groups", GROUP_COLUMNS, row_id="key",
                                   row_classes={"row-alerting": "params.data.regressions > 0"}), id="fleet-groups-section"),
        c.section("Over time", html.Div([dcc.Dropdown(
            id="fleet-metric", value=metric, clearable=False,
            options=[{"label": label, "value": key} for key, (label, _u) in charts.FLEET_METRICS.items()])],
            className="fleet-metric"), c.graph("fleet-series", height=360)),
        c.section("Runs, newest first", c.grid("fleet-runs", RUN_COLUMNS, page_size=25, row_id="run_id",
                                               row_classes={"row-alerting": "params.data.regression_count > 0"}),
                  id="fleet-runs-section"),
    ], className="page")


@callback(Output("fleet-groups", "rowData"), Output("fleet-runs", "rowData"), Output("fleet-series", "figure"),
          Output("fleet-summary", "children"),
          [Input(f"fleet-{name}", "value") for name in FILTERS]
          + [Input("fleet-period", "value"), Input("fleet-metric", "value"), Input("fleet-interval", "n_intervals")])
def refresh(model, backend, device, version, period, metric, _n):
    shown = page_data(data.store(), metric or "eager_ratio", model=model, backend=backend, device=device,
                      version=version, period=period)
    return shown["groups"], shown["runs"], shown["figure"], shown["summary"]
