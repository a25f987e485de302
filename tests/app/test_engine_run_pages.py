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
    from replayscope.collector.importers import parse_sglang_text, parse_vllm_text
    from replayscope.collector.ingest import ingest_events, ingest_run

    parse = parse_vllm_text if engine == "vllm" else parse_sglang_text
    [run] = parse((FIXTURES / name).read_text(), path=name, mtime=VLLM_MTIME).runs
    ingest_run(store, run.run)
    ingest_events(store, run.run["run_id"], run.events)
    return run.run["run_id"]


@pytest.fixture
def pages(store):
    from replayscope.app.server import create_server
    from replayscope.collector.settings import Settings

    create_server(store, Settings(run_services=False))
    from replayscope.app.pages import fleet, run, runs, startup
    return {"run": run, "runs": runs, "startup": startup, "fleet": fleet}


def test_an_imported_vllm_startup_is_the_wall_time_from_its_first_line_to_its_ready_line(store):
    from replayscope.collector.analysis.diagnosis import diagnose_run

    run_id = import_fixture(store, "vllm", VLLM_SERVING)
    diagnosis = diagnose_run(store, run_id)
    # 16:49:40 "vLLM API server version" to 16:50:24 "Starting vLLM API server 0 on http://..."
    assert diagnosis.startup_from == utc("2026-12-02 16:49:40")
    assert diagnosis.ready_at == utc("2026-12-02 16:50:24")
    assert diagnosis.startup_s == 44.0


def test_an_imported_sglang_startup_ends_at_the_fired_up_line(store):
    from replayscope.collector.analysis.diagnosis import diagnose_run
    from replayscope.collector.models import queries

    run_id = import_fixture(store, "sglang", SGLANG_SERVING)
    ready = queries.run_summary(store, run_id)["config"]["ready_at"]
    diagnosis = diagnose_run(store, run_id)
    assert diagnosis.ready_at == ready and diagnosis.startup_s == ready - diagnosis.startup_from
    last_phase_end = max(p["ts"] for p in queries.phases(store, run_id))
    assert ready > last_phase_end


def test_the_fleet_and_regressions_count_the_same_startup_as_the_diagnosis(store):
    from replayscope.collector.analysis import fleet, regressions

    run_id = import_fixture(store, "vllm", VLLM_SERVING)
    [row] = fleet.fleet_runs(store)
    assert row["startup_s"] == 44.0                      # not 34.4: the phases' span
    assert regressions.run_regressions(store, run_id)["figures"]["startup_s"] == 44.0


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
    from replayscope.collector.analysis.diagnosis import diagnose_run
    from replayscope.collector.models import queries

    run_id = import_fixture(store, "vllm", VLLM_SERVING)
    assert sum(r["steps"] for r in queries.batch_times(store, run_id)) == 10291
    text = [e.text for f in diagnose_run(store, run_id).findings for e in f.evidence]
    assert not [t for t in text if "no steps with batch sizes" in t]
    # 7 and 12 rows pad to 8 and 16, 30 to 32; the mixed 140 and 500 to 144 and 512
    assert "the steps used 5 of the 51 sizes: 8, 16, 32, 144, 512" in text


# -- headline numbers say what they measure ------------------------------------------------

def scraped_vllm_run(store, run_id="scraped", capture_sizes=None) -> str:
    """A vLLM /metrics run as `replayscope scrape` stores it: replays and eager iterations counted
    by vllm:cudagraph_iterations_total, which says nothing of padding."""
    from replayscope.collector.ingest import ingest_events, ingest_run

    t0 = 1.79e9
    config = {} if capture_sizes is None else {"capture_sizes": capture_sizes}
    ingest_run(store, {"run_id": run_id, "name": "scraped vLLM", "source": "vllm-metrics", "started_at": t0,
                       "backend": "vllm", "model": "m", "device": "unknown", "torch_version": None, "config": config})
    base = {"kind": "step_counts", "stage": "mixed", "duration_s": None, "interval_s": 10.0, "padded_tokens": 0}
    ingest_events(store, run_id, [
        dict(base, seq=0, ts=t0 + 10, mode="graph", reason=None, count=900, num_tokens=0, provenance="measured"),
        dict(base, seq=1, ts=t0 + 10, mode="eager", reason="unknown", count=100, num_tokens=0)])
    return run_id


def failed_run_without_steps(store, run_id="no-steps") -> str:
    from replayscope.collector.ingest import ingest_events, ingest_run
    from tests.app import synthetic

    record = synthetic.run_record(run_id, "failed at load")
    ingest_run(store, record)
    ingest_events(store, run_id, [{"seq": 0, "ts": record["started_at"] + 5, "kind": "run_end", "status": "failed",
                                   "error": "CUDA out of memory", "phase": "load_weights"}])
    return run_id


def test_sglangs_eager_tile_is_the_decode_share_of_its_sample_with_prefill_apart(store, pages):
    run_id = import_fixture(store, "sglang", SGLANG_SERVING)
    shown = pages["run"].page_data(store, run_id)
    summary = shown["summary"]
    # 51 of the 160 logged decode batches ran eager (too large); the 73 prefill lines always do
    assert (summary["decode_steps"], summary["decode_eager_steps"]) == (160, 51)
    assert shown["stats"]["run-eager"] == "31.9%"                  # not 53.2%: 124 of 233 lines
    note = pages["run"].headlines.eager_note(summary)
    assert note == "of decode steps; 73 prefill apart (73 eager); sampled: the log has 1 in 40 decode batches"
    [row] = pages["runs"].page_data(store)
    assert (row["eager_pct"], row["eager_pct__shown"]) == (31.9, "31.9% (sampled)")


def test_a_vllm_logs_eager_tile_counts_its_decode_stages(store, pages):
    run_id = import_fixture(store, "vllm", VLLM_SERVING)
    shown = pages["run"].page_data(store, run_id)
    assert shown["summary"]["decode_eager_ratio"] == 2785 / 10291      # decode and mixed: every step
    assert shown["stats"]["run-eager"] == "27.1%"


def test_the_fleet_eager_share_is_the_decode_stages_share_as_on_the_run_page(store, pages):
    run_id = import_fixture(store, "sglang", SGLANG_SERVING)
    shown = pages["fleet"].page_data(store, period="all")
    [row], [group] = shown["runs"], shown["groups"]
    assert row["eager_ratio"] == 51 / 160 and row["eager_pct__shown"] == "31.9%"     # not 53.2%
    assert group["eager_pct__shown"] == pages["run"].page_data(store, run_id)["stats"]["run-eager"]


def test_a_scraped_vllm_runs_padding_and_replays_read_unknown_not_zero_or_graph(store, pages):
    run_id = scraped_vllm_run(store)
    shown = pages["run"].page_data(store, run_id)
    assert shown["summary"]["padding_known"] is False and shown["summary"]["decode_padded_ratio"] is None
    assert shown["stats"]["run-padded"] == "not in /metrics"
    assert shown["stats"]["run-eager"] == "10.0%"
    names = [t["name"] for t in shown["figures"]["run-mode-mix"].to_dict()["data"]]
    assert "graph" not in names and "padded" not in names
    assert names == ["graph, padded or not (/metrics cannot tell)", "eager"]
    [row] = [r for r in pages["runs"].page_data(store) if r["run_id"] == run_id]
    assert row["padded_pct"] is None and row["padded_pct__shown"] == "not in /metrics"
    [fleet_row] = pages["fleet"].page_data(store, period="all")["runs"]
    assert fleet_row["decode_padded_ratio"] is None and fleet_row["padded_pct__shown"] == "not in /metrics"


def test_a_scraped_run_whose_capture_list_is_known_keeps_its_padding(store, pages):
    run_id = scraped_vllm_run(store, capture_sizes=[1, 2, 4, 8])
    shown = pages["run"].page_data(store, run_id)
    assert shown["summary"]["padding_known"] is True
    assert shown["stats"]["run-padded"] != "not in /metrics"


def test_a_run_without_steps_shows_no_steps_not_zero_percent(store, pages):
    run_id = failed_run_without_steps(store)
    shown = pages["run"].page_data(store, run_id)
    assert shown["stats"]["run-eager"] == "no steps"
    [row] = [r for r in pages["runs"].page_data(store) if r["run_id"] == run_id]
    assert row["eager_pct"] is None and row["eager_pct__shown"] == "no steps"


# -- the fleet groups and compares by engine version -----------------------------------------

def import_vllm_version(store, version: str, hour: int) -> str:
    """The serving fixture as a run of vLLM ``version`` started at ``hour`` (its own run)."""
    from replayscope.collector.importers import parse_vllm_text
    from replayscope.collector.ingest import ingest_events, ingest_run

    text = (FIXTURES / VLLM_SERVING).read_text().replace("0.13.0", version)
    text = text.replace("12-02 16:", f"12-02 {hour:02d}:")
    [run] = parse_vllm_text(text, path=f"vllm-{version}-{hour}.log", mtime=VLLM_MTIME).runs
    ingest_run(store, run.run)
    ingest_events(store, run.run["run_id"], run.events)
    return run.run["run_id"]


def test_an_imported_vllm_runs_version_is_the_one_its_log_names(store, pages):
    from replayscope.collector.models import queries

    run_id = import_fixture(store, "vllm", VLLM_SERVING)
    assert queries.run_summary(store, run_id)["version"] == "vllm 0.13.0"
    shown = pages["fleet"].page_data(store, period="all")
    assert [g["version"] for g in shown["groups"]] == ["vllm 0.13.0"]
    assert [r["version__shown"] for r in shown["runs"]] == ["vllm 0.13.0"]      # not "not recorded"


def test_the_fleet_groups_filters_and_compares_an_engine_upgrade_by_version(store, pages):
    from replayscope.collector.analysis import regressions

    old = [import_vllm_version(store, "0.12.0", hour) for hour in (10, 11, 12)]
    new = import_vllm_version(store, "0.13.0", 16)
    shown = pages["fleet"].page_data(store, period="all")
    assert sorted(g["version"] for g in shown["groups"]) == ["vllm 0.12.0", "vllm 0.13.0"]
    assert shown["options"]["version"] == ["vllm 0.12.0", "vllm 0.13.0"]
    only_new = pages["fleet"].page_data(store, period="all", version="vllm 0.13.0")
    assert [r["run_id"] for r in only_new["runs"]] == [new]
    # the upgrade is compared with the earlier version's runs, and says so
    result = regressions.run_regressions(store, new)
    assert sorted(result["baseline"]["runs"]) == sorted(old) and result["baseline"]["versions"] == ["vllm 0.12.0"]
    assert result["version_change"] == "vllm 0.12.0 → vllm 0.13.0"
    assert regressions.run_regressions(store, old[-1])["version_change"] is None


def test_a_traced_runs_unaccounted_start_up_points_at_the_tracers_own_timings(store):
    """A traced SGLang server's 20 s before its first capture: the advice names the diagnostic that
    says what the tracer itself took there; an imported log's gap does not (nothing traced it)."""
    from replayscope.collector.analysis.diagnosis import diagnose_run
    from replayscope.collector.ingest import ingest_events, ingest_run
    from replayscope.contract.events_file import read_events_file

    recorded = read_events_file(Path(__file__).resolve().parents[1] / "engines" / "fixtures"
                                / "sglang-0.5.17-serve-traced.jsonl")
    ingest_run(store, recorded.run)
    ingest_events(store, recorded.run["run_id"], recorded.events)
    [traced] = [f for f in diagnose_run(store, recorded.run["run_id"]).findings if f.cause == "unaccounted"]
    assert any(a.startswith("REPLAYSCOPE_TRACE_TIMINGS=1 in the traced command's environment")
               for a in traced.actions["replayscope"])
    [logged] = [f for f in diagnose_run(store, import_fixture(store, "vllm", VLLM_SERVING)).findings
                if f.cause == "unaccounted"]
    assert not any("REPLAYSCOPE_TRACE_TIMINGS" in a for a in logged.actions["replayscope"])
