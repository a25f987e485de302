"""Every string a client can send that the dashboard shows is rendered as text.

tests/app/test_browser.py already covers a hostile run *name* on the runs and run pages;
this covers the other client-controlled strings: model, device, backend, the run_end
error, a custom eager reason, a failed capture's error, a degrade error and an alert rule's
run pattern, on the run, startup and alerts pages (headless Chromium). Phase and rule names
are closed patterns, refused at ingest.
"""

from __future__ import annotations

import time

import pytest

from tests.browser import driver, require_chromium  # noqa: F401 (the shared fixture)
from tests.live_server import serving

pytestmark = pytest.mark.browser

require_chromium()

from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

IMG = '<img src=x onerror="window.__pwned=1">'
SCRIPT = '<script>window.__pwned=1</script><b class="pwn">x</b>'
RUN = "hostile-fields"


def hostile_run(store) -> None:
    from replayscope.collector.alerting.alerts import create_rule
    from replayscope.collector.ingest import ingest_events, ingest_run

    t0 = time.time() - 60
    ingest_run(store, {"run_id": RUN, "name": "hostile fields", "source": "runner", "started_at": t0,
                       "backend": "static" + IMG, "model": "m" + SCRIPT, "device": "d" + IMG, "config": {}})
    events = [
        {"seq": 0, "ts": t0 + 0.1, "kind": "phase", "phase": "load_weights", "duration_s": 0.1},
        {"seq": 1, "ts": t0 + 0.2, "kind": "capture", "graph_bs": 8, "stage": "decode", "duration_s": 0.05,
         "pool_bytes": 1 << 20, "pool_delta_bytes": 1 << 20, "status": "failed", "error": "boom" + SCRIPT},
        {"seq": 2, "ts": t0 + 0.3, "kind": "degrade", "from": "cuda", "to": "eager", "error": "why" + IMG},
    ]
    for i in range(40):
        eager = i % 2 == 0
        events.append({"seq": 10 + i, "ts": t0 + 1 + i * 0.05, "kind": "step", "stage": "decode",
                       "mode": "eager" if eager else "graph", "raw_bs": 4, "graph_bs": None if eager else 4,
                       "num_tokens": 4, "padded_tokens": 0,
                       "reason": "custom:" + IMG if eager else None, "duration_s": 0.01})
    events.append({"seq": 100, "ts": t0 + 5, "kind": "run_end", "status": "failed", "error": "died" + SCRIPT})
    ingest_events(store, RUN, events)
    create_rule(store, {"name": "hostile rule", "run_pattern": "h*" + SCRIPT, "threshold": 0.1, "min_steps": 1})


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    from replayscope.app.server import create_server
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    store = Store.open(f"sqlite:///{tmp_path_factory.mktemp('esc') / 'rs.db'}", upgrade=True)
    hostile_run(store)
    with serving(create_server(store, Settings(run_services=False))) as base:
        yield base
    store.dispose()


def shows_as_text(driver, page_url: str, literals: list[str]) -> None:
    driver.get(page_url)
    WebDriverWait(driver, 40, poll_frequency=0.2).until(
        lambda d: all(x in d.find_element(By.TAG_NAME, "body").text for x in literals))
    time.sleep(0.3)           # let any injected handler fire if it was going to
    assert driver.execute_script("return window.__pwned === undefined")
    assert driver.find_elements(By.CSS_SELECTOR, 'img[src="x"], b.pwn') == []
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text


def test_run_page_shows_hostile_fields_error_and_custom_reason_as_text(url, driver):
    shows_as_text(driver, f"{url}/run/{RUN}", ["m" + SCRIPT, "d" + IMG, "died" + SCRIPT, IMG])


def test_startup_page_shows_hostile_phase_capture_and_degrade_errors_as_text(url, driver):
    shows_as_text(driver, f"{url}/startup/{RUN}", ["boom" + SCRIPT, "why" + IMG])


def test_alerts_page_shows_a_hostile_rule_pattern_as_text(url, driver):
    shows_as_text(driver, f"{url}/alerts", ["h*" + SCRIPT])
