"""The dashboard in headless Debian Chromium, against a store filled by a real runner run.

Each page loads, draws its charts, shows the query layer's numbers and logs no SEVERE
console error; the alert form rejects bad input with a message; a live run's page
picks up new steps without a reload; a hostile run name renders as text. Screenshots
of the pages (from the H200 runs in docs/data) are taken by test_browser_gpu_runs.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.app import synthetic
from tests.browser import driver, require_chromium  # noqa: F401 (the shared fixture)
from tests.live_server import serving

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "docs" / "screenshots"
XSS_NAME = "<script>alert(1)</script><b>x</b>"

require_chromium()

from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A store with a real runner run (static backend), a baseline, a live run and a
    hostile name, served by uvicorn in a thread."""
    pytest.importorskip("torch", reason="the store holds a real `replayscope run`'s run")
    from tests.stores import ingest_events_file, without_builtin_rule
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store
    from replayscope.app.server import create_server

    tmp = tmp_path_factory.mktemp("browser")
    events = tmp / "real.jsonl"
    subprocess.run([sys.executable, "-m", "replayscope", "run", "--backend", "static", "--preset", "tiny",
                    "--workload", "mixed", "--steps", "300", "--events", str(events), "--quiet",
                    "--name", "static-tiny-mixed", "--run-id", "real-run"],
                   cwd=REPO, check=True, timeout=600)
    store = without_builtin_rule(Store.open(f"sqlite:///{tmp / 'rs.db'}", upgrade=True))   # the rules it makes alone
    ingest_events_file(store, events)
    synthetic.fill(store, "baseline-run", name="baseline", steps=200, slow_size=16, failed_size=32)
    synthetic.fill(store, "xss-run", name=XSS_NAME, steps=50)
    live = synthetic.run_record("live-run", "live", started_at=time.time() - 30)
    from replayscope.collector.ingest import ingest_events, ingest_run
    ingest_run(store, live)
    first = synthetic.startup_events(live["started_at"])
    first += synthetic.step_events(first[-1]["ts"] + 0.01, 100, seq0=len(first) + 10, seed=1)
    ingest_events(store, "live-run", first)

    with serving(create_server(store, Settings(run_services=False))) as url:
        yield {"store": store, "url": url, "live_next_seq": 100_000, "live": live}
    store.dispose()


def wait(driver, condition, timeout=30):
    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(lambda d: condition(d))


def text_of(driver, element_id, placeholder="…", timeout=30):
    """The text of #element_id once a callback has filled it."""
    def filled(d):
        found = d.find_elements(By.ID, element_id)
        return found and found[0].text not in ("", placeholder) and found[0].text
    return wait(driver, filled, timeout)


def open_page(driver, url, charts=0):
    driver.get(url)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".page"))
    if charts:
        wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg")) >= charts)


def severe_errors(driver):
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def screenshot(driver, name, room: int = 40):
    """The whole page at 1280 px wide into docs/screenshots/ when REPLAYSCOPE_SCREENSHOTS=1
    (``room``: pixels under the page's height, for a last chart's axis)."""
    if os.environ.get("REPLAYSCOPE_SCREENSHOTS") != "1":
        return
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    size = driver.get_window_size()
    driver.execute_script("window.scrollTo(0, 0)")
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(NARROW[0], min(max(NARROW[1], height + room), 6000))
    time.sleep(0.8)                          # let plotly re-lay out at the new size
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
    driver.set_window_size(size["width"], size["height"])


NARROW = (1280, 800)
# Every page, the number of charts it draws and its key elements (which must be on screen).
PAGES = {
    "runs": ("/", 0, "#runs-table .ag-header-cell, #runs-table .ag-row .ag-cell"),
    "run": ("/run/real-run", 7, ".stat, .js-plotly-plot"),
    "startup": ("/startup/real-run", 3, ".stat, .js-plotly-plot"),
    "advisor": ("/advisor/real-run", 1, "#advisor-table .ag-header-cell, .js-plotly-plot, .flag-text"),
    "alerts": ("/alerts", 0, "#alerts-rules .ag-header-cell, #alerts-history .ag-header-cell, #rule-create"),
    "fleet": ("/fleet", 1, "#fleet-groups .ag-header-cell, #fleet-runs .ag-header-cell, .js-plotly-plot"),
}
BROKEN_IMAGES = "return Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)"
RESOURCE_STATUSES = "return performance.getEntriesByType('resource').map(e => [e.name, e.responseStatus])"
OFF_SCREEN = """
const width = document.documentElement.clientWidth;
return Array.from(document.querySelectorAll(arguments[0]))
  .filter(e => { const r = e.getBoundingClientRect(); return r.width === 0 || r.left < 0 || r.right > width + 0.5; })
  .map(e => (e.id || e.getAttribute('col-id') || e.className) + ' ' + Math.round(e.getBoundingClientRect().right));
"""
GRIDS_SCROLLED_SIDEWAYS = """
return Array.from(document.querySelectorAll('.ag-root-wrapper'))
  .filter(g => g.querySelector('.ag-center-cols-container').scrollWidth
               > g.querySelector('.ag-center-cols-viewport').clientWidth + 1)
  .map(g => g.closest('[id]').id);
"""


def grid_row(driver, grid_id, row_id):
    """{column id: shown text} of one row of an AG Grid table."""
    row = driver.find_element(By.CSS_SELECTOR, f"#{grid_id} .ag-center-cols-container [row-id='{row_id}']")
    return {cell.get_attribute("col-id"): cell.text for cell in row.find_elements(By.CSS_SELECTOR, ".ag-cell")}


@pytest.fixture
def narrow(driver):
    driver.set_window_size(*NARROW)
    yield driver
    driver.set_window_size(1400, 1000)


@pytest.mark.parametrize("page", list(PAGES))
def test_every_page_fits_1280_px_and_requests_no_missing_asset(env, narrow, page):
    path, charts, key_elements = PAGES[page]
    open_page(narrow, env["url"] + path, charts=charts)
    wait(narrow, lambda d: d.find_elements(By.CSS_SELECTOR, key_elements))
    if page == "runs":
        wait(narrow, lambda d: d.find_elements(By.CSS_SELECTOR, "#runs-table .ag-row"))
    time.sleep(0.5)                                   # grids and charts settle on the width
    assert narrow.execute_script("return window.innerWidth") == NARROW[0]
    assert narrow.execute_script("return document.documentElement.scrollWidth") <= \
        narrow.execute_script("return document.documentElement.clientWidth"), "the page scrolls sideways"
    assert narrow.execute_script(OFF_SCREEN, key_elements) == []
    assert narrow.execute_script(GRIDS_SCROLLED_SIDEWAYS) == []
    assert narrow.execute_script(BROKEN_IMAGES) == []
    statuses = narrow.execute_script(RESOURCE_STATUSES)
    assert statuses and all(isinstance(status, int) for _, status in statuses)   # the browser reports them
    assert [(name, status) for name, status in statuses if status >= 400] == []
    log = narrow.get_log("browser")
    assert [e for e in log if "Failed to load resource" in e["message"] or e["level"] == "SEVERE"] == []
    assert not narrow.find_elements(By.CSS_SELECTOR, ".dash-spreadsheet, .dash-table-container")  # no dash_table


def test_runs_page_lists_every_run_with_the_query_layers_numbers(env, driver):
    from replayscope.app import components as c
    from replayscope.collector.models import queries

    open_page(driver, env["url"] + "/")
    wait(driver, lambda d: "real-run" in d.find_element(By.ID, "runs-table").text)
    real = next(r for r in queries.list_runs(env["store"]) if r["run_id"] == "real-run")
    cells = grid_row(driver, "runs-table", "real-run")
    assert cells["steps"] == c.count(real["steps"])
    assert cells["eager_pct"] == c.pct(real["decode_eager_ratio"])     # the decode stages' share
    assert cells["padded_pct"] == c.pct(real["decode_padded_ratio"])
    assert cells["backend"] == "static" and cells["source"] == "runner"
    assert len(queries.list_runs(env["store"])) == 4
    assert driver.find_element(By.ID, "runs-count").text == "4 runs"
    assert severe_errors(driver) == []


def test_a_run_name_in_the_runs_table_links_to_its_page(env, driver):
    open_page(driver, env["url"] + "/")
    wait(driver, lambda d: "real-run" in d.find_element(By.ID, "runs-table").text)
    marker = driver.execute_script("window.__no_reload = 1; return window.__no_reload")
    link = driver.find_element(By.CSS_SELECTOR, "#runs-table [row-id='real-run'] [col-id=name] a")
    assert link.get_attribute("href") == env["url"] + "/run/real-run"
    link.click()
    wait(driver, lambda d: d.find_elements(By.ID, "run-name") and d.find_element(By.ID, "run-name").text)
    assert driver.find_element(By.ID, "run-name").text == "static-tiny-mixed"
    assert driver.execute_script("return window.__no_reload") == marker    # navigated inside the app
    assert severe_errors(driver) == []


def test_run_page_shows_charts_numbers_and_explained_reasons(env, driver):
    from replayscope.app import components as c
    from replayscope.collector.models import queries

    open_page(driver, env["url"] + "/run/real-run", charts=7)
    summary = queries.run_summary(env["store"], "real-run")
    assert text_of(driver, "run-steps") == c.count(summary["steps"])
    assert text_of(driver, "run-eager") == c.pct(summary["decode_eager_ratio"])     # the decode stages' share
    assert text_of(driver, "run-padded") == c.pct(summary["decode_padded_ratio"])
    assert text_of(driver, "run-capture") == c.seconds(summary["capture_total_s"])
    assert text_of(driver, "run-status") == "finished"
    assert len(driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")) == 7
    reasons = [r["reason"] for r in queries.reason_breakdown(env["store"], "real-run")]
    wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".card.explanation")) == len(reasons))
    shown = [e.get_attribute("data-reason") for e in driver.find_elements(By.CSS_SELECTOR, ".card.explanation")]
    assert shown == reasons
    assert "not refreshing" in driver.find_element(By.ID, "run-live").text
    assert severe_errors(driver) == []


def test_startup_page_compares_with_a_baseline_and_diagnoses(env, driver):
    from replayscope.app import components as c
    from replayscope.collector.models import queries
    open_page(driver, env["url"] + "/startup/real-run", charts=3)
    store = env["store"]
    # wall time: from the run's start to the end of its last phase or capture (a runner logs no ready line)
    spans = [(r["start_ts"] if r.get("start_ts") is not None else r["ts"] - (r["duration_s"] or 0.0), r["ts"])
             for r in queries.phases(store, "real-run") + queries.captures(store, "real-run")]
    started_at = queries.run_summary(store, "real-run")["started_at"]
    expected = max(e for _, e in spans) - min([started_at] + [s for s, _ in spans])
    assert text_of(driver, "startup-total") == c.seconds(expected)
    assert text_of(driver, "startup-captures") == c.count(len(queries.captures(store, "real-run")))
    driver.find_element(By.ID, "startup-baseline").click()
    option = wait(driver, lambda d: [o for o in d.find_elements(By.CSS_SELECTOR, "[role=option]")
                                     if "(baseline-run)" in o.text])
    option[0].click()
    wait(driver, lambda d: "baseline" in d.find_element(By.ID, "startup-baseline-summary").text)
    rows = driver.find_elements(By.CSS_SELECTOR, "#startup-diff-table .ag-cell[col-id=item]")
    assert any("phase load_weights" == r.text for r in rows)
    assert any(r.text.startswith("capture bs") for r in rows)
    assert severe_errors(driver) == []


def test_startup_page_ranks_failures_first(env, driver):
    open_page(driver, env["url"] + "/startup/baseline-run", charts=3)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".card.finding"))
    cards = driver.find_elements(By.CSS_SELECTOR, ".card.finding")
    causes = [e.get_attribute("data-cause") for e in cards]
    assert causes[0] == "failure" and cards[0].get_attribute("data-failure-class") == "oom"
    assert "slow_size" in causes
    assert "CUDA out of memory" in driver.find_element(By.ID, "startup-failures").text


def test_alert_form_rejects_bad_input_then_creates_a_rule(env, driver):
    open_page(driver, env["url"] + "/alerts")
    wait(driver, lambda d: d.find_elements(By.ID, "rule-create"))
    name = driver.find_element(By.ID, "rule-name")
    name.send_keys("eager-high")
    threshold = driver.find_element(By.ID, "rule-threshold")
    threshold.clear()
    threshold.send_keys("1.5")
    driver.find_element(By.ID, "rule-create").click()
    message = text_of(driver, "rule-message", placeholder="")
    assert message.startswith("Not saved: threshold") and "0..1" in message
    from replayscope.collector.models import queries
    assert queries.alert_rules(env["store"]) == []

    threshold.clear()
    threshold.send_keys("0.3")
    driver.find_element(By.ID, "rule-create").click()
    wait(driver, lambda d: "Created rule eager-high" in d.find_element(By.ID, "rule-message").text)
    wait(driver, lambda d: "eager-high" in d.find_element(By.ID, "alerts-rules").text)
    [rule] = queries.alert_rules(env["store"])
    assert rule.threshold == 0.3 and rule.window_s == 300
    assert severe_errors(driver) == []


def test_selecting_a_rule_loads_it_into_the_form(env, driver):
    from replayscope.collector.models import queries
    from replayscope.collector.alerting.alerts import create_rule

    rule = create_rule(env["store"], {"name": "to-edit", "threshold": 0.45, "window_s": 120, "min_steps": 7})
    open_page(driver, env["url"] + "/alerts")
    cell = wait(driver, lambda d: d.find_elements(
        By.CSS_SELECTOR, f"#alerts-rules .ag-center-cols-container [row-id='{rule.id}'] [col-id=name]"))
    cell[0].click()
    wait(driver, lambda d: d.find_element(By.ID, "rule-name").get_attribute("value") == "to-edit")
    assert driver.find_element(By.ID, "rule-threshold").get_attribute("value") == "0.45"
    assert driver.find_element(By.ID, "rule-window").get_attribute("value") == "120"
    driver.find_element(By.ID, "rule-delete").click()
    wait(driver, lambda d: "Deleted the rule" in d.find_element(By.ID, "rule-message").text)
    assert all(r.name != "to-edit" for r in queries.alert_rules(env["store"]))
    assert severe_errors(driver) == []


def test_live_run_page_shows_new_steps_without_reload(env, driver):
    from replayscope.app import components as c
    from replayscope.collector.models import queries
    from replayscope.collector.ingest import ingest_events

    open_page(driver, env["url"] + "/run/live-run", charts=7)
    before = queries.run_summary(env["store"], "live-run")["steps"]
    assert text_of(driver, "run-steps") == c.count(before)
    marker = driver.execute_script("window.__no_reload = 1; return window.__no_reload")
    t = queries.run_summary(env["store"], "live-run")["last_event_ts"] + 0.01
    ingest_events(env["store"], "live-run", synthetic.step_events(t, 250, seq0=env["live_next_seq"], seed=7))
    after = queries.run_summary(env["store"], "live-run")["steps"]
    assert after == before + 250
    wait(driver, lambda d: d.find_element(By.ID, "run-steps").text == c.count(after), timeout=20)
    assert driver.execute_script("return window.__no_reload") == marker
    assert "live" in driver.find_element(By.ID, "run-live").text
    assert severe_errors(driver) == []


def test_a_hostile_run_name_renders_as_text(env, driver):
    open_page(driver, env["url"] + "/run/xss-run", charts=1)
    heading = wait(driver, lambda d: d.find_element(By.ID, "run-name"))
    assert heading.text == XSS_NAME
    assert heading.find_elements(By.TAG_NAME, "b") == []
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text
    open_page(driver, env["url"] + "/")
    wait(driver, lambda d: XSS_NAME in d.find_element(By.ID, "runs-table").text)
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text
    assert severe_errors(driver) == []
