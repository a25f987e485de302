"""A bad webhook URL is refused when a rule is created (a 422 naming the field, never a 500),
and one already in the store breaks no reader: the audit's ``http://example.invalid:99999/x``
(ports -1 and 99999 were accepted) made ``GET /v1/alert-rules`` a 500 for readers and the
Alerts page empty, and ``http://[::1/x`` was a 500 at creation. In a real uvicorn server and
headless Chromium."""

from __future__ import annotations

import time

import pytest

from tests.browser import driver, require_chromium  # noqa: F401 (the shared fixture)
from tests.faults.conftest import http_json
from tests.live_server import serving

pytestmark = pytest.mark.browser
require_chromium()

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

TOKEN = "urls-token"
WRITER = {"Authorization": f"Bearer {TOKEN}"}
BAD = ["http://example.invalid:99999/x", "http://example.invalid:-1/x", "http://example.invalid:0/x",
       "http://[::1/x", "http://exa mple.invalid/", "ftp://example.invalid/", "http:///x"]
STORED = {"port-99999": "http://example.invalid:99999/x", "broken-ipv6": "http://[::1/x",
          "with-credentials": "https://alice:SECRETPW@hooks.example/hook?token=SECRETQ"}


@pytest.fixture(scope="module")
def env(tmp_path_factory, driver):
    """A store holding rules written before URLs were checked (straight into the table)."""
    from replayscope.app.server import create_server
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store
    from replayscope.collector.tables import alert_rules
    from tests.stores import without_builtin_rule

    tmp = tmp_path_factory.mktemp("urls")
    store = without_builtin_rule(Store.open(f"sqlite:///{tmp / 'u.db'}", upgrade=True))   # these rules alone
    with store.write() as conn:
        for name, url in STORED.items():
            conn.execute(alert_rules.insert().values(
                name=name, threshold=0.5, window_s=60, min_steps=20, stage="decode", webhook_url=url, enabled=True,
                created_at=time.time(), updated_at=time.time(), for_s=0, keep_firing_for_s=0))
    with serving(create_server(store, Settings(run_services=False, token=TOKEN))) as url:
        yield {"store": store, "url": url, "driver": driver}
    store.dispose()


@pytest.mark.parametrize("bad", BAD)
def test_a_bad_webhook_url_is_a_422_naming_the_field_and_stores_nothing(env, bad):
    status, body, _ = http_json("POST", env["url"] + "/v1/alert-rules",
                                {"name": "bad", "threshold": 0.5, "webhook_url": bad}, headers=WRITER)
    assert status == 422 and body["field"] == "webhook_url", body
    assert "must be an http(s) URL" in body["detail"] or "1..65535" in body["detail"], body
    names = [r["name"] for r in http_json("GET", env["url"] + "/v1/alert-rules")[1]]
    assert "bad" not in names


def test_rules_with_bad_stored_urls_are_listed_to_readers_without_secrets(env):
    status, rules, _ = http_json("GET", env["url"] + "/v1/alert-rules")
    assert status == 200, rules
    shown = {r["name"]: r["webhook_url"] for r in rules}
    assert shown == {"port-99999": "(not a valid URL)", "broken-ipv6": "(not a valid URL)",
                     "with-credentials": "https://hooks.example/…"}
    for rule_id in (r["id"] for r in rules):
        assert http_json("GET", f"{env['url']}/v1/alert-rules/{rule_id}")[0] == 200


def test_the_alerts_page_lists_every_rule_and_no_credentials(env):
    driver = env["driver"]
    driver.get(env["url"] + "/alerts")
    WebDriverWait(driver, 30, poll_frequency=0.2).until(
        lambda d: all(name in d.find_element(By.ID, "alerts-rules").text for name in STORED))
    table = driver.find_element(By.ID, "alerts-rules").text
    assert "https://hooks.example/…" in table and "(not a valid URL)" in table
    for secret in ("SECRETPW", "SECRETQ", "alice"):
        assert secret not in driver.page_source
