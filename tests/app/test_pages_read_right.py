"""Issue 26's page fixes that a picture cannot show: the eager-ratio line is the alert rule's own
judgement, bars fit a long run, a gain is not reported as a cost, every rule kind is listed and
made from the form, and the pages reach the collector only through ``replayscope.app.data``."""

import ast
from pathlib import Path

import pytest

from tests.app import synthetic

APP = Path(__file__).resolve().parents[2] / "app"
RULE = {"name": "decode eager", "threshold": 0.3, "window_s": 10, "min_steps": 20, "for_s": 0,
        "keep_firing_for_s": 0}


@pytest.fixture
def pages(store):
    from replayscope.app.server import create_server
    from replayscope.collector.settings import Settings

    create_server(store, Settings(run_services=False))
    from replayscope.app.pages import alerts, run, startup
    return {"run": run, "alerts": alerts, "startup": startup}


def _ten_minute_run(store, run_id="long"):
    """600 s of 5 decode steps a second, all eager from +200 s to +300 s, and an eager prefill
    step every second throughout (which a count over every stage would add)."""
    from replayscope.collector.ingest import ingest_events, ingest_run

    record = synthetic.run_record(run_id, run_id)
    ingest_run(store, record)
    t0, events, seq = record["started_at"], [], 0
    for s in range(600):
        for k in range(5):
            eager = 200 <= s < 300
            events.append({"seq": seq, "ts": t0 + s + k * 0.1, "kind": "step", "stage": "decode",
                           "mode": "eager" if eager else "graph", "raw_bs": 40 if eager else 8,
                           "graph_bs": None if eager else 8, "num_tokens": 40 if eager else 8, "padded_tokens": 0,
                           "reason": "batch_too_large" if eager else None, "duration_s": 0.001})
            seq += 1
        events.append({"seq": seq, "ts": t0 + s + 0.5, "kind": "step", "stage": "prefill", "mode": "eager",
                       "raw_bs": 2, "graph_bs": None, "num_tokens": 64, "padded_tokens": 0, "reason": "prefill",
                       "duration_s": 0.004})
        seq += 1
    events.append({"seq": seq, "ts": t0 + 600, "kind": "run_end", "status": "finished"})
    ingest_events(store, run_id, events)
    return t0


def test_the_eager_ratio_line_is_the_rules_judgement_and_its_spans_are_the_rules(store, pages):
    from replayscope.collector.alerting import alerts
    from replayscope.collector.models import queries
    from tests.stores import without_builtin_rule

    without_builtin_rule(store)                   # the rule whose judgement the line draws is RULE alone
    rule = alerts.create_rule(store, RULE, now=0)
    other = alerts.create_rule(store, {"name": "regressed", "kind": "regression", "threshold": 0.2}, now=0)
    t0 = _ten_minute_run(store)
    alerts.evaluate_alerts(store)
    [span] = [e for e in queries.alert_events(store, run_id="long") if e["rule_id"] == rule.id]
    figure = pages["run"].page_data(store, "long")["figures"]["run-eager-ratio"].to_plotly_json()
    [line] = figure["data"]                       # one line: the one eager-ratio rule (not the regression rule)
    assert line["name"].startswith("decode eager: last 10.0 s, ≥ 20 steps")
    ratios = [y for y in line["y"] if y is not None]
    assert max(ratios) == 1.0 and min(ratios) == 0.0     # prefill's eager steps are not in it
    above = [x for x, y in zip(line["x"], line["y"]) if y is not None and y > RULE["threshold"]]
    start = min(above).timestamp()
    assert span["started_at"] - 2 <= start <= span["started_at"] + 2       # it fires where the line crosses
    rects = [s for s in figure["layout"]["shapes"] if s["type"] == "rect"]
    assert len(rects) == 1 and other.id != rule.id
    assert abs(rects[0]["x0"].timestamp() - span["started_at"]) < 1
    [threshold] = [s for s in figure["layout"]["shapes"] if s["type"] == "line"]
    assert threshold["y0"] == RULE["threshold"]
    assert t0 + 190 < span["started_at"] < t0 + 215


def test_a_ten_minute_run_is_not_drawn_in_one_second_hairlines(store, pages):
    _ten_minute_run(store)
    figure = pages["run"].page_data(store, "long")["figures"]["run-mode-mix"].to_plotly_json()
    bars = figure["data"][0]
    assert len(bars["x"]) <= pages["run"].BARS + 1          # + 1: buckets are aligned to the clock
    assert bars["width"] == 0.9 * 5_000            # ms: 5-second buckets, a bar 90 % of one
    assert figure["layout"]["yaxis"]["title"]["text"].startswith("steps per ")


def test_a_gain_is_not_reported_as_a_cost():
    from replayscope.app import components as c

    explanation = {"title": "t", "what": "w", "why": "y", "change": [], "vllm": [], "sglang": []}
    for extra, label in ((-2.6, "What it saved here. "), (1.0, "What it cost here. ")):
        card = c.explanation_card({"reason": "spec_shape", "explanation": explanation, "flags": [],
                                   "compared": {"extra_s": extra}}, "sentence")
        assert card.children[3].children[0].children == label


def test_every_rule_kind_is_listed_with_its_kind_and_made_from_the_form(store, pages):
    from replayscope.collector.alerting import alerts
    from replayscope.collector.models import queries

    form = pages["alerts"].form_data("slower", "regression", "graph_step_s", 0.2, 300, 100, 60, 300, None,
                                     "decode+mixed", "", "", ["on"])
    made = alerts.create_rule(store, form)
    assert made.kind == "regression" and made.metric == "graph_step_s"
    alerts.create_rule(store, pages["alerts"].form_data("eager", "eager_ratio", "graph_step_s", 0.4, 300, 100, 60,
                                                        300, None, "decode+mixed", "", "", ["on"]))
    rows = {r["name"]: r for r in pages["alerts"].rule_rows(queries.alert_rules(store))}
    assert rows["slower"]["kind__shown"] == "regression of graph step time"
    assert rows["eager"]["kind__shown"] == "eager ratio" and rows["eager"]["threshold__shown"] == "40.0%"


def test_pages_reach_the_collector_only_through_app_data():
    """No page imports a collector module, or imports inside a function; no module-global store."""
    for path in sorted((APP / "pages").glob("*.py")) + [APP / "recordings.py", APP / "components.py"]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("replayscope.collector"):
                pytest.fail(f"{path.name} imports {node.module}")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = [n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
                assert not inner, f"{path.name}:{node.lineno} imports inside {node.name}"
    server = (APP / "server.py").read_text()
    assert "GLOBAL_CALLBACK" not in server and "reload" not in server


def test_a_failed_starts_length_is_the_time_to_the_failure(store, pages):
    from replayscope.collector.ingest import ingest_events, ingest_run

    record = synthetic.run_record("failed", "failed")
    ingest_run(store, record)
    t0 = record["started_at"]
    ingest_events(store, "failed", [
        {"seq": 0, "ts": t0 + 50, "kind": "phase", "phase": "load_weights", "duration_s": 50.0, "start_ts": t0},
        {"seq": 1, "ts": t0 + 78, "kind": "phase", "phase": "kv_cache", "duration_s": 28.0, "start_ts": t0 + 50},
        {"seq": 2, "ts": t0 + 95, "kind": "run_end", "status": "failed", "error": "CUDA out of memory",
         "phase": "capture"}])
    shown = pages["startup"].page_data(store, "failed")
    assert shown["diagnosis"]["startup_s"] == 95.0           # wall time: the run's start to its failure
    assert shown["stats"]["startup-total"] == "1 min 35 s to the failure"


def test_a_capture_count_without_sizes_is_not_called_no_captures(pages):
    assert pages["startup"].no_sizes({"count": 86, "total_s": 9.0}) == \
        "the log gives 86 captures in 9.00 s, but no size or time of each"
    assert pages["startup"].no_sizes({"count": 0, "total_s": None}) == "no captures reported"
    assert pages["startup"].no_sizes({"count": 86, "total_s": 9.0}, sized=True) == \
        "the log gives the sizes of its 86 captures in 9.00 s (the capture list per pass), but not the time of each"
