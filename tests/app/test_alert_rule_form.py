"""The Alerts page's rule form and the API validate the same way: the same bad values are
refused with the same message (the one check of replayscope.collector.alert_rule), and the form starts
at the defaults the API documents."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from replayscope.collector.models import queries
from replayscope.collector.schemas import AlertRuleIn
from replayscope.collector.settings import Settings
from replayscope.collector.store import Store
from tests.app.test_dashboard_auth import RULE_FORM, callback_request
from tests.live_server import LOOPBACK_BASE
from tests.stores import without_builtin_rule

# (form field, API field, a bad value): each refused by both, with one message.
BAD = [
    ("rule-name.value", "name", "-starts with a dash"),
    ("rule-name.value", "name", "x" * 101),
    ("rule-threshold.value", "threshold", 1.5),
    ("rule-threshold.value", "threshold", None),
    ("rule-window.value", "window_s", 0),
    ("rule-window.value", "window_s", 7 * 24 * 3600 + 1),
    ("rule-window.value", "window_s", 2.5),
    ("rule-min-steps.value", "min_steps", 0),
    ("rule-min-steps.value", "min_steps", 2**31),
    ("rule-for.value", "for_s", -1),
    ("rule-keep.value", "keep_firing_for_s", 1.5),
    ("rule-resolve.value", "resolve_threshold", -0.1),
    ("rule-resolve.value", "resolve_threshold", 0.9),          # above the threshold
    ("rule-pattern.value", "run_pattern", "x" * 201),
    ("rule-webhook.value", "webhook_url", "ftp://hooks.example/x"),
    ("rule-webhook.value", "webhook_url", "https://hooks.example/" + "x" * 2000),
    ("rule-stage.value", "stage", "sideways"),
    ("rule-kind.value", "kind", "anomaly"),
]
FORM_TO_RULE = {"rule-name.value": ("name", "form"), "rule-kind.value": ("kind", "eager_ratio"),
                "rule-threshold.value": ("threshold", 0.2), "rule-window.value": ("window_s", 300),
                "rule-min-steps.value": ("min_steps", 100), "rule-for.value": ("for_s", 60),
                "rule-keep.value": ("keep_firing_for_s", 300), "rule-resolve.value": ("resolve_threshold", None),
                "rule-stage.value": ("stage", "decode"), "rule-pattern.value": ("run_pattern", None),
                "rule-webhook.value": ("webhook_url", None)}


@pytest.fixture
def site(tmp_path):
    from replayscope.app.server import create_server

    store = without_builtin_rule(Store.open(f"sqlite:///{tmp_path}/f.db", upgrade=True))
    app = create_server(store, Settings(run_services=False))          # no token: anyone writes
    with TestClient(app, base_url=LOOPBACK_BASE) as client:
        client.get("/alerts")
        yield client, store, app.state.dash
    store.dispose()


def _page_message(client, dash_app, form: dict) -> str:
    body = callback_request(dash_app, "alerts-rules.rowData", "rule-create.n_clicks", form)
    response = client.post("/_dash-update-component", json=body)
    assert response.status_code == 200
    outputs = response.json()["response"]
    return outputs["rule-message"]["children"]


@pytest.mark.parametrize("form_field, field, bad", BAD, ids=[f"{f}={str(b)[:12]}" for _, f, b in BAD])
def test_the_page_and_the_api_refuse_the_same_value_with_the_same_message(site, form_field, field, bad):
    client, store, dash_app = site
    rule = {name: value for name, value in FORM_TO_RULE.values()}
    form = {**RULE_FORM, "rule-name.value": "form", "rule-webhook.value": "", "rule-pattern.value": "",
            form_field: bad}
    answer = client.post("/v1/alert-rules", json={**rule, field: bad})
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == field
    assert _page_message(client, dash_app, form) == f"Not saved: {answer.json()['detail']}"
    assert queries.alert_rules(store) == []                 # neither wrote anything


def test_the_page_and_the_api_take_the_same_good_rule(site):
    client, store, dash_app = site
    form = {**RULE_FORM, "rule-name.value": "form", "rule-webhook.value": "", "rule-pattern.value": ""}
    assert _page_message(client, dash_app, form) == "Created rule form."
    rule = {name: value for name, value in FORM_TO_RULE.values()}
    assert client.post("/v1/alert-rules", json={**rule, "name": "api"}).status_code == 201
    made = {r.name: r.as_dict() for r in queries.alert_rules(store)}
    assert {k: v for k, v in made["form"].items() if k not in ("id", "name", "created_at", "updated_at")} == \
        {k: v for k, v in made["api"].items() if k not in ("id", "name", "created_at", "updated_at")}


def test_the_form_starts_at_the_defaults_the_api_documents(site):
    from replayscope.app.pages import alerts as page

    documented = AlertRuleIn.model_json_schema()["properties"]
    inputs = {"rule-kind": "kind", "rule-window": "window_s", "rule-min-steps": "min_steps", "rule-for": "for_s",
              "rule-keep": "keep_firing_for_s", "rule-resolve": "resolve_threshold", "rule-stage": "stage"}
    found = {}

    def walk(node):
        if getattr(node, "id", None) in inputs:
            found[inputs[node.id]] = getattr(node, "value", None)
        children = getattr(node, "children", None)
        for child in children if isinstance(children, (list, tuple)) else [children] if children is not None else []:
            walk(child)

    walk(page.layout())
    assert set(found) == set(inputs.values())
    for name, value in found.items():
        assert value == documented[name]["default"], name
