"""Three collector processes on one PostgreSQL, behind a round-robin load balancer and
directly: runners spread over them (one of them sampling its graph steps) are stored
once, with the rollups their own event files give; and each periodic job (alert
evaluation and heartbeat timeouts, notification delivery, retention) ran once per period
across the three, not three times."""

from __future__ import annotations

import math
import time
from collections import Counter

import pytest

from replayscope.contract.events_file import read_events_file
from replayscope.contract.wire import STEP_COUNT_MODES
from tests.faults.conftest import (Collector, RoundRobinProxy, http_json, start_runner, stop_process,
                                   stored_seqs, wait_for)
from tests.receiver import LOOPBACK_ALLOW, Receiver

pytestmark = pytest.mark.postgres

EVALUATE_S, PRUNE_S = 1, 2


def expected(events: list[dict]) -> tuple[dict, dict]:
    """(summary figures, decode histogram) from a runner's events file, sampled or not."""
    modes, reasons, histogram = Counter(), Counter(), Counter()
    tokens = padded = 0
    for e in events:
        if e["kind"] == "step":
            n, parts = 1, {str(e["raw_bs"]): {"count": 1}}
        elif e["kind"] == "step_counts":
            n, parts = e["count"], e.get("batch_sizes") or {}
        else:
            continue
        modes[e["mode"]] += n
        tokens += e["num_tokens"]
        padded += e["padded_tokens"]
        if e["mode"] == "eager":
            reasons[e["reason"]] += n
        if e["stage"] == "decode":
            for bs, part in parts.items():
                histogram[(int(bs), e["mode"])] += part["count"]
    summary = {"steps": sum(modes.values()), "modes": {m: modes[m] for m in STEP_COUNT_MODES},
               "reasons": dict(reasons), "num_tokens": tokens, "padded_tokens": padded}
    return summary, dict(histogram)


def test_three_collectors_store_every_event_once_and_run_each_job_once_per_period(pg_url, tmp_path):
    env = {"REPLAYSCOPE_EVALUATE_EVERY_S": str(EVALUATE_S), "REPLAYSCOPE_PRUNE_EVERY_S": str(PRUNE_S),
           "REPLAYSCOPE_WEBHOOK_ALLOW": LOOPBACK_ALLOW}
    started = time.time()                          # before any collector: every period they could tick in
    with Receiver() as hook:
        env["REPLAYSCOPE_ALERT_WEBHOOK"] = hook.url
        collectors = [Collector(pg_url, env=env, log=tmp_path / f"collector-{i}.log").start() for i in range(3)]
        procs = {}
        try:
            with RoundRobinProxy([c.url for c in collectors]) as balancer:
                status, _rule, _ = http_json("POST", balancer.url + "/v1/alert-rules",
                                             {"name": "any eager", "threshold": 0.01, "window_s": 3600,
                                              "min_steps": 20, "for_s": 0})
                assert status == 201
                targets = {"direct-0": (collectors[0].url, []), "direct-1": (collectors[1].url, []),
                           "balanced": (balancer.url, []), "balanced-sampled": (balancer.url, ["--graph-sample", "4"])}
                for seed, (run_id, (url, extra)) in enumerate(targets.items()):
                    procs[run_id] = start_runner(url, tmp_path / f"{run_id}.jsonl", steps=200, run_id=run_id,
                                                 name=run_id, extra=["--seed", str(seed), *extra],
                                                 log=tmp_path / f"{run_id}.log")
                for run_id, proc in procs.items():
                    assert proc.wait(600) == 0, (tmp_path / f"{run_id}.log").read_text()[-3000:]
                wait_for(lambda: len([b for b in hook.received if b["status"] == "firing"]) >= len(targets), 60,
                         "an alert for every run")
                time.sleep(3 * PRUNE_S)                       # a few more periods of every job
                elapsed = time.time() - started
                services = [http_json("GET", c.url + "/v1/services")[1] for c in collectors]
                spread = dict(balancer.forwarded)
        finally:
            for proc in procs.values():
                stop_process(proc)
            for collector in collectors:
                collector.stop()
        bodies = list(hook.received)

    from replayscope.collector.models import queries
    from replayscope.collector.store import Store

    assert len(spread) == 3, f"the balancer reached only {spread}"
    store = Store.open(pg_url)
    try:
        for run_id in targets:
            record, events, _ = read_events_file(tmp_path / f"{run_id}.jsonl")
            assert stored_seqs(pg_url, run_id) == Counter(e["seq"] for e in events), run_id
            summary_figures, histogram = expected(events)
            summary = queries.run_summary(store, run_id)
            assert {k: summary[k] for k in summary_figures} == summary_figures, run_id
            assert summary["status"] == "finished"
            assert {(r["raw_bs"], r["mode"]): r["steps"]
                    for r in queries.batch_histogram(store, run_id, stage="decode")} == histogram, run_id
        assert record["graph_sample"] == 4 and summary["step_detail"]["graph_sample"] == 4
        alerted = [a for a in queries.alert_events(store) if a["rule_name"] == "any eager"]
        assert sorted(a["run_id"] for a in alerted) == sorted(targets), "one alert per run, not one per collector"
    finally:
        store.dispose()
    sent = Counter((b["status"], b["alerts"][0]["labels"]["run_id"]) for b in bodies)
    assert sorted(run_id for status, run_id in sent if status == "firing") == sorted(targets)
    assert set(sent.values()) == {1}, f"a notification sent more than once: {sent}"

    for name, interval in (("evaluator", EVALUATE_S), ("notifier", 1), ("retention", PRUNE_S)):
        rows = [next(s for s in listing if s["name"] == name) for listing in services]
        ran = [r["ran_here"] for r in rows]
        periods = elapsed / interval
        # A period is a slot floor(clock / interval) (replayscope.collector.services.leader); the window touches the
        # slots from the one it started in to the one it ended in, partial ones at both ends.
        slots = math.floor((started + elapsed) / interval) - math.floor(started / interval) + 1
        assert sum(ran) <= slots, f"{name} ran {sum(ran)} times in {slots} periods ({periods:.1f} long)"
        assert sum(ran) >= periods / 2, f"{name} ran only {sum(ran)} times in {periods:.1f} periods"
        assert all(r["ran_here"] + r["skipped_here"] >= periods / 2 for r in rows), f"every collector tried {name}"
        assert max(r["runs"] for r in rows) >= sum(ran)                     # the store counted each period once
