"""Every value a reader reads was checked at ingest, with one bound per field on SQLite and
PostgreSQL alike. The audit: ``config.capture_sizes`` of ``5``, ``"1,2,4"``, ``[1, "x"]``,
``{"a": 1}`` or ``[1e308]`` made ``/advice`` a 500 and the Advisor page blank; a
``batch_sizes`` key ``"²"`` was a 500; a NUL in a run name was a 500 on PostgreSQL; a
``step_counts`` ``raw_bs`` of 2^40 was stored on SQLite (above the documented 2^20) and
refused on PostgreSQL with a message about 2^63. Against a real uvicorn server on each
store, and the Advisor page in headless Chromium for a run stored before the check."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from tests.browser import chromium, require_chromium
from tests.faults.conftest import http_json
from tests.live_server import serving
from tests.postgres import temporary_database

require_chromium()

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

T0 = time.time() - 3600
BAD_CAPTURE_SIZES = [5, "1,2,4", [1, "x"], {"a": 1}, [1e308], [0], [2**21], [True]]


def record(run_id: str, **extra) -> dict:
    return {"run_id": run_id, "name": run_id, "source": "runner", "started_at": T0, "backend": "static",
            "model": "tiny", "device": "cpu", **extra}


def decode_steps(n: int = 40) -> list[dict]:
    def one(i: int) -> dict:
        graph = i % 4 != 0
        return {"seq": i, "ts": T0 + i, "kind": "step", "stage": "decode", "mode": "graph" if graph else "padded",
                "raw_bs": 4 if graph else 3, "graph_bs": 4, "num_tokens": 4 if graph else 3,
                "padded_tokens": 0 if graph else 1, "reason": None, "duration_s": 0.01}
    return [one(i) for i in range(n)]


def counts(**extra) -> dict:
    return {"seq": 1000, "ts": T0 + 50, "kind": "step_counts", "stage": "decode", "mode": "graph", "reason": None,
            "count": 2, "num_tokens": 8, "padded_tokens": 0, **extra}


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def server(request, tmp_path_factory):
    from replayscope.app.server import create_server
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    def serve(url):
        store = Store.open(url, upgrade=True)
        try:
            with serving(create_server(store, Settings(run_services=False))) as base:
                yield {"url": base, "store": store}
        finally:
            store.dispose()

    if request.param == "sqlite":
        yield from serve(f"sqlite:///{tmp_path_factory.mktemp('values')}/v.db")
    else:
        with temporary_database("reader value tests") as url:
            yield from serve(url)


def post(server, path, payload):
    return http_json("POST", server["url"] + path, payload)


@pytest.mark.parametrize("sizes", BAD_CAPTURE_SIZES, ids=repr)
def test_a_capture_sizes_of_the_wrong_shape_is_refused_at_ingest(server, sizes):
    status, body, _ = post(server, "/v1/runs", record("bad-sizes", config={"capture_sizes": sizes}))
    assert status == 422 and body["field"].startswith("config.capture_sizes"), body
    assert http_json("GET", server["url"] + "/v1/runs/bad-sizes")[0] == 404, "nothing written"


@pytest.mark.parametrize("config, field", [
    ({"capture_passes": [{"graphs": "many"}]}, "config.capture_passes[0].graphs"),
    ({"ranks": "TP0"}, "config.ranks"),
    ({"rank_headline": ["TP0"]}, "config.rank_headline"),
    ({"weights_mem": "3 GiB"}, "config.weights_mem"),
    ({"graph_mem_bytes": 2**60}, "config.graph_mem_bytes"),
])
def test_every_config_key_a_reader_reads_has_one_shape(server, config, field):
    status, body, _ = post(server, "/v1/runs", record("bad-config", config=config))
    assert (status, body["field"]) == (422, field), body


def test_a_batch_size_key_that_is_a_unicode_digit_is_a_422(server):
    assert post(server, "/v1/runs", record("sizes-key"))[0] == 201
    status, body, _ = post(server, "/v1/runs/sizes-key/events", {"events": [counts(batch_sizes={
        "²": {"count": 2, "num_tokens": 8, "padded_tokens": 0}})]})
    assert status == 422 and body["field"] == "batch_sizes" and "'²' is not a batch size" in body["detail"], body


@pytest.mark.parametrize("field", ["name", "model", "device"])
def test_a_nul_in_a_run_string_is_a_422_on_every_store(server, field):
    status, body, _ = post(server, "/v1/runs", record(f"nul-{field}", **{field: "a\x00b"}))
    assert (status, body["field"]) == (422, field), body
    assert "NUL" in body["detail"]


def test_a_nul_in_an_event_string_is_a_422_on_every_store(server):
    assert post(server, "/v1/runs", record("nul-event"))[0] == 201
    status, body, _ = post(server, "/v1/runs/nul-event/events", {"events": [
        {"seq": 0, "ts": T0, "kind": "warning", "message": "cut\x00here"}]})
    assert (status, body["field"]) == (422, "message"), body


@pytest.mark.parametrize("field", ["raw_bs", "graph_bs"])
def test_a_step_counts_batch_size_above_2_20_is_refused_the_same_on_every_store(server, field):
    assert post(server, "/v1/runs", record(f"big-{field}"))[0] == 201
    status, body, _ = post(server, f"/v1/runs/big-{field}/events", {"events": [counts(**{field: 2**40})]})
    assert status == 422 and body == {"detail": f"event 0: {field}: must be <= 1.04858e+06", "index": 0,
                                      "field": field}, body


@pytest.fixture(scope="module")
def stored_before(server):
    """Runs whose config was stored before it was checked at ingest (straight into the table)."""
    from replayscope.collector.ingest import ingest_events, ingest_run
    from replayscope.collector.tables import runs

    store = server["store"]
    names = []
    for k, sizes in enumerate(BAD_CAPTURE_SIZES):
        run_id = f"old-{k}"
        ingest_run(store, record(run_id))
        ingest_events(store, run_id, decode_steps())
        with store.write() as conn:
            conn.execute(runs.update().where(runs.c.run_id == run_id).values(config={"capture_sizes": sizes}))
        names.append(run_id)
    return names


def test_runs_stored_before_the_check_answer_every_read(server, stored_before):
    assert len(stored_before) == len(BAD_CAPTURE_SIZES) > 0                  # the loop below runs
    for run_id in stored_before:
        for path in ("", "/advice", "/advice?budget=2", "/diagnosis", "/regressions", "/batch-sizes"):
            status, body, _ = http_json("GET", f"{server['url']}/v1/runs/{run_id}{path}")
            assert status == 200, (run_id, path, body)
        summary = http_json("GET", f"{server['url']}/v1/runs/{run_id}")[1]
        assert "capture_sizes" not in summary["config"], "a value of the wrong shape reads as absent"


def test_the_advisor_page_of_such_a_run_shows_its_advice(server, stored_before, tmp_path):
    driver = chromium(tmp_path / "chromium")
    try:
        for run_id in (stored_before[1], stored_before[4]):        # "1,2,4" and [1e308]
            driver.get(f"{server['url']}/advisor/{run_id}")
            flag = WebDriverWait(driver, 30, poll_frequency=0.2).until(
                lambda d: (d.find_elements(By.CSS_SELECTOR, ".flag-text[data-engine=vllm]") or [None])[0])
            WebDriverWait(driver, 30, poll_frequency=0.2).until(lambda d: flag.text not in ("", "…"))
            assert "cudagraph" in flag.text, flag.text
            assert "proposed" in driver.find_element(By.ID, "advisor-table").text
    finally:
        driver.quit()
    with server["store"].read() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM runs")).scalar_one() >= len(stored_before)
