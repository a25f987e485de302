"""A slow receiver gets each notification at most twice and holds up no other receiver.

The audit: a receiver answering in 5 s with REPLAYSCOPE_WEBHOOK_TIMEOUT_S=3 got 6
notifications 36 times in 150 s (up to 7 copies each), none was marked sent, and 6 others
were never tried. The same ratios here, scaled down (timeout 1 s): a receiver answering in
1.6 s (within twice the timeout: the one retry waits that long), one answering in 4 s
(slower than both attempts), and a fast one, each with notifications of three runs, against
a real ``replayscope serve``."""

from __future__ import annotations

import time
from collections import Counter

from tests.receiver import LOOPBACK_ALLOW, Receiver

from .conftest import Collector, http_json, migrated_sqlite, wait_for

RUNS = 3
RULE = {"threshold": 0.5, "window_s": 60, "min_steps": 20, "for_s": 0, "keep_firing_for_s": 0}


def steps(seq0: int, t0: float, eager: bool, n: int = 100) -> list[dict]:
    return [{"seq": seq0 + i, "ts": t0 + i / 200, "kind": "step", "stage": "decode",
             "mode": "eager" if eager else "graph", "raw_bs": 8, "graph_bs": None if eager else 8,
             "num_tokens": 8, "padded_tokens": 0, "reason": "batch_too_large" if eager else None,
             "duration_s": 0.004} for i in range(n)]


def copies(receiver: Receiver) -> Counter:
    """(status, fingerprint) -> times the receiver was posted it (answered or not)."""
    with receiver.lock:
        return Counter((b["status"], b["alerts"][0]["fingerprint"]) for b in receiver.bodies)


def test_a_slow_receiver_gets_at_most_one_duplicate_and_blocks_no_one(tmp_path):
    env = {"REPLAYSCOPE_WEBHOOK_ALLOW": LOOPBACK_ALLOW, "REPLAYSCOPE_WEBHOOK_TIMEOUT_S": "1",
           "REPLAYSCOPE_EVALUATE_EVERY_S": "0.5", "REPLAYSCOPE_NOTIFY_EVERY_S": "0.2"}
    with Receiver(delay_s=1.6) as slow, Receiver(delay_s=4.0) as slower, Receiver() as fast, \
            Collector(migrated_sqlite(tmp_path / "slow.db"), env=env, log=tmp_path / "c.log") as collector:
        for name, receiver in (("slow", slow), ("slower", slower), ("fast", fast)):
            status, rule, _ = http_json("POST", collector.url + "/v1/alert-rules",
                                        {**RULE, "name": name, "webhook_url": receiver.url})
            assert status == 201, rule
        t0 = time.time() - 1
        for k in range(RUNS):
            run_id = f"run-{k}"
            assert http_json("POST", collector.url + "/v1/runs", {
                "run_id": run_id, "name": run_id, "source": "runner", "started_at": t0 - 5, "backend": "static",
                "model": "tiny", "device": "cpu"})[0] == 201
            assert http_json("POST", f"{collector.url}/v1/runs/{run_id}/events",
                             {"events": steps(0, t0 - 0.5, eager=True)})[0] == 200
        started = time.monotonic()
        wait_for(lambda: len(fast.alerts()) == RUNS, 20, "the fast receiver's three firing alerts")
        fast_after_s = time.monotonic() - started
        for k in range(RUNS):                       # now every run resolves
            assert http_json("POST", f"{collector.url}/v1/runs/run-{k}/events",
                             {"events": steps(1000, time.time() - 0.5, eager=False, n=400)})[0] == 200

        def settled():
            rows = http_json("GET", collector.url + "/v1/alert-notifications")[1]
            return len(rows) == 3 * 2 * RUNS and all(r["state"] in ("sent", "unconfirmed") for r in rows) and rows
        rows = wait_for(settled, 90, "every notification delivered or given up without a third copy")
        time.sleep(2.0)                             # anything still to come would arrive now
        by_receiver = {name: [r for r in rows if r["labels"]["rule"] == name] for name in ("slow", "slower", "fast")}
        seen = {"slow": copies(slow), "slower": copies(slower), "fast": copies(fast)}
    print(f"fast receiver: its {RUNS} firing alerts in {fast_after_s:.1f}s; copies per notification: "
          + "; ".join(f"{name} {sorted(c.values())}" for name, c in seen.items()))
    assert fast_after_s < 6, "the fast receiver did not wait behind the slow ones"
    assert all(n == 1 for n in seen["fast"].values()) and len(seen["fast"]) == 2 * RUNS
    for name in ("slow", "slower"):
        assert len(seen[name]) == 2 * RUNS, f"{name}: every notification was tried"
        assert max(seen[name].values()) <= 2, f"{name}: at most one duplicate each: {seen[name]}"
    assert {r["state"] for r in by_receiver["slow"]} == {"sent"}, "1.6 s: the retry waited long enough"
    assert {r["state"] for r in by_receiver["slower"]} == {"unconfirmed"}
    assert all("no answer twice" in r["last_error"] for r in by_receiver["slower"])
