"""The run page's section on Inductor's recordings, in headless Debian Chromium, for runs the
tracer wrote itself: a reduce-overhead program whose compiled function re-records until PyTorch
gives up (PyTorch's own graph-tree decisions, on a CPU through ``graph_trees_stand_in``), a run
on a CPU with no graph at all, and a run of the runner that has neither (no section)."""

from __future__ import annotations

import dataclasses
import os

import pytest

torch = pytest.importorskip("torch", reason="the runs are the tracer's own, of PyTorch programs")

from tests.browser import driver, require_chromium  # noqa: F401 (the shared fixture)
from tests.live_server import serving

pytestmark = [pytest.mark.browser, pytest.mark.skipif(
    torch.__version__ < "2.13", reason="written against PyTorch 2.13's re-record accounting (static inputs uncounted)")]
require_chromium()

from selenium.webdriver.common.by import By  # noqa: E402

from tests.app.test_browser import wait  # noqa: E402


def traced_events(monkeypatch, scenario, step=None):
    """The run and events the tracer writes for ``scenario(tracer)``, its hooks on fake graphs."""
    from tests.trace.conftest import Traced

    traced = Traced(monkeypatch)
    if step:
        traced.tracer.settings = dataclasses.replace(traced.tracer.settings, step=step)
    scenario(traced)
    events = traced.finish()
    return traced.sinks[0].run, events


def re_recording(traced):
    from torch._inductor import cudagraph_utils

    from replayscope.runner.trace.graph_trees import install_graph_tree_hooks
    from replayscope.runner.trace.hooks import install_inductor_skip_hook
    from tests.trace.graph_trees_stand_in import Status, StandInManager, module

    install_graph_tree_hooks(traced.tracer, module(), traced.patches)
    install_inductor_skip_hook(traced.tracer, cudagraph_utils, traced.patches)
    traced.tracer.graph_trees.frame_names[0] = "Decoder.forward"
    manager = StandInManager()
    forward, head = manager.add(frame_id=0), manager.add(frame_id=1)
    with torch._inductor.config.patch({"triton.cudagraph_unexpected_rerecord_limit": 2}):
        for _ in range(3):
            manager.call(head, torch.zeros(4, 8))
        manager.call(forward, torch.zeros(4, 8))
        manager.call(forward, torch.zeros(4, 8))                      # recorded
        manager.check_status[forward] = Status.StaticInputIdxMismatch
        manager.call(forward, torch.zeros(4, 8))                      # re-recorded, not counted
        manager.check_status[forward] = Status.CudagraphManagedIdxMismatch
        for _ in range(4):                                           # counted, then past the limit
            manager.call(forward, torch.zeros(4, 8))


def no_graph(traced):
    traced.tracer.inductor_compiled(True)
    for _ in range(3):
        traced.tracer.step_begin("decode", 2, 2)
        traced.tracer.step_end()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from replayscope.collector.ingest import ingest_events, ingest_run
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store
    from replayscope.app.server import create_server
    from tests.app import synthetic

    monkeypatch = pytest.MonkeyPatch()
    store = Store.open(f"sqlite:///{tmp_path_factory.mktemp('recordings') / 'rs.db'}", upgrade=True)
    for run_id, scenario in (("rerecords", re_recording), ("cpu-only", no_graph)):
        run, events = traced_events(monkeypatch, scenario)
        ingest_run(store, {**run, "run_id": run_id, "name": f"trace {run_id}"})
        ingest_events(store, run_id, events)
    monkeypatch.undo()
    synthetic.fill(store, "runner-run", name="runner", steps=50)
    with serving(create_server(store, Settings(run_services=False))) as url:
        yield {"store": store, "url": url}
    store.dispose()


def open_run(driver, url, run_id):
    driver.get(f"{url}/run/{run_id}")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".page") and d.find_elements(By.ID, "run-steps")
         and d.find_element(By.ID, "run-steps").text not in ("", "…"))


def cells(driver, row_id):
    row = driver.find_element(By.CSS_SELECTOR, f"#run-recordings-table .ag-center-cols-container [row-id='{row_id}']")
    return {cell.get_attribute("col-id"): cell.text for cell in row.find_elements(By.CSS_SELECTOR, ".ag-cell")}


def save(driver, tmp_path, name):
    driver.execute_script("document.getElementById('run-recordings-section').scrollIntoView()")
    path = tmp_path / f"{name}.png"
    driver.save_screenshot(str(path))
    if os.environ.get("REPLAYSCOPE_SCREENSHOTS") == "1":
        driver.save_screenshot(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "screenshots",
                                            f"{name}.png"))


def test_a_function_that_re_records_until_pytorch_gives_up_is_shown_with_its_causes(env, driver, tmp_path):
    open_run(driver, env["url"], "rerecords")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#run-recordings-table .ag-row"))
    section = driver.find_element(By.ID, "run-recordings-section")
    assert section.is_displayed()
    forward = cells(driver, "Decoder.forward (frame 0)")
    assert forward["recordings"] == "4"
    assert forward["causes"] == "first ×1, static input moved ×1, graph-pool input moved ×2"
    assert (forward["rerecords"], forward["limit"]) == ("2", "2")
    assert forward["now"] == "eager for good"
    head = cells(driver, "compiled function (frame 1)")
    assert (head["recordings"], head["causes"], head["now"]) == ("1", "first ×1", "graphs")
    note = section.find_element(By.CSS_SELECTOR, "p.note").text
    assert note.startswith("Inductor re-recorded Decoder.forward (frame 0) past PyTorch's re-record limit of 2")
    save(driver, tmp_path, "run-recordings")
    assert not [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_a_run_without_any_graph_says_why_in_the_section(env, driver, tmp_path):
    open_run(driver, env["url"], "cpu-only")
    wait(driver, lambda d: d.find_element(By.ID, "run-recordings-section").is_displayed())
    section = driver.find_element(By.ID, "run-recordings-section")
    assert section.find_element(By.CSS_SELECTOR, "p.note").text.startswith(
        "no CUDA graph was captured in this process: CUDA is not available in this process")
    assert not section.find_elements(By.ID, "run-recordings-table")
    save(driver, tmp_path, "run-no-graph")


def test_a_run_with_no_recording_has_no_such_section(env, driver):
    open_run(driver, env["url"], "runner-run")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#run-reasons *"))
    assert not driver.find_element(By.ID, "run-recordings-section").is_displayed()
