"""The Startup and Run pages show what a run recorded or its log stated, through the same
functions as the API: never 0 for what nobody measured, CPU stand-in times labelled."""

from __future__ import annotations

import pytest

from tests.app import synthetic
from tests.live_server import LOOPBACK_BASE

# A vLLM V1 start that logs its capture total but no per-size rows (vLLM logs none).
VLLM_LOG = """\
(APIServer pid=1) INFO 03-10 10:00:00 [api_server.py:1805] vLLM API server version 0.10.1
(EngineCore_DP0 pid=7) INFO 03-10 10:00:01 [core.py:77] Initializing a V1 LLM engine (v0.10.1) with config: model='Qwen/Qwen2.5-7B-Instruct', enforce_eager=False, device_config=cuda, compilation_config={"level":3,"cudagraph_mode":[2,1],"cudagraph_capture_sizes":[16,8,4,2,1]}
(EngineCore_DP0 pid=7) INFO 03-10 10:00:20 [gpu_model_runner.py:2007] Model loading took 14.25 GiB and 18.500000 seconds
(EngineCore_DP0 pid=7) INFO 03-10 10:00:30 [gpu_worker.py:276] Available KV cache memory: 50.10 GiB
Capturing CUDA graphs (decode, FULL): 100%|##########| 5/5 [00:06<00:00,  0.80it/s]
(EngineCore_DP0 pid=7) INFO 03-10 10:00:37 [gpu_model_runner.py:2708] Graph capturing finished in 6 secs, took 0.52 GiB
(APIServer pid=1) INFO 03-10 10:00:39 [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000
(APIServer pid=1) INFO:     Application startup complete.
"""


@pytest.fixture
def pages(store):
    from replayscope.app.server import create_server
    from replayscope.collector.settings import Settings

    create_server(store, Settings(run_services=False))
    from replayscope.app.pages import run, startup
    return {"run": run, "startup": startup}


def import_log(store, text, parse_text):
    from replayscope.collector.ingest import ingest_events, ingest_run

    [run] = parse_text(text, path="server.log", mtime=1.77e9).runs
    ingest_run(store, run.run)
    ingest_events(store, run.run["run_id"], run.events)
    return run.run["run_id"]


def test_an_imported_vllm_run_shows_the_logs_capture_total_not_zero(store, pages):
    # issue 13: "CAPTURE TIME 0.0 ms" while the log says 6 s; "Every capture succeeded" with 0 captures
    from replayscope.collector.importers.vllm_log import parse_text

    run_id = import_log(store, VLLM_LOG, parse_text)
    data = pages["startup"].page_data(store, run_id)
    assert data["stats"]["startup-capture-s"] == "6.00 s (from the log)"
    assert data["stats"]["startup-captures"] == "5"
    assert "All 5 captures recorded succeeded" in str(pages["startup"]._failures(data))


def test_a_run_without_captures_never_says_every_capture_succeeded(store, pages):
    from replayscope.collector.importers.vllm_log import parse_text

    no_capture = "\n".join(VLLM_LOG.splitlines()[:4]) + "\n"     # the log stops before capture
    run_id = import_log(store, no_capture, parse_text)
    data = pages["startup"].page_data(store, run_id)
    text = str(pages["startup"]._failures(data))
    assert "succeeded" not in text and "No capture was recorded" in text
    assert data["stats"]["startup-capture-s"] == "not in the log"
    assert data["stats"]["startup-captures"] == "0 of 5"


def test_an_imported_failure_is_shown_as_the_runs_failure(store, pages):
    from replayscope.collector.importers.vllm_log import parse_text

    failing = VLLM_LOG.split("Capturing")[0] + (
        "Capturing CUDA graphs (decode, FULL):  40%|####      | 2/5 [00:02<00:03,  0.80it/s]\n"
        "(EngineCore_DP0 pid=7) ERROR 03-10 10:00:33 [core.py:700] EngineCore failed to start.\n"
        "(EngineCore_DP0 pid=7) ERROR 03-10 10:00:33 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 512.00 MiB is free.\n")
    run_id = import_log(store, failing, parse_text)
    data = pages["startup"].page_data(store, run_id)
    first = data["findings"][0]
    assert (first["cause"], first["failure_class"]) == ("failure", "oom")
    assert "the run failed: torch.OutOfMemoryError" in str(pages["startup"]._failures(data))
    assert "Nothing took longer" not in str(pages["startup"].diagnosis_children(data))


def test_the_startup_page_shows_what_the_api_returns(store, pages):
    from fastapi.testclient import TestClient

    from replayscope.collector.api import create_api
    from replayscope.collector.settings import Settings

    synthetic.fill(store, "syn-base", steps=200, slow_size=16, failed_size=32)
    data = pages["startup"].page_data(store, "syn-base")
    api = TestClient(create_api(store, Settings(run_services=False)), base_url=LOOPBACK_BASE)
    assert api.get("/v1/runs/syn-base/diagnosis").json() == data["diagnosis"]


def test_cpu_stand_in_times_are_labelled_on_both_pages(store, pages):
    synthetic.fill(store, "syn-1", steps=200)       # backend static
    startup = pages["startup"].page_data(store, "syn-1")
    assert "CPU stand-in" in str(pages["startup"].diagnosis_children(startup))
    run = pages["run"].page_data(store, "syn-1")
    assert all(text.startswith("CPU stand-in (static backend)") for _, text in run["reasons"])
    assert "CPU stand-in" in str(pages["run"].header(run["summary"]))


def test_the_advisor_page_shows_what_the_api_returns(store, pages):
    from fastapi.testclient import TestClient

    from replayscope.app.pages import advisor
    from replayscope.collector.api import create_api
    from replayscope.collector.settings import Settings

    synthetic.fill(store, "syn-1", steps=300)
    data = advisor.page_data(store, "syn-1", budget=3)
    api = TestClient(create_api(store, Settings(run_services=False)), base_url=LOOPBACK_BASE)
    body = api.get("/v1/runs/syn-1/advice", params={"budget": 3}).json()
    assert body == data["advice"]
