"""The Advisor page in headless Chromium, for a runner run, imported vLLM and SGLang runs and an
--enforce-eager run: the table shows the API's held-back figures, the flags its lines, the
validity each engine's verdict, the bars their real modes; graphs-off runs say so.

With REPLAYSCOPE_SCREENSHOTS=1 each page is saved as docs/screenshots/advisor-<kind>.png.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.browser import driver, require_chromium  # noqa: F401 (the shared fixture)
from tests.live_server import serving

pytestmark = pytest.mark.browser
require_chromium()

from selenium.webdriver.common.by import By  # noqa: E402

from tests.app.test_browser import open_page, screenshot, severe_errors, text_of, wait  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "tests" / "importers" / "fixtures"
IMPORTS = {"vllm": ("vllm", "vllm_cudagraph_metrics.log"), "sglang": ("sglang", "sglang_decode_batches.log"),
           "enforce-eager": ("vllm", "vllm_v011_enforce_eager_metrics.log"),
           "vllm-serving": ("vllm", "vllm_v013_cudagraph_metrics_serving.log")}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    pytest.importorskip("torch", reason="the runner run is a real `replayscope run`'s")
    from replayscope.app.server import create_server
    from replayscope.collector.models import queries
    from tests.stores import ingest_events_file
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    tmp = tmp_path_factory.mktemp("advisor")
    url = f"sqlite:///{tmp / 'rs.db'}"
    events = tmp / "runner.jsonl"
    subprocess.run([sys.executable, "-m", "replayscope", "run", "--backend", "static", "--preset", "tiny",
                    "--workload", "mixed", "--steps", "400", "--events", str(events), "--quiet",
                    "--name", "static-tiny-mixed", "--run-id", "runner-run"], cwd=REPO, check=True, timeout=600)
    store = Store.open(url, upgrade=True)
    ingest_events_file(store, events)
    runs = {"runner": "runner-run"}
    for kind, (engine, log) in IMPORTS.items():
        before = {r["run_id"] for r in queries.list_runs(store)}
        subprocess.run([sys.executable, "-m", "replayscope", "import", engine, str(LOGS / log), "--db", url],
                       cwd=REPO, check=True, timeout=120, capture_output=True)
        (runs[kind],) = {r["run_id"] for r in queries.list_runs(store)} - before
    with serving(create_server(store, Settings(run_services=False))) as base:
        yield {"store": store, "url": base, "runs": runs}
    store.dispose()


def shown_table(driver) -> dict[str, dict[str, str]]:
    """The plan table as displayed: plan -> {column id: text}."""
    out = {}
    for row in driver.find_elements(By.CSS_SELECTOR, "#advisor-table .ag-center-cols-container .ag-row"):
        cells = {c.get_attribute("col-id"): c.text for c in row.find_elements(By.CSS_SELECTOR, ".ag-cell")}
        out[cells["plan"]] = cells
    return out


@pytest.mark.parametrize("kind", ["runner", "vllm", "sglang", "enforce-eager", "vllm-serving"])
def test_the_advisor_page_shows_the_apis_advice(env, driver, kind):
    from replayscope.app.pages.advisor import page_data

    run_id = env["runs"][kind]
    open_page(driver, f"{env['url']}/advisor/{run_id}", charts=1)
    data = page_data(env["store"], run_id)
    advice = data["advice"]
    wait(driver, lambda d: len(shown_table(d)) == len(advice["plans"]))
    table = shown_table(driver)
    for record, row in zip(data["records"], data["rows"]):
        shown = table[record["plan"]]
        assert shown["sizes"] == record["sizes"]
        assert shown["eager"] == row["eager__shown"] and shown["padding"] == row["padding__shown"]
        assert shown["capture"] == record["capture_text"] and shown["pool"] == record["pool_text"]
    assert text_of(driver, "advisor-verdict") == advice["verdict"]["text"]
    flags = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".flag-text")]
    assert sorted(flags) == sorted(f["text"] for f in advice["flags"])
    own = driver.find_element(By.CSS_SELECTOR, f".validity-row[data-engine={advice['engine']}]")
    assert own.get_attribute("data-valid") == ("yes" if not advice["validity"][0]["problems"] else "no")
    legend = {e.text for e in driver.find_elements(By.CSS_SELECTOR, "#advisor-hist .legendtext")}
    modes = {f"ran {r['mode']}" for r in advice["histogram"]}
    assert modes <= legend and "proposed size" in legend
    tooltips = [e for e in driver.find_elements(By.CSS_SELECTOR, ".dash-slider-tooltip, .rc-slider-tooltip")
                if e.is_displayed()]
    assert tooltips == []                   # the budget is in the label, no tooltip over the marks
    assert advice["budget_basis"] in text_of(driver, "advisor-budget-value")
    if kind == "enforce-eager":
        banner = text_of(driver, "advisor-graphs-off")
        assert "Graphs were off" in banner and "--enforce-eager" in banner
        assert table["current"]["sizes"] == "graphs off" and table["current"]["eager"] == "100%"
    headers = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#advisor-table .ag-header-cell-text")]
    if advice["objective"]["provenance"] == "estimated":      # a vLLM log times no step
        assert any("step time" in h and "estimated" in h for h in headers), headers
        assert text_of(driver, "advisor-verdict").startswith("Estimated (no step was timed)") or not advice[
            "verdict"]["compared"]
        assert text_of(driver, "advisor-dropped").startswith("Left off, the gain does not pay for them")
    else:
        assert not any("estimated" in h for h in headers), headers
    if kind == "vllm-serving":
        assert 2048 not in advice["sizes"] and advice["objective"]["provenance"] == "estimated"
    screenshot(driver, f"advisor-{kind}", room=200)
    assert severe_errors(driver) == []


def test_moving_the_budget_recomputes_the_advice(env, driver):
    from replayscope.app.pages.advisor import page_data

    run_id = env["runs"]["runner"]
    open_page(driver, f"{env['url']}/advisor/{run_id}", charts=1)
    wait(driver, lambda d: "proposed" in shown_table(d))
    handle = driver.find_element(By.CSS_SELECTOR, "#advisor-budget [role=slider]")
    handle.click()
    from selenium.webdriver.common.keys import Keys
    before = page_data(env["store"], run_id)["advice"]["budget"]
    for _ in range(2):
        handle.send_keys(Keys.ARROW_LEFT)
    expected = page_data(env["store"], run_id, before - 2)["advice"]
    wait(driver, lambda d: shown_table(d)["proposed"]["sizes"] == ", ".join(map(str, expected["sizes"])))
    assert text_of(driver, "advisor-verdict") == expected["verdict"]["text"]
    assert severe_errors(driver) == []
