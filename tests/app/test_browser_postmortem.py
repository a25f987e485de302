"""The post-mortem in a real browser: an imported engine failure leads the Startup page with
its class, where it happened and what to do; the log's capture total is shown, not zero;
a CPU stand-in run says its times are CPU timings."""

from __future__ import annotations

import pytest

from tests.app.test_browser import By, open_page, severe_errors, text_of, wait
from tests.browser import driver  # noqa: F401 (the shared fixture)
from tests.live_server import serving
from tests.postmortem.cases import CASES, load

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from replayscope.app.server import create_server
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    store = Store.open(f"sqlite:///{tmp_path_factory.mktemp('pm') / 'rs.db'}", upgrade=True)
    ids = {case.name: load(case, store)[-1] for case in CASES
           if case.name in ("vllm-v1-capture-oom", "vllm-v0-35-sizes", "cpu-slow-size")}
    with serving(create_server(store, Settings(run_services=False))) as url:
        yield {"store": store, "url": url, "ids": ids}
    store.dispose()


def test_an_imported_failure_leads_the_startup_page(env, driver):
    open_page(driver, env["url"] + f"/startup/{env['ids']['vllm-v1-capture-oom']}", charts=3)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".card.finding"))
    first = driver.find_elements(By.CSS_SELECTOR, ".card.finding")[0]
    assert first.get_attribute("data-cause") == "failure" and first.get_attribute("data-failure-class") == "oom"
    # vLLM V1's first pass is its PIECEWISE (mixed) graphs, keyed by tokens
    assert "The run failed: out of memory during capture at 512 tokens" in first.text
    assert "from the log" in first.text and "--gpu-memory-utilization" in first.text
    assert "Nothing took longer" not in text_of(driver, "startup-diagnosis")
    assert severe_errors(driver) == []


def test_a_count_only_log_shows_its_captures_and_total(env, driver):
    open_page(driver, env["url"] + f"/startup/{env['ids']['vllm-v0-35-sizes']}", charts=3)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".card.finding"))
    assert text_of(driver, "startup-capture-s") == "57.0 s (from the log)"
    assert text_of(driver, "startup-captures").startswith("35")
    first = driver.find_elements(By.CSS_SELECTOR, ".card.finding")[0]
    assert first.get_attribute("data-cause") == "too_many_sizes" and "35 capture sizes took 57.0 s" in first.text


def test_a_cpu_stand_in_run_says_its_times_are_cpu_timings(env, driver):
    open_page(driver, env["url"] + f"/startup/{env['ids']['cpu-slow-size']}", charts=3)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".card.finding"))
    assert "CPU stand-in (static backend)" in text_of(driver, "startup-diagnosis")
    open_page(driver, env["url"] + f"/run/{env['ids']['cpu-slow-size']}", charts=7)
    assert "CPU stand-in" in driver.find_element(By.ID, "run-stand-in").text


def test_the_startup_page_of_an_imported_log_shows_its_sizes_and_kv_cache(env, driver):
    """The figures the log states (issue 22): a bar's count of sizes, KV tokens; the largest
    size the excerpt never printed reads "not in the log", and a failure-only excerpt leads
    with its failure, the exception "cut off in the log"."""
    from replayscope.collector.ingest import ingest_events, ingest_run
    from tests.importers.conftest import FIXTURES, import_whole

    ids = {}
    for engine, name in (("vllm", "vllm_pr21747_v1_bar_then_enginecore_failed.log"),
                         ("sglang", "sglang_issue7227_kv_tokens_and_capture_list.log")):
        (run,) = import_whole(engine, FIXTURES / name).runs
        ingest_run(env["store"], run.run)
        ingest_events(env["store"], run.run["run_id"], run.events)
        ids[engine] = run.run["run_id"]
    open_page(driver, env["url"] + f"/startup/{ids['vllm']}", charts=3)
    figures = driver.find_element(By.ID, "startup-log-figures").text
    assert "capture sizes: 67 (largest not in the log)" in figures and "KV cache tokens: not in the log" in figures
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".card.finding"))
    first = driver.find_elements(By.CSS_SELECTOR, ".card.finding")[0]
    assert first.get_attribute("data-cause") == "failure" and "during capture" in first.text
    assert "cut off in the log" in first.text and "out of memory" not in first.text.lower()
    open_page(driver, env["url"] + f"/startup/{ids['sglang']}", charts=3)
    figures = driver.find_element(By.ID, "startup-log-figures").text
    assert "capture sizes: 4 (largest 8)" in figures and "KV cache tokens: 132,681" in figures
    assert severe_errors(driver) == []

