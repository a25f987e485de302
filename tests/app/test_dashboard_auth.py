"""The dashboard's writes need the token too: a Dash callback posted straight to
``/_dash-update-component`` without the session cookie changes nothing; signing in once
with the token gives a signed, HttpOnly cookie, and with it the same callback writes.
(The same in Chromium: tests/app/test_browser_auth.py.)"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from replayscope.collector.alerting import alerts
from replayscope.collector.models import queries
from replayscope.collector.api.auth import SESSION_COOKIE
from replayscope.collector.settings import Settings
from replayscope.collector.store import Store
from tests.live_server import LOOPBACK_BASE
from tests.stores import without_builtin_rule

TOKEN = "dash-token"
SLACK = "https://hooks.slack.example/services/T000/B000/XXXXSECRETXXXX"


@pytest.fixture
def dashboard(tmp_path):
    from replayscope.app.server import create_server

    store = without_builtin_rule(Store.open(f"sqlite:///{tmp_path}/d.db", upgrade=True))   # only the tests' rules
    app = create_server(store, Settings(run_services=False, token=TOKEN))
    with TestClient(app, base_url=LOOPBACK_BASE) as client:
        client.get("/alerts")
        yield client, store, app.state.dash
    store.dispose()


def callback_request(dash_app, output_part: str, trigger: str, values: dict) -> dict:
    """The body Dash's renderer posts for the callback whose outputs include ``output_part``."""
    key = next(k for k in dash_app.callback_map if output_part in k)
    spec = dash_app.callback_map[key]

    def props(items):
        return [{"id": i["id"], "property": i["property"], "value": values.get(f"{i['id']}.{i['property']}")}
                for i in items]

    outputs = [{"id": part.split(".")[0], "property": part.split(".")[1]}
               for part in key.strip(".").split("...")]
    return {"output": key, "outputs": outputs, "inputs": props(spec["inputs"]), "state": props(spec["state"]),
            "changedPropIds": [trigger]}


RULE_FORM = {"rule-name.value": "forged", "rule-kind.value": "eager_ratio", "rule-threshold.value": 0.2,
             "rule-window.value": 300, "rule-min-steps.value": 100, "rule-for.value": 60, "rule-keep.value": 300, "rule-resolve.value": None,
             "rule-stage.value": "decode", "rule-pattern.value": "", "rule-webhook.value": "https://hooks.example/forged",
             "rule-enabled.value": ["on"], "rule-create.n_clicks": 1}


def test_a_rule_callback_posted_without_the_token_changes_nothing(dashboard):
    client, store, dash_app = dashboard
    body = callback_request(dash_app, "alerts-rules.rowData", "rule-create.n_clicks", RULE_FORM)
    response = client.post("/_dash-update-component", json=body)
    assert response.status_code == 200
    assert "changing rules needs the collector's token" in response.text
    assert queries.alert_rules(store) == []


def test_delete_and_edit_callbacks_without_the_token_change_nothing(dashboard):
    client, store, dash_app = dashboard
    rule = alerts.create_rule(store, {"name": "kept", "threshold": 0.3, "webhook_url": SLACK})
    selected = {"alerts-rules.selectedRows": [{"id": rule.id}]}
    for trigger in ("rule-delete.n_clicks", "rule-update.n_clicks"):
        body = callback_request(dash_app, "alerts-rules.rowData", trigger, {**RULE_FORM, **selected,
                                                                            trigger: 1})
        response = client.post("/_dash-update-component", json=body)
        assert response.status_code == 200 and "SECRET" not in response.text
    assert queries.alert_rules(store) == [alerts.get_rule(store, rule.id)]
    assert alerts.get_rule(store, rule.id).name == "kept"


def test_signing_in_once_gives_an_http_only_session_that_lets_the_callback_write(dashboard):
    client, store, dash_app = dashboard
    wrong = callback_request(dash_app, "auth-status.children", "auth-sign-in.n_clicks",
                             {"auth-token.value": "guess", "auth-sign-in.n_clicks": 1})
    assert SESSION_COOKIE not in client.post("/_dash-update-component", json=wrong).cookies
    right = callback_request(dash_app, "auth-status.children", "auth-sign-in.n_clicks",
                             {"auth-token.value": TOKEN, "auth-sign-in.n_clicks": 1})
    response = client.post("/_dash-update-component", json=right)
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(SESSION_COOKIE + "=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert TOKEN not in cookie
    body = callback_request(dash_app, "alerts-rules.rowData", "rule-create.n_clicks", RULE_FORM)
    assert client.post("/_dash-update-component", json=body).status_code == 200   # the client keeps the cookie
    assert [r.name for r in queries.alert_rules(store)] == ["forged"]


def test_a_failing_dashboard_callback_is_logged_with_its_run_id(dashboard, caplog, monkeypatch):
    client, store, dash_app = dashboard
    from replayscope.app.pages import run as run_page

    def broken(*_args, **_kwargs):
        raise ValueError("a value the page cannot draw")

    monkeypatch.setattr(run_page, "page_data", broken)
    body = callback_request(dash_app, "run-steps.children", "run-interval.n_intervals",
                            {"run-id.data": "run-42", "run-interval.n_intervals": 1})
    with caplog.at_level("ERROR", logger="replayscope.dashboard"):
        response = client.post("/_dash-update-component", json=body)
    assert response.status_code in (200, 204)
    [record] = [r for r in caplog.records if r.name == "replayscope.dashboard"]
    assert "for run run-42" in record.getMessage() and "a value the page cannot draw" in record.getMessage()


def test_two_dashboards_in_one_process_each_write_to_their_own_store(tmp_path):
    """A page's callback reads and writes the store of the app its request came to, not the
    last dashboard made in the process (which ``dash.get_app()`` alone would name)."""
    from replayscope.app.server import create_server

    first = without_builtin_rule(Store.open(f"sqlite:///{tmp_path}/first.db", upgrade=True))
    second = without_builtin_rule(Store.open(f"sqlite:///{tmp_path}/second.db", upgrade=True))
    first_app = create_server(first, Settings(run_services=False))
    create_server(second, Settings(run_services=False))          # made last
    with TestClient(first_app, base_url=LOOPBACK_BASE) as client:
        client.get("/alerts")
        body = callback_request(first_app.state.dash, "alerts-rules.rowData", "rule-create.n_clicks",
                                {**RULE_FORM, "rule-name.value": "first only"})
        response = client.post("/_dash-update-component", json=body)
    assert response.status_code == 200 and "first only" in response.text
    assert [r.name for r in queries.alert_rules(first)] == ["first only"]
    assert queries.alert_rules(second) == []
    first.dispose()
    second.dispose()
