"""A run sampled at the source reads exactly like the same run sent whole: totals, ratios,
per-second timeline (what alerts read), step times and the batch-size histogram."""

from __future__ import annotations

import random

import sqlalchemy as sa

from replayscope.collector.alerting import alerts
from replayscope.collector.models import queries
from replayscope.collector.ingest import ingest_events, ingest_run
from replayscope.collector.tables import runs, steps
from replayscope.runner.emitter import GraphSampler

from .conftest import run_record


def workload(n: int, seed: int = 5) -> list[dict]:
    """n converted step events over ~40 s, every mode and stage, as the emitter hands them on."""
    rng = random.Random(seed)
    events, t = [], 1_700_000_000.0
    for seq in range(n):
        t += rng.uniform(0.001, 0.02)
        stage = "verify" if rng.random() < 0.1 else "decode"
        bs = rng.choice((1, 2, 3, 4, 6, 8, 16, 40))
        if bs == 40:
            mode, graph_bs, reason = "eager", None, "batch_too_large"
        elif bs in (3, 6):
            mode, graph_bs, reason = "padded", bs + 1 + (bs == 6), None
        else:
            mode, graph_bs, reason = "graph", bs, None
        tokens = bs * (4 if stage == "verify" else 1)
        events.append({"seq": seq, "ts": t, "kind": "step", "stage": stage, "mode": mode, "raw_bs": bs,
                       "graph_bs": graph_bs, "num_tokens": tokens,
                       "padded_tokens": (graph_bs - bs) if mode == "padded" else 0, "reason": reason,
                       "duration_s": None if seq % 97 == 0 else rng.uniform(0.001, 0.01)})
    return events


def sampled(events: list[dict], every: int) -> list[dict]:
    sampler = GraphSampler(every)
    out = [e for event in events for e in sampler.offer(dict(event))]
    return out + sampler.drain()


def reads(store, run_id: str) -> dict:
    summary = queries.run_summary(store, run_id)
    return {"totals": {k: summary[k] for k in ("steps", "modes", "reasons", "eager_ratio", "padded_ratio",
                                               "num_tokens", "padded_tokens")},
            "seconds": queries.mode_timeline(store, run_id, bucket_s=1),
            "decode_seconds": queries.mode_timeline(store, run_id, bucket_s=1, stage="decode"),
            "histogram": queries.batch_histogram(store, run_id),
            "reasons": queries.reason_breakdown(store, run_id)}


def step_times(store, run_id: str) -> list[tuple]:
    return [(r["stage"], r["mode"], r["steps"], round(r["total_s"], 9), None if r["mean_s"] is None
             else round(r["mean_s"], 12)) for r in queries.step_time_by_mode(store, run_id)]


def stored_steps(store, run_id: str) -> int:
    with store.read() as conn:
        pk = conn.execute(sa.select(runs.c.id).where(runs.c.run_id == run_id)).scalar_one()
        return conn.execute(sa.select(sa.func.count()).select_from(steps).where(steps.c.run_pk == pk)).scalar_one()


def test_a_sampled_run_reads_exactly_like_the_whole_run(store):
    events = workload(6000)
    ingest_run(store, run_record("whole"))
    ingest_run(store, run_record("sampled", graph_sample=20))
    ingest_events(store, "whole", events)
    thinned = sampled(events, 20)
    for start in range(0, len(thinned), 700):                 # in batches, as a sink posts them
        ingest_events(store, "sampled", thinned[start:start + 700])
    assert reads(store, "sampled") == reads(store, "whole")
    assert step_times(store, "sampled") == step_times(store, "whole")
    assert queries.run_summary(store, "sampled")["step_detail"]["graph_sample"] == 20


def test_sampling_cuts_the_raw_steps_stored(store):
    events = workload(6000)
    graph = sum(e["mode"] == "graph" for e in events)
    ingest_run(store, run_record("sampled", graph_sample=20))
    ingest_events(store, "sampled", sampled(events, 20))
    assert stored_steps(store, "sampled") <= len(events) - graph + graph // 20 + 2


def test_alerts_judge_a_sampled_run_as_the_whole_run(store):
    import time

    events = workload(3000)
    alerts.create_rule(store, {"name": "eager", "threshold": 0.05, "window_s": 10, "min_steps": 10, "for_s": 0})
    for run_id, stream in (("whole", events), ("sampled", sampled(events, 10))):
        ingest_run(store, run_record(run_id, name=run_id))
        ingest_events(store, run_id, stream)
    fired = alerts.evaluate_alerts(store, now=time.time() + 5)
    by_run = {t.alert["run_id"]: (t.status, t.alert["started_at"], t.alert["value"], t.alert["steps"],
                                  t.alert["reason"]) for t in fired if t.status == "firing"}
    assert set(by_run) == {"whole", "sampled"} and by_run["whole"] == by_run["sampled"]
