"""Issue 34: what the pages conclude for an engine's run is right. The startup is the wall time
to the ready line, its unaccounted time is drawn where it falls, and no finding contradicts
the run's own data."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "importers" / "fixtures"
VLLM_SERVING = "vllm_v013_cudagraph_metrics_serving.log"
SGLANG_SERVING = "sglang_v046_decode_sample_serving.log"
VLLM_MTIME = 1796256000.0            # 2026-12-03 00:00 UTC, the day after its yearless stamps


def utc(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()


def import_fixture(store, engine: str, name: str) -> str:
    from collector.importers import parse_sglang_text, parse_vllm_text
    from collector.ingest import ingest_events, ingest_run

    parse = parse_vllm_text if engine == "vllm" else parse_sglang_text
    [run] = parse((FIXTURES / name).read_text(), path=name, mtime=VLLM_MTIME).runs
    ingest_run(store, run.run)
    ingest_events(store, run.run["run_id"], run.events)
    return run.run["run_id"]


@pytest.fixture
def pages(store):
    from app.server import create_server
    from collector.settings import Settings

    create_server(store, Settings(run_services=False))
    from app.pages import fleet, run, runs, startup
    return {"run": run, "runs": runs, "startup": startup, "fleet": fleet}


def test_an_imported_vllm_startup_is_the_wall_time_from_its_first_line_to_its_ready_line(store):
    from collector.analysis.diagnosis import diagnose_run

    run_id = import_fixture(store, "vllm", VLLM_SERVING)
    diagnosis = diagnose_run(store, run_id)
    # 16:49:40 "vLLM API server version" to 16:50:24 "Starting vLLM API server 0 on http://..."
    assert diagnosis.startup_from == utc("2026-12-02 16:49:40")
    assert diagnosis.ready_at == utc("2026-12-02 16:50:24")
    assert diagnosis.startup_s == 44.0


def test_an_imported_sglang_startup_ends_at_the_fired_up_line(store):
    from collector.analysis.diagnosis import diagnose_run
    from collector.models import queries

    run_id = import_fixture(store, "sglang", SGLANG_SERVING)
    ready = queries.run_summary(store, run_id)["config"]["ready_at"]
    diagnosis = diagnose_run(store, run_id)
    assert diagnosis.ready_at == ready and diagnosis.startup_s == ready - diagnosis.startup_from
    last_phase_end = max(p["ts"] for p in queries.phases(store, run_id))
    assert ready > last_phase_end


def test_the_unaccounted_time_the_diagnosis_names_is_drawn_on_the_waterfall(store, pages):
    run_id = import_fixture(store, "vllm", VLLM_SERVING)
    shown = pages["startup"].page_data(store, run_id)
    [gap] = [f for f in shown["findings"] if f["cause"] == "unaccounted"]
    assert gap["seconds"] == pytest.approx(6.5877, abs=1e-3)          # 16:49:40 to the load's start
    figure = shown["waterfall"].to_dict()
    [drawn] = [t for t in figure["data"] if t["name"] == "unaccounted"]
    bars = {label: (base, length) for label, base, length in zip(drawn["y"], drawn["base"], drawn["x"])}
    assert any(base == 0.0 and length == pytest.approx(gap["seconds"]) for base, length in bars.values())
    # the ready line ends the startup: the last unaccounted stretch reaches it, 44 s in
    assert max(base + length for base, length in bars.values()) == pytest.approx(44.0)
    assert "ready at 44.0 s" in [a["text"] for a in figure["layout"]["annotations"]]
    assert shown["stats"]["startup-total"] == "44.0 s"


def test_the_sizes_finding_never_says_no_steps_were_recorded_of_a_run_that_has_them(store):
    from collector.analysis.diagnosis import diagnose_run
    from collector.models import queries

    run_id = import_fixture(store, "vllm", VLLM_SERVING)
    assert sum(r["steps"] for r in queries.batch_times(store, run_id)) == 10291
    text = [e.text for f in diagnose_run(store, run_id).findings for e in f.evidence]
    assert not [t for t in text if "no steps with batch sizes" in t]
    # 7 and 12 rows pad to 8 and 16, 30 to 32; the mixed 140 and 500 to 144 and 512
    assert "the steps used 5 of the 51 sizes: 8, 16, 32, 144, 512" in text
