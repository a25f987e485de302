"""The pages of imported engine runs in headless Chromium: a vLLM log with --cudagraph-metrics
tables and an SGLang log, imported with `replayscope import` as a user would. The vLLM run's
page shows its decode and mixed batches' sizes and padding (not "no decode steps yet"), the
SGLang run's page says its decode steps are a 1-in-40 sample and where the 40 came from.
With REPLAYSCOPE_SCREENSHOTS=1 they are docs/screenshots/*-vllm.png and *-sglang.png."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.test_browser import By, open_page, screenshot, severe_errors, text_of, wait
from tests.browser import driver  # noqa: F401 (the shared fixture)
from tests.live_server import serving

FIXTURES = Path(__file__).resolve().parents[1] / "importers" / "fixtures"
VLLM_LOG = FIXTURES / "vllm_v013_cudagraph_metrics_serving.log"
SGLANG_LOG = FIXTURES / "sglang_v046_decode_sample_serving.log"


@pytest.fixture(scope="module")
def engine_env(tmp_path_factory):
    from replayscope.app.cli import main
    from replayscope.app.server import create_server
    from replayscope.collector.models import queries
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    db = f"sqlite:///{tmp_path_factory.mktemp('engines') / 'rs.db'}"
    for engine, log in (("vllm", VLLM_LOG), ("sglang", SGLANG_LOG)):
        assert main(["import", engine, str(log), "--db", db]) == 0
    store = Store.open(db)
    ids = {r["source"]: r["run_id"] for r in queries.list_runs(store)}
    with serving(create_server(store, Settings(run_services=False))) as url:
        yield {"store": store, "url": url, "vllm": ids["vllm-log"], "sglang": ids["sglang-log"]}
    store.dispose()


def _trace_count(driver, graph_id: str) -> int:
    return driver.execute_script(
        f"const g = document.querySelector('#{graph_id} .js-plotly-plot'); return g && g.data ? g.data.length : 0")


def test_an_imported_vllm_runs_page_shows_its_decode_and_padding_figures(engine_env, driver):
    from replayscope.app import components as c
    from replayscope.collector.models import queries

    run_id = engine_env["vllm"]
    summary = queries.run_summary(engine_env["store"], run_id)
    assert summary["stage_steps"] == {"decode": 6840, "mixed": 3451}
    open_page(driver, engine_env["url"] + f"/run/{run_id}", charts=7)
    assert text_of(driver, "run-padded") == c.pct(summary["decode_padded_ratio"])
    assert summary["decode_padded_ratio"] > 0
    wait(driver, lambda d: _trace_count(d, "run-batch-hist") >= 3)        # graph, padded, eager bars + sizes
    wait(driver, lambda d: _trace_count(d, "run-padding") == 2)            # decode batch sizes, mixed tokens
    page = driver.page_source
    for empty in ("no decode steps yet", "no decode tokens", "no decode and mixed steps yet", "no padding"):
        assert empty not in page
    stages = driver.find_element(By.ID, "run-stages").text
    assert "6,840 decode · 3,451 mixed" in stages and "FULL_AND_PIECEWISE" in stages
    assert "of decode and mixed tokens" in driver.find_element(By.CSS_SELECTOR, "#run-padded + .stat-note").text
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".card.explanation"))   # batch_too_large explained
    screenshot(driver, "run-vllm")
    assert severe_errors(driver) == []


def test_an_imported_sglang_runs_page_says_its_decode_steps_are_a_sample(engine_env, driver):
    from replayscope.app import components as c
    from replayscope.collector.models import queries

    run_id = engine_env["sglang"]
    summary = queries.run_summary(engine_env["store"], run_id)
    sample = summary["step_detail"]["log_sample"]
    assert sample == {"stage": "decode", "every": 40, "provenance": "log", "logged": 160}
    open_page(driver, engine_env["url"] + f"/run/{run_id}", charts=7)
    assert text_of(driver, "run-steps") == c.count(summary["steps"])
    assert driver.find_element(By.CSS_SELECTOR, "#run-steps + .stat-note").text == "logged: 1 in 40 decode batches"
    detail = driver.find_element(By.ID, "run-detail").text
    assert "SGLang logs 1 decode batch in 40 (decode_log_interval=40 in the log's server_args)" in detail
    assert "160 decode lines logged, so about 6,400 decode batches ran (estimated)" in detail
    assert "160 decode · 73 prefill" in driver.find_element(By.ID, "run-stages").text
    assert text_of(driver, "run-padded") == c.pct(summary["decode_padded_ratio"])
    screenshot(driver, "run-sglang")
    assert severe_errors(driver) == []


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_startup_and_advisor_pages_of_imported_runs(engine_env, driver, engine):
    from replayscope.collector.analysis.advisor.stored import advice_for_run

    run_id = engine_env[engine]
    # the advisor's traffic: the run's steps in the decode stages (a vLLM run's decode and mixed rows)
    advice = advice_for_run(engine_env["store"], run_id)
    traffic = advice["split"]["fit_steps"] + advice["split"]["held_back_steps"] + sum(advice["left_out"].values())
    assert traffic == {"vllm": 6840 + 3451, "sglang": 160}[engine]
    assert advice["stage"] == {"vllm": "decode+mixed", "sglang": "decode"}[engine]
    open_page(driver, engine_env["url"] + f"/startup/{run_id}", charts=3)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".stat"))
    screenshot(driver, f"startup-{engine}")
    assert severe_errors(driver) == []
    open_page(driver, engine_env["url"] + f"/advisor/{run_id}", charts=1)
    flags = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".flag-text")]
    assert sorted(flags) == sorted(f["text"] for f in advice["flags"])
    assert severe_errors(driver) == []   # its screenshot: tests/app/test_browser_advisor.py
