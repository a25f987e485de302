"""The query layer returns exactly the keys docs/internals.md promises (plus documented extras)."""

from __future__ import annotations

from replayscope.collector.alerting import alerts
from replayscope.collector.models import queries
from replayscope.collector.ingest import ingest_events

from .conftest import step

RUN_KEYS = {"run_id", "name", "source", "backend", "model", "device", "status", "started_at", "ended_at",
            "steps", "modes", "stage_steps", "eager_ratio", "padded_ratio", "num_tokens", "padded_tokens",
            "decode_num_tokens", "decode_padded_tokens", "decode_padded_ratio", "decode_steps", "decode_eager_steps",
            "decode_eager_ratio", "decode_sampled_every", "padding_known", "capture_total_s", "alerts_firing",
            "not_measured"}


def test_query_functions_return_the_documented_keys(sqlite_store, run_in):
    store = sqlite_store
    alerts.create_rule(store, {"name": "r", "threshold": 0.1, "min_steps": 1, "window_s": 60, "for_s": 0},
                       now=0.0)
    run_id = run_in(store)
    ingest_events(store, run_id, [step(i, 1000.0 + i, mode=("graph", "padded", "eager")[i % 3]) for i in range(9)])
    alerts.evaluate_alerts(store, now=1009.0)
    assert set(queries.list_runs(store)[0]) == RUN_KEYS
    assert set(queries.run_summary(store, run_id)) == RUN_KEYS | {"config", "torch_version", "reasons",
                                                                 "last_event_ts", "error", "last_seen_at",
                                                                 "failure", "partial", "time_provenance", "version", "step_detail",
                                                                 "clock_ahead_s"}
    assert set(queries.mode_timeline(store, run_id)[0]) == {"t", "graph", "padded", "eager", "unknown", "eager_ratio",
                                                            "steps"}
    assert set(queries.reason_breakdown(store, run_id)[0]) == {"reason", "steps", "duration_s", "share"}
    assert set(queries.batch_histogram(store, run_id)[0]) == {"raw_bs", "mode", "steps", "num_tokens", "padded_tokens"}
    assert set(queries.step_time_by_mode(store, run_id)[0]) == {"stage", "mode", "steps", "timed_steps",
                                                                         "total_s", "mean_s"}
    assert queries.alert_rules(store)[0].name == "r"
    assert queries.alert_events(store, run_id)[0]["rule_name"] == "r"
    assert queries.run_summary(store, "ghost") is None
    assert queries.mode_timeline(store, "ghost") == [] and queries.captures(store, "ghost") == []


def test_the_automatic_timeline_bucket_keeps_points_bounded():
    assert queries.choose_bucket_s(60) == 1
    assert queries.choose_bucket_s(5000) == 10
    assert 86400 * 30 / queries.choose_bucket_s(86400 * 30) <= 720 or queries.choose_bucket_s(86400 * 30) == 86400


def test_the_decode_padding_share_leaves_prefill_tokens_out(store, run_in):
    run_id = run_in(store)
    prefill = dict(step(0, 1000.0, mode="eager", raw_bs=2, stage="prefill", reason="prefill"), num_tokens=1000)
    ingest_events(store, run_id, [prefill, step(1, 1001.0, mode="padded", raw_bs=3),     # 3 tokens + 1 pad
                                  step(2, 1002.0, mode="graph", raw_bs=4)])              # 4 tokens
    run = queries.run_summary(store, run_id)
    assert (run["decode_num_tokens"], run["decode_padded_tokens"]) == (7, 1)
    assert run["decode_padded_ratio"] == 1 / 8
    assert run["padded_ratio"] == 1 / 1008                       # every stage, as before
    assert queries.list_runs(store)[0]["decode_padded_ratio"] == 1 / 8


def test_the_decode_padding_share_is_unknown_without_decode_tokens(store, run_in):
    run_id = run_in(store)
    ingest_events(store, run_id, [step(0, 1000.0, mode="eager", stage="prefill", reason="prefill")])
    run = queries.run_summary(store, run_id)
    assert run["decode_padded_ratio"] is None and run["padded_ratio"] == 0.0


def _capture(seq: int, bs: int, seconds: float) -> dict:
    return {"seq": seq, "ts": 1000.0 + seq, "kind": "capture", "graph_bs": bs, "stage": "decode",
            "duration_s": seconds, "pool_bytes": 0, "pool_delta_bytes": 0, "status": "ok"}


def _phase(seq: int, name: str, seconds: float) -> dict:
    return {"seq": seq, "ts": 1000.0 + seq, "kind": "phase", "phase": name, "duration_s": seconds}


def test_capture_time_is_the_per_size_sum_when_no_capture_phase_was_logged(store, run_in):
    run_id = run_in(store)
    ingest_events(store, run_id, [_capture(0, 8, 1.5), _capture(1, 4, 0.5)])
    assert queries.run_summary(store, run_id)["capture_total_s"] == 2.0


def test_capture_time_is_the_capture_phases_when_logged(store, run_in):
    """vLLM logs only a total; a runner logs per size and the whole capture (incl. verify)."""
    run_id = run_in(store)
    ingest_events(store, run_id, [_capture(0, 8, 1.5), _capture(1, 4, 0.5), _phase(2, "capture", 2.25),
                                  _phase(3, "capture_verify", 1.0), _phase(4, "capture.target.decode", 2.0),
                                  _phase(5, "compile", 9.0)])
    assert queries.run_summary(store, run_id)["capture_total_s"] == 3.25


def test_every_read_is_plain_json_on_each_database(store, run_in):
    """PostgreSQL sums are Decimals: the read model hands out ints and floats only."""
    import json

    from replayscope.collector.analysis import fleet, regressions

    run_id = run_in(store)
    ingest_events(store, run_id, [step(i, 1000.0 + i * 0.3, mode=("graph", "padded", "eager")[i % 3]) for i in range(30)]
                  + [_capture(100, 8, 0.5), _phase(101, "load_weights", 2.0)])
    reads = [queries.list_runs(store), queries.run_summary(store, run_id), queries.mode_timeline(store, run_id),
             queries.mode_timeline(store, run_id, bucket_s=60), queries.reason_breakdown(store, run_id),
             queries.batch_histogram(store, run_id), queries.step_time_by_mode(store, run_id),
             fleet.fleet(store), regressions.run_regressions(store, run_id)]
    json.dumps(reads, allow_nan=False)
