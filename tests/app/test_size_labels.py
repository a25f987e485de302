"""Issue 33 ("noticed and left alone"): an engine's prefill and mixed CUDA graphs are keyed by
tokens, not by a batch of sequences. The run page's pool chart, the startup page's captures
(table, chart, waterfall, failures, baseline difference) and the diagnosis's sentences name
them "N tokens", as ``reasons.size_label`` does; decode captures and every runner capture stay
"bs N". The stored rows are not changed: only their words."""

from __future__ import annotations

from pathlib import Path

import pytest

from replayscope.contract.events_file import read_events_file
from tests.app.test_engine_run_pages import import_fixture

ENGINES = Path(__file__).resolve().parents[1] / "engines" / "fixtures"
TRACED_VLLM = ENGINES / "vllm-0.25.0-serve-traced.jsonl"      # a real vllm serve traced on an H200
VLLM_LOG = "vllm_v013_cudagraph_metrics_serving.log"           # 86 captures, no time per size
SGLANG_PIECEWISE = "sglang_piecewise.log"                      # prefill graphs (tokens) and decode ones
VLLM_MIXED_OOM = "vllm_capture_oom.log"                        # the mixed capture of 2 tokens ran out of memory


@pytest.fixture
def pages(store):
    from replayscope.app.server import create_server
    from replayscope.collector.settings import Settings

    create_server(store, Settings(run_services=False))
    from replayscope.app.pages import run, startup
    return {"run": run, "startup": startup}


def import_events(store, path: Path) -> str:
    from replayscope.collector.ingest import ingest_events, ingest_run

    events = read_events_file(path)
    ingest_run(store, events.run)
    ingest_events(store, events.run["run_id"], events.events)
    return events.run["run_id"]


def pool_labels(pages, store, run_id: str) -> list[str]:
    figure = pages["run"].page_data(store, run_id)["figures"]["run-pool"].to_plotly_json()
    return list(figure["data"][0]["x"])


def test_the_pool_chart_of_a_traced_vllm_run_names_its_piecewise_graphs_in_tokens(store, pages):
    run_id = import_events(store, TRACED_VLLM)
    labels = pool_labels(pages, store, run_id)
    assert "32 tokens (mixed)" in labels and "8 tokens (mixed)" in labels
    assert "bs 16 (decode)" in labels                      # a decode graph is a batch of sequences
    assert not any(label.startswith("bs ") and "mixed" in label for label in labels)


def test_the_pool_chart_of_an_sglang_run_names_its_prefill_graphs_in_tokens(store, pages):
    run_id = import_fixture(store, "sglang", SGLANG_PIECEWISE)
    labels = pool_labels(pages, store, run_id)
    assert labels[:2] == ["512 tokens (prefill)", "256 tokens (prefill)"]
    assert all(label.startswith("bs ") for label in labels if label.endswith("(decode)"))


def test_a_runner_run_keeps_batch_sizes_on_the_pool_chart(store, pages):
    from tests.app import synthetic

    synthetic.fill(store, "syn-1", steps=50)
    labels = pool_labels(pages, store, "syn-1")
    assert labels and all(label.startswith("bs ") for label in labels)


def find(component, id_: str):
    """The component of ``id_`` in a layout."""
    if getattr(component, "id", None) == id_:
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, (list, tuple)) else [children] if children is not None else []:
        found = find(child, id_)
        if found is not None:
            return found
    return None


def test_the_startup_captures_table_names_each_size_in_its_unit(store, pages):
    run_id = import_fixture(store, "vllm", VLLM_LOG)
    table = find(pages["startup"].layout(run_id), "startup-captures-table")
    headers = [col["headerName"] for col in table.columnDefs]
    assert "batch size" not in headers and headers[0] == "size"
    rows = table.rowData
    shown = {(r["stage"], r["graph_bs"]): r["graph_bs__shown"] for r in rows}
    assert shown[("mixed", 512)] == "512 tokens" and shown[("decode", 256)] == "bs 256"
    assert shown[("mixed", 1)] == "1 token"
    assert [r["graph_bs"] for r in rows] == [x["graph_bs"] for x in pages["startup"].data.queries.captures(
        store, run_id)]                                      # the number itself, as stored, still sorts


def test_the_startup_charts_and_baseline_name_prefill_graphs_in_tokens(store, pages):
    run_id = import_fixture(store, "sglang", SGLANG_PIECEWISE)
    base_id = import_events(store, TRACED_VLLM)
    shown = pages["startup"].page_data(store, run_id, baseline=base_id)
    bars = [b for b in shown["waterfall"].to_plotly_json()["data"] if b["name"] == "capture"][0]
    assert list(bars["y"]) == ["capture 512 tokens (prefill)", "capture 256 tokens (prefill)"]  # decode: untimed
    capture = shown["capture_fig"].to_plotly_json()
    assert "512 tokens (prefill)" in capture["data"][0]["x"]
    assert capture["layout"]["xaxis"]["title"]["text"] == "decode batch size, others as named"
    hover = {tuple(d) for d in capture["data"][0]["customdata"]}
    assert ("512 tokens (prefill)", "3.00 s") in hover
    items = {d["item"] for d in shown["diff"]}
    assert {"capture 512 tokens (prefill)", "capture 32 tokens (mixed)"} <= items     # the baseline's in its words
    assert "capture bs 16" in items                                                      # its decode graphs


def test_a_failed_mixed_capture_is_named_in_tokens_on_the_page_and_in_the_diagnosis(store, pages):
    run_id = import_fixture(store, "vllm", VLLM_MIXED_OOM)
    shown = pages["startup"].page_data(store, run_id)
    failures = str(pages["startup"]._failures(shown))
    assert "capture of 2 tokens (mixed) failed" in failures and "bs 2" not in failures
    [finding] = [f for f in shown["findings"] if f["cause"] == "failure"]
    assert finding["title"].endswith("during capture at 2 tokens on DP0")
    assert any(e["text"].startswith("capture of 2 tokens (mixed) on DP0 failed") for e in finding["evidence"])
    assert finding["where"]["graph_bs"] == 2                # what is stored and returned is the number


def test_the_diagnosis_marks_a_capture_by_its_stage_and_unit(store):
    from replayscope.collector.analysis.diagnosis import facts_for_run
    from replayscope.collector.analysis.diagnosis.timeline import startup_of

    run_id = import_fixture(store, "sglang", SGLANG_PIECEWISE)
    marks = {m.label for m in startup_of(facts_for_run(store, run_id)).marks}
    assert "the capture of 512 tokens (prefill)" in marks and "the capture of bs 4" in marks


def test_size_words_is_the_one_rule():
    from replayscope.collector.analysis.reasons import size_in_tokens, size_label, size_namer, size_words

    assert size_words("mixed", 32, source="vllm-log") == "32 tokens"
    assert size_words("prefill", 256, 511, source="sglang-metrics") == "256\u2013511 tokens"
    assert size_words("mixed", 1, source="vllm-log") == "1 token"                # not "1 tokens"
    assert size_words("mixed", 1, 3, source="vllm-log") == "1\u20133 tokens"
    assert size_words("decode", 32, source="vllm-log") == "bs 32"
    assert size_words("prefill", 8, source="runner") == "bs 8"              # the runner's sizes are batches
    assert size_words(None, 4, source="vllm-log") == "bs 4"                 # no stage: a batch size
    assert size_label("mixed", 8, 15, source="vllm-log") == "mixed 8\u201315 tokens"
    traced = {"trace": {"recipes": ["vllm-v1"]}}
    assert size_in_tokens("mixed", "trace", traced) and not size_in_tokens("mixed", "trace", {})
    assert size_namer("trace", traced)("mixed", 32) == "32 tokens"


def test_a_finished_engine_run_names_its_failed_prefill_captures_in_tokens():
    from replayscope.collector.analysis.diagnosis import diagnose
    from tests.app.test_diagnosis import capture, facts

    caps = [capture(512, 3.0, status="failed", error="torch.OutOfMemoryError: CUDA out of memory", stage="prefill"),
            capture(256, 2.0, stage="prefill"), capture(8, 0.5)]
    [first] = [f for f in diagnose(facts(captures=caps, source="sglang-log")).findings if f.cause == "failure"]
    assert first.title.endswith("when capturing 512 tokens; the run dropped it and went on")
    caps[2].update(status="failed", error=caps[0]["error"])            # a decode size failed as well
    [first] = [f for f in diagnose(facts(captures=caps, source="sglang-log")).findings if f.cause == "failure"]
    assert "when capturing bs 8 and 512 tokens;" in first.title        # each in its own unit
    [first] = [f for f in diagnose(facts(captures=caps[:1], source="runner")).findings if f.cause == "failure"]
    assert "when capturing bs 512;" in first.title                     # the runner's sizes are batches


def test_the_batch_histograms_captured_marks_name_each_graph_in_its_unit(store, pages):
    run_id = import_events(store, TRACED_VLLM)
    figure = pages["run"].page_data(store, run_id)["figures"]["run-batch-hist"].to_plotly_json()
    [marks] = [t for t in figure["data"] if t["name"] == "captured size"]
    names = dict(zip([str(x) for x in marks["x"]], marks["customdata"]))
    assert names["16"] == "16 tokens (mixed), bs 16"            # vLLM captured both graphs of 16
    assert names["32"] == "32 tokens (mixed)"
    assert "%{customdata}" in marks["hovertemplate"] and "bs %{x}" not in marks["hovertemplate"]


def test_the_capture_chart_of_an_engine_without_decode_graphs_names_its_axis_for_what_it_draws():
    from replayscope.app import charts
    from replayscope.collector.analysis.reasons import size_namer

    rows = [{"graph_bs": bs, "stage": "mixed", "duration_s": 0.5, "status": "ok", "pool_delta_bytes": None}
            for bs in (1, 8)]
    figure = charts.capture_figure(rows, "not in the log", size_name=size_namer("vllm-log")).to_plotly_json()
    assert list(figure["data"][0]["x"]) == ["1 token (mixed)", "8 tokens (mixed)"]
    assert figure["layout"]["xaxis"]["title"]["text"] == "capture size"       # not "decode batch size"


# The run page's batch histogram and padding chart, and the advisor: a step's raw size on an
# engine's run is its tokens where the step is mixed (or prefill), a batch size of sequences
# where it is decode; each is named in its own unit, through the same rule.

def run_figures(pages, store, run_id: str) -> tuple[dict, dict]:
    figures = pages["run"].page_data(store, run_id)["figures"]
    return figures["run-batch-hist"].to_plotly_json(), figures["run-padding"].to_plotly_json()


def test_the_batch_histogram_of_a_traced_vllm_run_names_each_stages_sizes_in_their_unit(store, pages):
    run_id = import_events(store, TRACED_VLLM)
    hist, padding = run_figures(pages, store, run_id)
    for figure in (hist, padding):
        assert figure["layout"]["xaxis"]["title"]["text"] == "batch size (decode) / tokens (mixed)"
    bars = [t for t in hist["data"] if t["type"] == "bar"]
    hovers = {words for t in bars for words, _count in t["customdata"]}
    assert {"bs 16 (decode)", "16 tokens (mixed)", "57 tokens (mixed)", "bs 3 (decode)"} <= hovers
    assert "bs 57 (decode)" not in hovers and not any(h.startswith("bs ") and "mixed" in h for h in hovers)
    assert all("%{customdata[0]}" in t["hovertemplate"] and "bs %{x}" not in t["hovertemplate"] for t in bars)
    counts = {(t["name"], words): count for t in bars for words, count in t["customdata"]}
    assert counts[("graph (decode)", "bs 16 (decode)")] == "11 steps"
    assert counts[("graph (mixed)", "16 tokens (mixed)")] == "1 step"                  # not "1 steps"
    # the 16 sizes of decode steps and mixed steps are two bars, stacked: no step lost or merged
    steps = {(t["name"], x): y for t in bars for x, y in zip(t["x"], t["y"])}
    assert steps[("graph (decode)", 16)] == 11 and steps[("graph (mixed)", 16)] == 1
    assert sum(steps.values()) == 90
    shares = {words[3]: words[0] for t in padding["data"] for words in t["customdata"]}
    assert shares["12 tokens (mixed)"] == "25.0%" and shares["bs 12 (decode)"] == "25.0%"
    assert all("bs %{x}" not in t["hovertemplate"] for t in padding["data"])


def test_an_imported_vllm_log_names_its_mixed_batches_in_tokens_on_both_charts(store, pages):
    run_id = import_fixture(store, "vllm", VLLM_LOG)
    hist, padding = run_figures(pages, store, run_id)
    assert hist["layout"]["xaxis"]["title"]["text"] == "batch size (decode) / tokens (mixed)"
    hovers = {words for t in hist["data"] if t["type"] == "bar" for words, _count in t["customdata"]}
    assert hovers and all(h.endswith(("tokens (mixed)", "token (mixed)")) or h.startswith("bs ") and
                          h.endswith("(decode)") for h in hovers)
    shown = pages["run"].data.queries.batch_histogram(store, run_id, stage="decode+mixed")
    assert sum(y for t in hist["data"] if t["type"] == "bar" for y in t["y"]) == sum(r["steps"] for r in shown)


def test_runner_and_sglang_runs_keep_their_batch_size_charts_as_they_were(store, pages):
    from tests.app import synthetic

    synthetic.fill(store, "syn-1", steps=200)
    sglang = import_fixture(store, "sglang", "sglang_v046_decode_sample_serving.log")   # decode steps only
    for run_id in ("syn-1", sglang):
        hist, padding = run_figures(pages, store, run_id)
        assert hist["layout"]["xaxis"]["title"]["text"] == "batch size (raw)"
        bars = [t for t in hist["data"] if t["type"] == "bar"]
        assert bars and all(set(t) == {"type", "x", "y", "name", "marker"} for t in bars)   # plotly's own hover
        assert [t["name"] for t in bars] == [m for m in ("graph", "padded", "eager") if m in {t["name"] for t in bars}]
        if padding["data"]:
            [trace] = padding["data"]
            assert trace["name"] == "padding share" and trace["hovertemplate"].startswith("bs %{x}: ")
            assert padding["layout"]["xaxis"]["title"]["text"] == "batch size (raw)"


def test_size_title_names_each_unit_with_its_stages():
    from replayscope.app.charts import size_title
    from replayscope.collector.analysis.reasons import size_in_tokens

    def title(stages, source):
        return size_title(stages, lambda stage: size_in_tokens(stage, source))
    assert title(["decode", "mixed"], "vllm-log") == "batch size (decode) / tokens (mixed)"
    assert title(["prefill", "mixed"], "sglang-log") == "tokens (prefill, mixed)"
    assert title(["decode", "mixed"], "runner") is None and title(["decode"], "vllm-log") is None
    assert size_in_tokens("decode+mixed", "vllm-log")            # a list serving both: vLLM's tokens
    assert not size_in_tokens("decode+mixed", "runner") and not size_in_tokens("decode", "vllm-log")


def advisor_page(store, run_id: str) -> dict:
    from replayscope.app.pages import advisor

    return advisor.page_data(store, run_id)


def test_the_advisor_names_a_traced_vllm_runs_sizes_in_tokens(store, pages):
    from replayscope.app.pages import advisor

    run_id = import_events(store, TRACED_VLLM)
    shown = advisor_page(store, run_id)
    advice = shown["advice"]
    assert advice["stage"] == "decode+mixed"
    pool = advice["plans"][0]["pool_bytes"]["basis"]
    assert pool.startswith("32 tokens needed 2.0 MiB captured first") and "bs " not in pool
    assert "an eager step 6.99 ms at 37 tokens to 10.30 ms at 57 tokens" in advice["objective"]["basis"]
    assert "57 tokens (its pool would be larger" in str(advisor.dropped(advice))
    from replayscope.collector.analysis.advisor.report import format_text
    assert "  left off: 57 tokens (its pool would be larger" in format_text(advice)     # replayscope advise
    assert [d["named"] for d in advice["dropped"]] == ["57 tokens", "40 tokens"]
    figure = shown["figure"].to_plotly_json()
    hovers = {words for t in figure["data"] if t["type"] == "bar" for words in t["customdata"]}
    bars = {words.split(":")[0] for words in hovers}
    assert "37 tokens" in bars and not any(w.startswith("bs ") for w in bars)
    assert "57 tokens: 1 step" in hovers and "37 tokens: 2 steps" in hovers     # not "1 steps"
    [proposed] = [t for t in figure["data"] if t["name"] == "proposed size"]
    assert "32 tokens" in proposed["customdata"] and proposed["hovertemplate"].startswith("proposed %{customdata}")


def test_the_advisor_names_an_imported_vllm_logs_sizes_in_tokens_and_others_in_batch_sizes(store, pages):
    from tests.app import synthetic

    run_id = import_fixture(store, "vllm", VLLM_LOG)
    prices = [p["pool_bytes"]["basis"] for p in advisor_page(store, run_id)["advice"]["plans"]]
    assert prices[0].startswith("512 tokens needed 696.3 MiB captured first")
    assert prices[1].startswith("32 tokens' footprint scaled from 512 tokens' 696.3 MiB in proportion")
    sglang = import_fixture(store, "sglang", "sglang_v046_decode_sample_serving.log")   # its list: requests
    assert advisor_page(store, sglang)["advice"]["plans"][0]["pool_bytes"]["basis"].startswith(
        "bs 32 needed 419.8 MiB captured first")
    synthetic.fill(store, "syn-1", steps=200)
    shown = advisor_page(store, "syn-1")
    assert all("tokens" not in p["pool_bytes"]["basis"] + p["capture_s"]["basis"] for p in shown["advice"]["plans"])
    bars = {words.split(":")[0] for t in shown["figure"].to_plotly_json()["data"] if t["type"] == "bar"
            for words in t["customdata"]}
    assert bars and all(w.startswith("bs ") for w in bars)


def test_the_advisor_axis_is_in_the_unit_its_sizes_are_named_in(store, pages):
    """The histogram's axis follows the same rule as its bars: tokens where vLLM's list serves
    mixed batches, requests for a vLLM run whose steps are all decode (its sizes read 'bs N')."""
    from replayscope.collector.ingest import ingest_events, ingest_run

    both = advisor_page(store, import_events(store, TRACED_VLLM))
    assert both["advice"]["stage"] == "decode+mixed"
    assert both["figure"].to_plotly_json()["layout"]["xaxis"]["title"]["text"] == "batch size (tokens)"
    recorded = read_events_file(TRACED_VLLM)
    run = {**recorded.run, "run_id": "vllm-decode-only"}
    ingest_run(store, run)
    ingest_events(store, run["run_id"], [e for e in recorded.events
                                         if not (e["kind"] == "step" and e["stage"] != "decode")])
    decode = advisor_page(store, run["run_id"])
    assert decode["advice"]["stage"] == "decode" and decode["size_name"](16) == "bs 16"
    assert decode["figure"].to_plotly_json()["layout"]["xaxis"]["title"]["text"] == "batch size (requests)"
