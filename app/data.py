"""The pages' one way to the collector: the store, settings and delivery of the app serving the
request, the collector's read functions the pages call, and the rule writes the API makes.

Every page imports this module (and no collector module): what the collector is made of can
move without the pages following. The store is the serving app's (``create_api`` puts it on
``app.state``): ``ServingApp``, a middleware on that app, names it for each request, so two
dashboards in one process (tests, an embedding server) each read their own store. Outside a
request (the page modules' warm-up) it is the app ``dash.get_app()`` names.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import dash
from dash import ctx

from replayscope.collector.api import auth
from replayscope.collector import alert_rule                                                    # noqa: F401
from replayscope.collector.alerting import alerts
from replayscope.collector.alerting.eager_ratio import judged_ratios                                 # noqa: F401
from replayscope.collector.alerting.rule_kind import watches                                         # noqa: F401
from replayscope.collector.analysis import fleet, regressions                                        # noqa: F401
from replayscope.collector.analysis.advisor.report import advise                                     # noqa: F401
from replayscope.collector.analysis.advisor.stored import run_facts                                  # noqa: F401
from replayscope.collector.analysis.diagnosis import diagnose_run                                     # noqa: F401
from replayscope.collector.analysis.explanations import STAND_IN_NOTE, cost_sentence, explain_run, is_stand_in  # noqa: F401
from replayscope.collector.analysis.reasons import size_in_tokens, size_namer                        # noqa: F401
from replayscope.collector.analysis.regressions import METRICS as REGRESSION_METRICS                 # noqa: F401
from replayscope.collector.importers.parser import stated_figures                                    # noqa: F401
from replayscope.collector.importers.stages import STAGE_NOTES                                       # noqa: F401
from replayscope.collector.models import queries                                                     # noqa: F401
from replayscope.contract.errors import TooManyRequests

InvalidRule, UnknownRule = alerts.InvalidRule, alerts.UnknownRule


_serving_state: ContextVar[Any] = ContextVar("replayscope_serving_state")


class ServingApp:
    """ASGI middleware: the state of the app a request came to, for the callbacks and
    layouts that serve it (they run in the request's context)."""

    def __init__(self, app: Any, state: Any) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        token = _serving_state.set(self.state)
        try:
            await self.app(scope, receive, send)
        finally:
            _serving_state.reset(token)


def _state() -> Any:
    state = _serving_state.get(None)
    return state if state is not None else dash.get_app().server.state


def store() -> Any:
    """The store of the collector this dashboard is served with."""
    return _state().store


def settings() -> Any:
    """The collector's settings (the token, where alerts go)."""
    return _state().settings


def token() -> str | None:
    return getattr(settings(), "token", None)


def wrong_tokens() -> Any:
    """The API's limit on wrong tokens per client (``replayscope.collector.api.throttle``): one for both."""
    return getattr(_state(), "wrong_tokens", None)


def request_is_writer() -> bool:
    """Whether the callback's request may change the store: the session cookie or the bearer
    token, checked as the API checks its writes (``replayscope.collector.api.auth.is_writer``)."""
    try:
        return auth.is_writer(ctx.headers or {}, ctx.cookies or {}, token(), client=ctx.remote or None,
                              limiter=wrong_tokens())
    except TooManyRequests:
        return False


# -- rule writes, as the API's routes make them (POST, PUT, DELETE /v1/alert-rules) ----------

def _delivery() -> Any:
    return _state().delivery


def create_rule(data: dict[str, Any]) -> alert_rule.AlertRule:
    return alerts.create_rule(store(), data, policy=_delivery().policy)


def replace_rule(rule_id: int, data: dict[str, Any]) -> alert_rule.AlertRule:
    """Replace a rule from the form; a webhook URL the form was loaded with redacted keeps the
    real one (a reader of the form never saw it)."""
    current = alerts.get_rule(store(), rule_id)
    if data.get("webhook_url") and data["webhook_url"] == alerts.public_rule(current, False).webhook_url:
        data = {**data, "webhook_url": current.webhook_url}
    return alerts.update_rule(store(), rule_id, data, partial=False, delivery=_delivery())


def delete_rule(rule_id: int) -> None:
    alerts.delete_rule(store(), rule_id, delivery=_delivery())


def rule_for_form(rule_id: int) -> alert_rule.AlertRule:
    """A rule as the reader may see it (webhook URLs redacted unless a writer asks)."""
    return alerts.public_rule(alerts.get_rule(store(), rule_id), request_is_writer())
