"""The fleet page in headless Chromium: groups and runs with the fleet read model's numbers,
a regressed run flagged with its baseline named, filters (dropdown and link), the run page's
comparison and detail notes, and no console error."""

from __future__ import annotations

import time

import pytest

from tests.app.test_browser import open_page, severe_errors, wait
from tests.browser import driver, require_chromium  # noqa: F401 (the shared fixture)
from tests.collector.test_regressions import make_run
from tests.live_server import serving

pytestmark = pytest.mark.browser

require_chromium()

from selenium.webdriver.common.by import By  # noqa: E402

DAY = 86400.0


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Eight runs of llama-8b on v1, a ninth on v2 with a 30 % slower graph step, a sampled
    qwen run, and a llama run 40 days old whose raw steps expired."""
    from replayscope.app.server import create_server
    from replayscope.collector.models import retention
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    store = Store.open(f"sqlite:///{tmp_path_factory.mktemp('fleet') / 'rs.db'}", upgrade=True)
    base = time.time() - 4 * DAY
    for k in range(8):
        make_run(store, f"llama-{k}", k, base=base)
    make_run(store, "llama-v2", 8, graph_step_s=0.013, version="v2", base=base)
    make_run(store, "qwen-sampled", 9, model="qwen-7b", graph_sample=8, base=base)
    make_run(store, "llama-old", 0, base=time.time() - 40 * DAY, model="llama-8b-old")
    retention.prune(store, retention.Policy(raw_s=14 * DAY, second_s=7 * DAY))
    with serving(create_server(store, Settings(run_services=False))) as url:
        yield {"store": store, "url": url}
    store.dispose()


ROWS = """
const out = {};
document.querySelectorAll('#' + arguments[0] + ' .ag-center-cols-container .ag-row').forEach(row => {
  const cells = {};
  row.querySelectorAll('.ag-cell').forEach(c => { cells[c.getAttribute('col-id')] = c.textContent.trim(); });
  out[row.getAttribute('row-id')] = cells;
});
return out;
"""


def rows_of(driver, grid_id):
    """{row id: {column id: shown text}} of the rendered rows of a grid, read in one go."""
    return driver.execute_script(ROWS, grid_id)


def wait_rows(driver, grid_id, expected_ids, timeout=30):
    wait(driver, lambda d: set(rows_of(d, grid_id)) == set(expected_ids), timeout)
    return rows_of(driver, grid_id)


def test_the_fleet_page_shows_every_group_with_the_read_models_numbers(env, driver):
    from replayscope.app import components as c
    from replayscope.collector.analysis import fleet

    open_page(driver, env["url"] + "/fleet?period=all", charts=1)
    runs = fleet.fleet_runs(env["store"])
    groups = fleet.fleet_groups(runs)
    keys = {"|".join(str(g[k]) for k in fleet.GROUP_KEYS): g for g in groups}
    shown = wait_rows(driver, "fleet-groups", keys)
    v1 = keys["llama-8b|cuda|NVIDIA H200|v1"]
    cells = shown["llama-8b|cuda|NVIDIA H200|v1"]
    assert cells["runs"] == "8"
    assert cells["eager_pct"] == c.pct(v1["eager_ratio"])
    assert cells["graph_step_s"] == c.seconds(v1["graph_step_s"])
    assert cells["startup_s"] == c.seconds(v1["startup_s"])
    assert cells["capture_total_s"] == c.seconds(v1["capture_total_s"])
    assert cells["latest"] == "llama-7"
    assert shown["llama-8b|cuda|NVIDIA H200|v2"]["regressions"] == "1"
    assert driver.find_element(By.ID, "fleet-summary").text == "11 runs in 4 groups; 1 run beyond the spread of its baseline"
    assert severe_errors(driver) == []


def test_the_regressed_run_is_flagged_with_its_baseline_named(env, driver):
    open_page(driver, env["url"] + "/fleet?period=all")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#fleet-runs [row-id='llama-v2']"))
    row = driver.find_element(By.CSS_SELECTOR, "#fleet-runs [row-id='llama-v2']")
    assert "row-alerting" in row.get_attribute("class")
    cell = row.find_element(By.CSS_SELECTOR, "[col-id=regressed]")
    text = driver.execute_script("return arguments[0].textContent", cell)
    assert text.startswith("graph step time +3") and "vs 8 earlier finished runs of llama-8b" in text
    assert "llama-0 … llama-7; version v1" in text
    others = rows_of(driver, "fleet-runs")
    assert all(cells["regressed"] == "" for run_id, cells in others.items() if run_id != "llama-v2")


def test_sampled_and_expired_detail_is_marked(env, driver):
    open_page(driver, env["url"] + "/fleet?period=all")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#fleet-runs [row-id='qwen-sampled']"))
    shown = rows_of(driver, "fleet-runs")
    assert shown["qwen-sampled"]["detail"] == "sampled 1/8"
    assert shown["llama-old"]["detail"] == "raw expired"
    assert shown["llama-3"]["detail"] == "all"


def test_a_link_with_filters_shows_only_those_runs(env, driver):
    open_page(driver, env["url"] + "/fleet?period=all&version=v2")
    wait_rows(driver, "fleet-runs", {"llama-v2"})
    assert set(rows_of(driver, "fleet-groups")) == {"llama-8b|cuda|NVIDIA H200|v2"}


def test_the_period_filter_leaves_out_older_runs(env, driver):
    open_page(driver, env["url"] + "/fleet?period=7d")
    shown = wait_rows(driver, "fleet-runs", {f"llama-{k}" for k in range(8)} | {"llama-v2", "qwen-sampled"})
    assert "llama-old" not in shown


def test_choosing_a_model_in_its_dropdown_filters_the_page(env, driver):
    open_page(driver, env["url"] + "/fleet?period=all")
    wait(driver, lambda d: len(rows_of(d, "fleet-runs")) == 11)
    driver.find_element(By.ID, "fleet-model").click()
    option = "//div[contains(@class, 'dash-dropdown-options')]//label[.//span[text()='qwen-7b']]"
    wait(driver, lambda d: d.find_elements(By.XPATH, option))
    driver.find_element(By.XPATH, option).click()
    wait_rows(driver, "fleet-runs", {"qwen-sampled"})
    assert set(rows_of(driver, "fleet-groups")) == {"qwen-7b|cuda|NVIDIA H200|v1"}
    assert severe_errors(driver) == []


def test_a_run_link_opens_the_run_page_with_its_comparison(env, driver):
    open_page(driver, env["url"] + "/fleet?period=all")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#fleet-runs [row-id='llama-v2'] [col-id=name] a"))
    driver.find_element(By.CSS_SELECTOR, "#fleet-runs [row-id='llama-v2'] [col-id=name] a").click()
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#run-regressions li.regression"))
    item = driver.find_element(By.CSS_SELECTOR, "#run-regressions li.regression")
    assert item.get_attribute("data-metric") == "graph_step_s"
    assert item.text.startswith("graph step time 13.")
    assert driver.find_element(By.ID, "run-baseline").text.startswith(
        "Baseline: 8 earlier finished runs of llama-8b (cuda on NVIDIA H200, same configuration)")
    assert severe_errors(driver) == []


def test_the_run_page_of_a_sampled_run_says_so(env, driver):
    open_page(driver, env["url"] + "/run/qwen-sampled")
    note = wait(driver, lambda d: d.find_elements(By.ID, "run-detail") and d.find_element(By.ID, "run-detail").text)
    assert "1 in 8 graph steps" in note


def test_the_run_page_of_an_expired_run_says_which_detail_expired(env, driver):
    open_page(driver, env["url"] + "/run/llama-old", charts=1)
    note = wait(driver, lambda d: d.find_elements(By.ID, "run-detail") and d.find_element(By.ID, "run-detail").text)
    assert "Raw step events before" in note and "have expired" in note
    assert "timelines are in whole minutes" in note
    assert driver.find_element(By.ID, "run-steps").text == "200"
