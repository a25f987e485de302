"""A name with bidirectional-text controls is shown inert (issue 36): the audit's run named
with a U+202E right-to-left override was shown reversed ("report<U+202E>txt.exe" read
"reportexe.txt"). Now the pages write each control (U+202A-U+202E, U+2066-U+2069) as its code
point, ``[U+202E]``, in the runs list, the run, startup and advisor pages, the fleet and the
alerts history (and a model's, a backend's, an error's too), while links still reach the run.
Headless Chromium."""

from __future__ import annotations

import time

import pytest

from replayscope.contract.formats import BIDI_CONTROLS, inert
from tests.browser import driver, require_chromium  # noqa: F401 (the shared fixture)
from tests.live_server import serving

pytestmark = pytest.mark.browser
require_chromium()

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

NAME = "report\u202etxt.exe"
RUN_ID = "bidi-run"            # run ids are a closed pattern, refused at ingest
MODEL = "llama\u202d-8b\u202c"
SHOWN_NAME = "report[U+202E]txt.exe"


def test_inert_writes_every_control_as_its_code_point():
    assert inert(NAME) == SHOWN_NAME
    assert inert("".join(BIDI_CONTROLS)) == "".join(f"[U+{c:04X}]" for c in
                                                    (0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068,
                                                     0x2069))
    assert inert("plain \u05d0\u05d1 name") == "plain \u05d0\u05d1 name", "right-to-left letters stay as they are"
    assert inert(None) is None and inert(3) == 3


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    from replayscope.app.server import create_server
    from replayscope.collector.alerting.alerts import create_rule, evaluate_alerts
    from replayscope.collector.ingest import ingest_events, ingest_run
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    store = Store.open(f"sqlite:///{tmp_path_factory.mktemp('bidi') / 'b.db'}", upgrade=True)
    t0 = time.time() - 120
    create_rule(store, {"name": "eager", "threshold": 0.1, "min_steps": 1, "window_s": 60, "for_s": 0})
    ingest_run(store, {"run_id": RUN_ID, "name": NAME, "source": "runner", "started_at": t0, "backend": "static",
                       "model": MODEL, "device": "cpu", "config": {"capture_sizes": [1, 2, 4]}})
    ingest_events(store, RUN_ID, [
        {"seq": i, "ts": t0 + 1 + i * 0.05, "kind": "step", "stage": "decode", "mode": "eager", "raw_bs": 8,
         "graph_bs": None, "num_tokens": 8, "padded_tokens": 0, "reason": "batch_too_large", "duration_s": 0.01}
        for i in range(50)] + [{"seq": 60, "ts": t0 + 10, "kind": "run_end", "status": "finished"}])
    evaluate_alerts(store, now=time.time())
    with serving(create_server(store, Settings(run_services=False))) as base:
        yield base
    store.dispose()


def page_text(driver, address: str, expected: str) -> str:
    driver.get(address)
    WebDriverWait(driver, 40, poll_frequency=0.2).until(
        lambda d: expected in d.find_element(By.TAG_NAME, "body").text)
    return driver.find_element(By.TAG_NAME, "body").text


@pytest.mark.parametrize("page", ["/", "/fleet", "/alerts", "/run/{run_id}", "/startup/{run_id}", "/advisor/{run_id}"])
def test_a_name_with_bidi_controls_is_shown_inert(url, driver, page):
    text = page_text(driver, url + page.format(run_id=RUN_ID), SHOWN_NAME)
    assert not any(c in text for c in BIDI_CONTROLS), \
        f"a raw bidi control on {page}: {[ascii(line) for line in text.splitlines() if inert(line) != line]}"
    if page in ("/", "/run/{run_id}"):
        assert inert(MODEL) in text


def test_the_runs_list_still_links_to_the_run_by_its_stored_id(url, driver):
    page_text(driver, url + "/", SHOWN_NAME)
    link = next(a for a in driver.find_elements(By.CSS_SELECTOR, "a.grid-link") if a.text == SHOWN_NAME)
    link.click()
    WebDriverWait(driver, 40, poll_frequency=0.2).until(
        lambda d: d.find_elements(By.ID, "run-name") and d.find_element(By.ID, "run-name").text == SHOWN_NAME)
