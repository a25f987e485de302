"""The pages on real GPU runs: docs/data holds runs of `replayscope run` on an H200 (see
docs/gpu-results.md). They carry what a CPU run cannot: graph-pool memory, CUDA-event
step times, torch.compile phases and a capture that failed for real. These pages are
also the README's screenshots (REPLAYSCOPE_SCREENSHOTS=1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.test_browser import By, open_page, screenshot, severe_errors, text_of, wait
from tests.browser import driver  # noqa: F401 (the shared fixture)
from tests.live_server import serving

DATA = Path(__file__).resolve().parents[2] / "docs" / "data"
MIXED, COMPILE, FAILING = "h200-1b-mixed", "h200-1b-compile", "h200-1b-failing-capture"


@pytest.fixture(scope="module")
def gpu_env(tmp_path_factory):
    from replayscope.app.server import create_server
    from tests.stores import ingest_events_file
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    store = Store.open(f"sqlite:///{tmp_path_factory.mktemp('gpu') / 'rs.db'}", upgrade=True)
    for run_id in (MIXED, COMPILE, FAILING):
        ingest_events_file(store, DATA / f"{run_id}.jsonl")
    with serving(create_server(store, Settings(run_services=False))) as url:
        yield {"store": store, "url": url}
    store.dispose()


def test_gpu_runs_are_listed_with_their_device(gpu_env, driver):
    from replayscope.collector.models import queries

    open_page(driver, gpu_env["url"] + "/")
    wait(driver, lambda d: all(r in d.find_element(By.ID, "runs-table").text for r in (MIXED, COMPILE, FAILING)))
    assert {r["device"] for r in queries.list_runs(gpu_env["store"])} == {"NVIDIA H200"}
    screenshot(driver, "runs")
    assert severe_errors(driver) == []


def test_gpu_run_page_shows_pool_memory_and_the_query_layers_numbers(gpu_env, driver):
    from replayscope.app import components as c
    from replayscope.collector.models import queries

    open_page(driver, gpu_env["url"] + f"/run/{MIXED}", charts=7)
    summary = queries.run_summary(gpu_env["store"], MIXED)
    assert summary["backend"] == "cuda" and summary["steps"] == 2000
    assert text_of(driver, "run-steps") == c.count(summary["steps"])
    assert text_of(driver, "run-eager") == c.pct(summary["decode_eager_ratio"])     # the decode stages' share
    pools = {cap["pool_bytes"] for cap in queries.captures(gpu_env["store"], MIXED)}
    assert min(pools) > 0                     # measured from the allocator's graph pool
    assert "no pool memory reported" not in driver.page_source
    reasons = [r["reason"] for r in queries.reason_breakdown(gpu_env["store"], MIXED)]
    wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".card.explanation")) == len(reasons))
    screenshot(driver, "run")
    assert severe_errors(driver) == []


def test_gpu_startup_page_diagnoses_compile_against_a_baseline(gpu_env, driver):
    open_page(driver, gpu_env["url"] + f"/startup/{COMPILE}", charts=3)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".card.finding"))
    causes = [e.get_attribute("data-cause") for e in driver.find_elements(By.CSS_SELECTOR, ".card.finding")]
    assert causes[0] == "torch_compile", causes
    driver.find_element(By.ID, "startup-baseline").click()
    option = wait(driver, lambda d: [o for o in d.find_elements(By.CSS_SELECTOR, "[role=option]")
                                     if f"({MIXED})" in o.text])
    option[0].click()
    wait(driver, lambda d: "baseline" in d.find_element(By.ID, "startup-baseline-summary").text)
    screenshot(driver, "startup")
    assert severe_errors(driver) == []


def test_gpu_failed_capture_is_shown_on_the_startup_page(gpu_env, driver):
    open_page(driver, gpu_env["url"] + f"/startup/{FAILING}", charts=3)
    failures = text_of(driver, "startup-failures")
    assert "bs 16" in failures or "16" in failures
    assert "capture" in failures.lower()
    assert severe_errors(driver) == []


def test_gpu_advisor_and_alerts_pages(gpu_env, driver):
    from replayscope.app.pages.advisor import page_data

    open_page(driver, gpu_env["url"] + f"/advisor/{MIXED}", charts=1)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".flag-text"))
    shown = {e.text for e in driver.find_elements(By.CSS_SELECTOR, ".flag-text")}
    assert shown == {f["text"] for f in page_data(gpu_env["store"], MIXED)["advice"]["flags"]}
    screenshot(driver, "advisor")
    open_page(driver, gpu_env["url"] + "/alerts")
    wait(driver, lambda d: d.find_elements(By.ID, "rule-create"))
    screenshot(driver, "alerts")
    assert severe_errors(driver) == []
