"""Each page's data comes from the query layer: checked against a store filled by ingest."""

import pytest

from tests.app import synthetic


@pytest.fixture
def pages(filled):
    from replayscope.app.server import create_server
    from replayscope.collector.settings import Settings

    create_server(filled, Settings(run_services=False))     # binds the store, registers pages
    from replayscope.app.pages import advisor, alerts, run, runs, startup
    return {"runs": runs, "run": run, "startup": startup, "advisor": advisor, "alerts": alerts}


def test_runs_rows_carry_the_query_layers_numbers(filled, pages):
    from replayscope.collector.models import queries

    rows = {r["run_id"]: r for r in pages["runs"].page_data(filled)}
    runs = queries.list_runs(filled)
    assert len(runs) == 2 and set(rows) == {r["run_id"] for r in runs}       # the loop below runs
    for run in runs:
        row = rows[run["run_id"]]
        assert row["steps"] == run["steps"]
        assert row["eager_pct"] == round(run["decode_eager_ratio"] * 100, 1)    # the decode stages' share
        assert row["capture_s"] == run["capture_total_s"]


def test_run_page_has_every_chart_and_explains_every_reason(filled, pages):
    from replayscope.collector.models import queries

    data = pages["run"].page_data(filled, "syn-1")
    summary = queries.run_summary(filled, "syn-1")
    assert data["stats"]["run-steps"] == f"{summary['steps']:,}"
    assert set(data["figures"]) == set(pages["run"].FIGURE_IDS)
    assert [cost["reason"] for cost, _ in data["reasons"]] == [
        r["reason"] for r in queries.reason_breakdown(filled, "syn-1")]
    hist = data["figures"]["run-batch-hist"].to_plotly_json()["data"]
    captured = next(t for t in hist if t["name"] == "captured size")
    assert list(captured["x"]) == list(synthetic.CAPTURE_SIZES)
    assert pages["run"].page_data(filled, "nope") is None


def test_run_page_draws_each_applicable_alert_threshold(filled, pages):
    from replayscope.collector.alerting.alerts import create_rule
    from tests.stores import without_builtin_rule

    without_builtin_rule(filled)
    create_rule(filled, {"name": "all", "threshold": 0.2})
    create_rule(filled, {"name": "others", "threshold": 0.5, "run_pattern": "prod-*"})
    fig = pages["run"].page_data(filled, "syn-1")["figures"]["run-eager-ratio"].to_plotly_json()
    lines = [s["y0"] for s in fig["layout"]["shapes"] if s["type"] == "line"]
    assert lines == [0.2]


def test_startup_page_diagnoses_and_compares_with_a_baseline(filled, pages):
    data = pages["startup"].page_data(filled, "syn-base", baseline="syn-1")
    assert (data["findings"][0]["cause"], data["findings"][0]["failure_class"]) == ("failure", "oom")
    assert [c["graph_bs"] for c in data["failed"]] == [32]
    diff = {d["item"]: d for d in data["diff"]}
    assert diff["capture bs 16"]["diff_s"] == pytest.approx(1.0)
    assert diff["phase load_weights"]["diff_s"] == pytest.approx(0.0)


def test_advisor_page_follows_the_budget(filled, pages):
    data = pages["advisor"].page_data(filled, "syn-1", budget=3)
    assert data["advice"]["budget"] == 3 and len(data["advice"]["sizes"]) <= 3
    assert [r["plan"] for r in data["rows"]] == ["current", "proposed"]
    held = data["advice"]["plans"][1]["held_back"]
    assert data["rows"][1]["eager"] == held["eager_share"] and data["rows"][1]["cost"] == held["cost_per_step"]


def test_the_advisor_page_labels_an_estimated_gain_estimated(tmp_path):
    """An imported vLLM run timed no steps: the table's step time, the verdict and the
    objective say the figures are the estimate's."""
    import subprocess
    import sys
    from pathlib import Path

    from replayscope.app.server import create_server
    from replayscope.collector.models import queries
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    repo = Path(__file__).resolve().parents[2]
    url = f"sqlite:///{tmp_path / 'rs.db'}"
    subprocess.run([sys.executable, "-m", "replayscope", "import", "vllm", "--db", url,
                    str(repo / "tests/importers/fixtures/vllm_v013_cudagraph_metrics_serving.log")],
                   cwd=repo, check=True, timeout=120, capture_output=True)
    store = Store.open(url)
    try:
        create_server(store, Settings(run_services=False))
        from replayscope.app.pages import advisor
        (run_id,) = [r["run_id"] for r in queries.list_runs(store)]
        shown = advisor.page_data(store, run_id)
        assert shown["estimated"] is True
        cost = next(col for col in advisor.plan_columns(shown["scored"], shown["unit"], True) if col.field == "cost")
        assert cost.header == "step time (estimated, held back)"
        page = str(advisor.layout(run_id))
        assert "estimated, held back" in page and "Estimated (no step was timed)" in page
        assert "Left off, the gain does not pay for them: " in page
    finally:
        store.dispose()


def test_alerts_page_lists_rules_and_history(filled, pages):
    from replayscope.collector.alerting.alerts import BUILTIN_EAGER_RATIO_RULE, create_rule

    create_rule(filled, {"name": "eager-high", "threshold": 0.1, "window_s": 3600, "min_steps": 10})
    data = pages["alerts"].page_data(filled)
    assert [r["name"] for r in data["rules"]] == [BUILTIN_EAGER_RATIO_RULE["name"], "eager-high"]   # every store's
    assert data["rules"][1]["run_pattern"] == "(all runs)"


def test_padding_share_is_over_decode_tokens_on_the_header_the_chart_and_the_runs_list(filled, pages):
    from replayscope.app import charts
    from replayscope.app import components as c
    from replayscope.collector.models import queries

    summary = queries.run_summary(filled, "syn-1")
    per_size = charts.padding_by_size(queries.batch_histogram(filled, "syn-1", stage="decode"))
    padded = sum(r["padded_tokens"] for r in per_size)
    computed = sum(r["num_tokens"] + r["padded_tokens"] for r in per_size)
    assert summary["decode_padded_ratio"] == padded / computed          # the chart's sizes add up to the header
    assert summary["padded_ratio"] < 0.6 * summary["decode_padded_ratio"]   # prefill tokens are left out
    data = pages["run"].page_data(filled, "syn-1")
    assert data["stats"]["run-padded"] == c.pct(padded / computed)
    assert data["scope"] == "decode"                                     # a runner run: decode steps only
    assert pages["run"].padding_note(data["scope"]) == "of decode tokens: padded ÷ (decode + padded)"
    shown = data["figures"]["run-padding"].to_plotly_json()["data"][0]["y"]
    assert list(shown) == [r["share"] for r in per_size]
    row = next(r for r in pages["runs"].page_data(filled) if r["run_id"] == "syn-1")
    assert row["padded_pct__shown"] == data["stats"]["run-padded"]
    assert row["padded_pct"] == round(padded / computed * 100, 1)
    header = next(col.header for col in pages["runs"].COLUMNS if col.field == "padded_pct")
    assert "decode" in header


def _run_without_capture_times(store, run_id, source):
    from replayscope.collector.ingest import ingest_events, ingest_run

    record = synthetic.run_record(run_id, run_id, source=source)
    ingest_run(store, record)
    t0 = record["started_at"]
    events = [{"seq": 0, "ts": t0 + 1, "kind": "phase", "phase": "load_weights", "duration_s": 1.0,
               "start_ts": t0},
              {"seq": 1, "ts": t0 + 2, "kind": "capture", "graph_bs": 8, "stage": "decode", "duration_s": None,
               "pool_bytes": None, "pool_delta_bytes": None, "status": "ok"}]
    events += synthetic.step_events(t0 + 3, 50, seq0=10)
    ingest_events(store, run_id, events)


def test_unknown_capture_time_says_not_in_the_log_or_not_measured_by_source(store, pages):
    from replayscope.collector.models import queries

    _run_without_capture_times(store, "from-log", "vllm-log")
    _run_without_capture_times(store, "from-runner", "runner")
    assert queries.run_summary(store, "from-log")["capture_total_s"] is None
    rows = {r["run_id"]: r for r in pages["runs"].page_data(store)}
    assert rows["from-log"]["capture_s"] is None
    assert rows["from-log"]["capture_s__shown"] == "not in the log"
    assert rows["from-runner"]["capture_s__shown"] == "not measured"
    assert pages["run"].page_data(store, "from-log")["stats"]["run-capture"] == "not in the log"
    assert pages["run"].page_data(store, "from-runner")["stats"]["run-capture"] == "not measured"
    startup = pages["startup"].page_data(store, "from-log")
    figure = startup["capture_fig"].to_plotly_json()        # no time at all: the chart says so, a table lists it
    assert figure["data"] == [] and "not in the log" in figure["layout"]["annotations"][0]["text"]
    [row] = pages["startup"].capture_rows(startup["captures"], "not in the log", startup["size_name"])
    assert row["duration_s__shown"] == "not in the log" and row["pool_delta_bytes__shown"] == "not in the log"
    for text in list(pages["run"].page_data(store, "from-log")["stats"].values()):
        assert text not in ("–", "0 s", "0.0 ms")


def test_startup_page_shows_ranks_side_by_side_from_an_imported_log(filled, pages, tmp_path):
    from replayscope.collector.models import queries
    from replayscope.collector.ingest import ingest_events, ingest_run
    from tests.importers.conftest import FIXTURES, import_whole

    result = import_whole("sglang", FIXTURES / "sglang_new.log")
    (run,) = result.runs
    ingest_run(filled, run.run)
    ingest_events(filled, run.run["run_id"], run.events)
    rows = {r["rank_label"]: r for r in pages["startup"].rank_rows(filled, run.run["run_id"])}
    assert set(rows) == {"TP0", "TP1"}
    assert (rows["TP0"]["capture"], rows["TP1"]["capture"]) == (2.58, 3.01)   # TP1 captured slower
    kv = pages["startup"].RANK_COLUMNS[3]
    assert kv.field == "kv_cache"
    assert kv.shown(rows["TP1"]) == "time not in the log · 12.5 GiB"
    assert pages["startup"].RANK_COLUMNS[2].shown(rows["TP0"]) == "not in the log"   # no compile line
    assert queries.run_summary(filled, run.run["run_id"])["capture_total_s"] == 2.58  # headline rank only


def test_startup_page_shows_the_sizes_and_kv_cache_an_imported_log_states(filled, pages):
    """The count of capture sizes from a bar, the largest only where the log prints it, the KV
    cache in tokens and blocks; what the log does not state reads "not in the log"."""
    from replayscope.collector.models import queries
    from replayscope.collector.ingest import ingest_events, ingest_run
    from tests.importers.conftest import FIXTURES, import_whole

    shown = {}
    for engine, name in (("vllm", "vllm_issue32611_v1_kv_tokens_and_bar_count.log"),
                         ("sglang", "sglang_pr11275_stops_inside_capture_bar.log"),
                         ("vllm", "vllm_old.log")):
        (run,) = import_whole(engine, FIXTURES / name).runs
        ingest_run(filled, run.run)
        ingest_events(filled, run.run["run_id"], run.events)
        shown[name] = pages["startup"].log_figures(queries.run_summary(filled, run.run["run_id"]))
    assert shown["vllm_issue32611_v1_kv_tokens_and_bar_count.log"] == [
        "capture sizes: 51 (largest not in the log)", "KV cache tokens: 524,416",
        "KV cache GPU blocks: not in the log"]
    assert shown["sglang_pr11275_stops_inside_capture_bar.log"] == [
        "capture sizes: 52 (largest 512)", "KV cache tokens: not in the log", "KV cache GPU blocks: not in the log"]
    assert shown["vllm_old.log"] == ["capture sizes: 35 (largest not in the log)", "KV cache tokens: not in the log",
                                     "KV cache GPU blocks: 27,000", "KV cache CPU blocks: 2,048"]
    assert pages["startup"].log_figures(queries.run_summary(filled, "syn-1")) is None     # not from a log



def test_a_scraped_vllm_run_says_what_metrics_cannot_show_and_shows_no_share_of_it(store, pages):
    """Issue 34: a scrape of vLLM's /metrics stored 104 graph steps and its page said PADDING
    0.0 %; its modes, padding and reasons are not in /metrics."""
    from replayscope.collector.importers.scrape import Scraper
    from replayscope.collector.ingest import ingest_events, ingest_run
    from tests.importers.test_scrape_vllm import ISSUE_33_STEPS, FakeVLLM

    server = FakeVLLM()
    try:
        clock = iter([1000.0, 1010.0])
        scraper = Scraper(server.url, clock=lambda: next(clock), max_capture_size=32)
        first = scraper.poll()
        server.serve(ISSUE_33_STEPS, prompt=288, generated=626, requests=24)
        events = first + scraper.poll()
    finally:
        server.close()
    ingest_run(store, scraper.run)
    ingest_events(store, scraper.run["run_id"], events)
    data = pages["run"].page_data(store, scraper.run["run_id"])
    assert data["stats"]["run-eager"] == "not measured" and data["stats"]["run-padded"] != "0.0%"
    text = " ".join(str(p.children) for p in pages["run"].header(data["summary"]) if hasattr(p, "children"))
    assert "/metrics, which cannot show how each step ran" in text and "padding" in text
    assert "why a step ran eager" in text and "103 steps of unknown mode" in text
    row = next(r for r in pages["runs"].page_data(store) if r["run_id"] == scraper.run["run_id"])
    assert row["eager_pct"] is None and row["padded_pct"] is None
