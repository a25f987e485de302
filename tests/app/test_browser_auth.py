"""In headless Chromium, with REPLAYSCOPE_TOKEN set: the Alerts page is read-only (the form
changes nothing, webhook URLs are shown as scheme and host) until the token is given once;
then the page keeps a signed HttpOnly session cookie, scripts cannot read it, and rules
can be created."""

from __future__ import annotations

import pytest

from tests.browser import driver, require_chromium  # noqa: F401 (the shared fixture)
from tests.live_server import serving

pytestmark = pytest.mark.browser
require_chromium()

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

TOKEN = "browser-token"
SLACK = "https://hooks.slack.example/services/T000/B000/XXXXSECRETXXXX"


@pytest.fixture(scope="module")
def env(tmp_path_factory, driver):
    from replayscope.app.server import create_server
    from replayscope.collector.alerting import alerts
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store
    from tests.stores import without_builtin_rule

    tmp = tmp_path_factory.mktemp("auth")
    store = without_builtin_rule(Store.open(f"sqlite:///{tmp / 'a.db'}", upgrade=True))   # its rules alone
    alerts.create_rule(store, {"name": "slack-rule", "threshold": 0.3, "webhook_url": SLACK})
    with serving(create_server(store, Settings(run_services=False, token=TOKEN))) as url:
        yield {"store": store, "url": url, "driver": driver}
    store.dispose()


def wait(driver, condition, timeout=30):
    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(lambda d: condition(d))


def message(driver) -> str:
    return driver.find_element(By.ID, "rule-message").text


def test_without_the_token_the_alerts_page_changes_nothing_and_hides_webhook_urls(env):
    from replayscope.collector.models import queries

    driver = env["driver"]
    driver.get(env["url"] + "/alerts")
    wait(driver, lambda d: "Read-only" in d.find_element(By.ID, "auth-status").text)
    wait(driver, lambda d: "slack-rule" in d.find_element(By.ID, "alerts-rules").text)
    table = driver.find_element(By.ID, "alerts-rules").text
    assert "https://hooks.slack.example/" in table and "SECRET" not in driver.page_source
    driver.find_element(By.ID, "rule-name").send_keys("forged")
    driver.find_element(By.ID, "rule-create").click()
    wait(driver, lambda d: "needs the collector's token" in message(d))
    assert [r.name for r in queries.alert_rules(env["store"])] == ["slack-rule"]

    driver.find_element(By.CSS_SELECTOR, "#alerts-rules .ag-center-cols-container [col-id=name]").click()
    wait(driver, lambda d: d.find_element(By.ID, "rule-name").get_attribute("value") == "slack-rule")
    assert "SECRET" not in driver.find_element(By.ID, "rule-webhook").get_attribute("value")
    driver.find_element(By.ID, "rule-delete").click()
    wait(driver, lambda d: "needs the collector's token" in message(d))
    assert [r.name for r in queries.alert_rules(env["store"])] == ["slack-rule"]


def test_after_giving_the_token_once_rules_change_and_the_session_is_http_only(env):
    from replayscope.collector.models import queries
    from replayscope.collector.api.auth import SESSION_COOKIE

    driver = env["driver"]
    driver.get(env["url"] + "/alerts")
    box = wait(driver, lambda d: d.find_elements(By.ID, "auth-token"))[0]
    box.send_keys("not-it")
    driver.find_element(By.ID, "auth-sign-in").click()
    wait(driver, lambda d: "not the collector's token" in d.find_element(By.ID, "auth-status").text)
    box.send_keys(TOKEN)
    driver.find_element(By.ID, "auth-sign-in").click()
    wait(driver, lambda d: "Signed in" in d.find_element(By.ID, "auth-status").text)
    [cookie] = [c for c in driver.get_cookies() if c["name"] == SESSION_COOKIE]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and TOKEN not in cookie["value"]
    assert SESSION_COOKIE not in driver.execute_script("return document.cookie")

    driver.get(env["url"] + "/alerts")              # the session outlives the page
    wait(driver, lambda d: "Signed in" in d.find_element(By.ID, "auth-status").text)
    wait(driver, lambda d: SLACK in d.find_element(By.ID, "alerts-rules").text)
    name = driver.find_element(By.ID, "rule-name")
    name.send_keys("made-in-chromium")
    driver.find_element(By.ID, "rule-create").click()
    wait(driver, lambda d: "Created rule made-in-chromium" in message(d))
    assert sorted(r.name for r in queries.alert_rules(env["store"])) == ["made-in-chromium", "slack-rule"]

    driver.find_element(By.ID, "auth-sign-out").click()
    wait(driver, lambda d: "Read-only" in d.find_element(By.ID, "auth-status").text)
    assert not [c for c in driver.get_cookies() if c["name"] == SESSION_COOKIE and c["value"]]
