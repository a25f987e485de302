"""One FastAPI app on one port: the collector's API with the Dash dashboard attached.

Dash 4 runs natively on FastAPI (``Dash(server=<FastAPI app>)``): the dashboard's routes
are added to the collector's app, and its catch-all page route is registered at startup,
after every API route, so ``/v1/...``, ``/metrics`` and ``/healthz`` keep answering.
"""

from __future__ import annotations

import gc
import importlib
import inspect
import logging
import re
from pathlib import Path
from typing import Any

import dash
from dash import ctx
from fastapi import FastAPI
from starlette.middleware import Middleware

from replayscope.app.callback_bodies import CallbackBodies
from replayscope.app.data import ServingApp
from replayscope.collector.api import create_api
from replayscope.collector.settings import Settings

log = logging.getLogger("replayscope.dashboard")
_RUN_PAGE = re.compile(r"/(?:run|startup|advisor)/([^/?#]+)")

PAGES = tuple(f"replayscope.app.pages.{name}"
              for name in ("runs", "run", "startup", "advisor", "alerts", "fleet", "not_found_404"))
ASSETS = Path(__file__).resolve().parent / "assets"


def _pages() -> list[Any]:
    """The page modules, imported once (their ``register_page`` runs at import)."""
    return [importlib.import_module(name) for name in PAGES]


def attach_dashboard(api: FastAPI, store: Any, settings: Any) -> Any:
    """Attach the Dash app to ``api``; returns the Dash instance."""
    guards = list(api.user_middleware)
    dash_app = dash.Dash(
        __name__, server=api, use_pages=True, pages_folder="", assets_folder=str(ASSETS),
        title="replayscope", suppress_callback_exceptions=True, update_title=None,
        on_error=log_callback_error,
    )
    for page in _pages():
        # register_page runs at the top of the module, before ``layout`` exists
        dash.page_registry[page.__name__]["layout"] = page.layout
        page.callback.register(dash_app)
    dash_app.layout = dash.html.Div([dash.page_container], className="app")
    # Dash adds its middleware outermost, where it would read a callback's body before the
    # collector's guards (the Host, the body's size) saw the request. In order: the guards, a
    # malformed callback request answered 400 (not Dash's 500), Dash's own, and innermost
    # each request's pages reading this app's store.
    dash_layers = [m for m in api.user_middleware if all(m is not g for g in guards)]
    api.user_middleware[:] = [*guards, Middleware(CallbackBodies, callbacks=dash_app.callback_map), *dash_layers,
                              Middleware(ServingApp, state=api.state)]
    _warm_up(dash_app)
    api.state.dash = dash_app
    return dash_app


def callback_run_id() -> str | None:
    """The run a failing callback was showing: its ``run-id`` store, else the page's address."""
    for values in (ctx.states, ctx.inputs):
        for key, value in (values or {}).items():
            if key.startswith("run-id") and isinstance(value, str):
                return value
    match = _RUN_PAGE.search((ctx.headers or {}).get("referer", ""))
    return match.group(1) if match else None


def log_callback_error(error: Exception) -> None:
    """A dashboard callback failed: log it with the run it was for; the page keeps what it
    showed (no update) instead of answering 500."""
    try:
        outputs = ", ".join(o["id"] + "." + o["property"] for o in (ctx.outputs_list or []) if isinstance(o, dict))
        run_id = callback_run_id()
    except Exception:       # the context itself may be what failed
        outputs, run_id = "?", None
    log.error("dashboard callback %s failed%s: %s", outputs or "?", f" for run {run_id}" if run_id else "",
              error, exc_info=error)


def _warm_up(dash_app: Any) -> None:
    """Run Dash's first-request setup now rather than on the first request.

    Its middleware runs the setup (which registers the pages' router and title callback)
    only for ``/`` and ``/_dash-*`` requests; a first visit straight to ``/run/<id>`` would
    get a page without the title callback's script and log a TypeError in the browser.
    """
    for hook in list(dash_app.backend._before_request_funcs):  # noqa: SLF001 (Dash has no public call)
        if not inspect.iscoroutinefunction(hook):
            hook()


def create_server(store: Any, settings: Any = None, dashboard: bool = True) -> FastAPI:
    """The collector's FastAPI app, with the dashboard on the same app unless told not to."""
    settings = settings or Settings()
    api = create_api(store, settings)
    if dashboard:
        attach_dashboard(api, store, settings)
    # What is loaded by now (Dash, plotly, the pages) lives as long as the server: keep it out
    # of the garbage collector's full passes, which otherwise cost a page of thousands of
    # runs (the fleet) more than its queries.
    gc.collect()
    gc.freeze()
    return api
