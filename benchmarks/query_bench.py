"""Query-layer latency on one run of 5 million steps (SQLite).

Builds the run fast: raw step rows by ``executemany`` and rollups through
``replayscope.collector.models.rollups.Accumulator`` (the code ingest uses), then times every function of
``replayscope.collector.models.queries`` and ``GET /v1/runs/{id}`` (median of several calls).

    python -m benchmarks.query_bench [--steps 5000000] [--db PATH]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

TARGET_MS = 200


def build_run(store, n_steps: int, rate_per_s: float = 1000.0, chunk: int = 200_000) -> str:
    import sqlalchemy as sa

    from replayscope.collector import tables as t
    from replayscope.collector.ingest import ingest_events, ingest_run
    from replayscope.collector.models.rollups import STEP_FIELDS, Accumulator

    run_id = "big-run"
    t0 = 1.7e9
    ingest_run(store, {"run_id": run_id, "name": "big-run", "source": "runner", "started_at": t0,
                       "backend": "cuda", "model": "llama-8b", "device": "H200", "config": {"capture_sizes": [1, 2, 4, 8, 16, 32, 64]}})
    with store.read() as conn:
        run_pk = conn.execute(sa.select(t.runs.c.id).where(t.runs.c.run_id == run_id)).scalar()
    rng = random.Random(3)
    captured = [1, 2, 4, 8, 16, 32, 64]
    cols = ("run_pk", "seq", "ts", "stage", "mode", "raw_bs", "graph_bs", "num_tokens", "padded_tokens",
            "reason", "duration_s")
    sql = store.insert_sql(t.steps, cols)
    reasons = ("batch_too_large", "lora_not_captured", "grammar_switch", "custom:my adapter")
    for start in range(0, n_steps, chunk):
        rows = []
        acc = Accumulator()
        for seq in range(start, min(n_steps, start + chunk)):
            ts = t0 + seq / rate_per_s
            if seq % 50 == 0:
                stage, mode, raw_bs, graph_bs, reason = "prefill", "eager", rng.randint(1, 8), None, "prefill"
                tokens, pad = raw_bs * 512, 0
            else:
                stage = "decode"
                raw_bs = rng.randint(1, 80)
                graph_bs = next((c for c in captured if c >= raw_bs), None)
                if graph_bs is None or rng.random() < 0.03:
                    mode, graph_bs, reason = "eager", None, reasons[seq % len(reasons)] if graph_bs else "batch_too_large"
                else:
                    mode, reason = ("graph" if graph_bs == raw_bs else "padded"), None
                tokens, pad = raw_bs, (graph_bs - raw_bs) if mode == "padded" else 0
            dur = 0.004 + (raw_bs / 80) * 0.01
            rows.append((run_pk, seq, ts, stage, mode, raw_bs, graph_bs, tokens, pad, reason, dur))
            acc.add_step_rows([(ts, stage, mode, reason, raw_bs, tokens, pad, dur)], STEP_FIELDS)
        with store.write() as conn:
            conn.exec_driver_sql(sql, rows)
            acc.flush(conn, run_pk)
    events = [{"seq": n_steps + i, "ts": t0 - 30 + i, "kind": "capture", "graph_bs": bs, "stage": "decode",
               "duration_s": 0.05 * bs ** 0.5, "pool_bytes": bs << 24, "pool_delta_bytes": 1 << 24, "status": "ok"}
              for i, bs in enumerate(captured)]
    events += [{"seq": n_steps + 100 + i, "ts": t0 - 60 + i, "kind": "phase", "phase": p, "duration_s": 5.0}
               for i, p in enumerate(("load_weights", "kv_cache", "compile", "capture"))]
    ingest_events(store, run_id, events)
    return run_id


def time_ms(fn, repeat: int = 7) -> float:
    fn()   # warm the page cache and the statement cache
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5_000_000)
    parser.add_argument("--db", help="reuse/keep this SQLite file (built when missing)")
    args = parser.parse_args(argv)

    from fastapi.testclient import TestClient

    from replayscope.collector.models import queries as q
    from replayscope.collector.api import create_api
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    path = args.db or os.path.join(tempfile.mkdtemp(prefix="replayscope-qbench-"), "q.db")
    fresh = not os.path.exists(path)
    store = Store.open(f"sqlite:///{path}", upgrade=True)
    run_id = "big-run"
    if fresh:
        start = time.perf_counter()
        build_run(store, args.steps)
        print(f"built {args.steps:,} steps in {time.perf_counter() - start:.1f}s at {path}")
    client = TestClient(create_api(store, Settings(run_services=False)), base_url="http://127.0.0.1")  # a served host
    cases = [
        ("list_runs", lambda: q.list_runs(store)),
        ("run_summary", lambda: q.run_summary(store, run_id)),
        ("mode_timeline (auto bucket)", lambda: q.mode_timeline(store, run_id)),
        ("mode_timeline (1 s buckets)", lambda: q.mode_timeline(store, run_id, bucket_s=1)),
        ("mode_timeline (decode, 60 s)", lambda: q.mode_timeline(store, run_id, bucket_s=60, stage="decode")),
        ("reason_breakdown", lambda: q.reason_breakdown(store, run_id)),
        ("batch_histogram", lambda: q.batch_histogram(store, run_id)),
        ("batch_histogram (decode)", lambda: q.batch_histogram(store, run_id, stage="decode")),
        ("step_time_by_mode", lambda: q.step_time_by_mode(store, run_id)),
        ("captures", lambda: q.captures(store, run_id)),
        ("phases", lambda: q.phases(store, run_id)),
        ("degrades", lambda: q.degrades(store, run_id)),
        ("parity", lambda: q.parity(store, run_id)),
        ("alert_rules", lambda: q.alert_rules(store)),
        ("alert_events", lambda: q.alert_events(store, run_id)),
        ("GET /v1/runs/{id}", lambda: client.get(f"/v1/runs/{run_id}").raise_for_status()),
        ("GET /v1/runs/{id}/timeline", lambda: client.get(f"/v1/runs/{run_id}/timeline").raise_for_status()),
    ]
    steps = q.run_summary(store, run_id)["steps"]
    print(f"run {run_id}: {steps:,} steps; median of 7 calls, target < {TARGET_MS} ms each")
    print(f"{'query':<34}{'ms':>10}")
    worst = 0.0
    for name, fn in cases:
        ms = time_ms(fn)
        worst = max(worst, ms)
        print(f"{name:<34}{ms:>10.2f}")
    print(f"slowest: {worst:.2f} ms ({'within' if worst < TARGET_MS else 'OVER'} the {TARGET_MS} ms target)")
    store.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
