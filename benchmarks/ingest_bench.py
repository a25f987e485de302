"""End-to-end ingest benchmark: step events over HTTP into SQLite, against raw sqlite3.

Starts the collector (uvicorn, 127.0.0.1, its own process) on a fresh SQLite store,
POSTs pre-encoded batches of step events from client threads, and compares the rate
with ``sqlite3.executemany`` of the same rows into the same ``steps`` table (same
pragmas, one transaction per batch), measured in the same run.

    python -m benchmarks.ingest_bench [--batches 40] [--batch-size 5000] [--clients 1]

The defaults are what one runner sends: its HTTP sink posts batches of
``replayscope.runner.emitter.HTTP_BATCH_EVENTS`` events from one thread.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import sqlite3
import sys
import tempfile
import time

from benchmarks import collectors
from benchmarks.harness import timed_threads
from replayscope.contract.sinks import HTTP_BATCH_EVENTS

TARGET_EVENTS_PER_S = 50_000
TARGET_RAW_FRACTION = 0.3


def make_events(n: int, seq0: int, t0: float, rng: random.Random) -> list[dict]:
    events = []
    for i in range(n):
        mode = rng.choices(("graph", "padded", "eager"), (0.6, 0.3, 0.1))[0]
        raw_bs = rng.randint(1, 64)
        graph_bs = raw_bs if mode == "graph" else (raw_bs + rng.randint(1, 8) if mode == "padded" else None)
        events.append({
            "seq": seq0 + i, "ts": t0 + (seq0 + i) * 0.002, "kind": "step", "stage": "decode", "mode": mode,
            "raw_bs": raw_bs, "graph_bs": graph_bs, "num_tokens": raw_bs,
            "padded_tokens": (graph_bs - raw_bs) if mode == "padded" else 0,
            "reason": rng.choice(("batch_too_large", "lora_not_captured")) if mode == "eager" else None,
            "duration_s": 0.004 + rng.random() * 0.002,
        })
    return events


def http_ingest(batches: list[list[dict]], clients: int) -> tuple[float, int]:
    """Seconds to POST every batch through a live collector, and the accepted count."""
    tmp = tempfile.mkdtemp(prefix="replayscope-bench-")
    db_url = f"sqlite:///{tmp}/http.db"
    port, proc = collectors.start(db_url, migrate=True)      # no background services: ingest alone
    try:
        run = {"run_id": "bench", "name": "bench", "source": "runner", "started_at": 1.7e9,
               "backend": "static", "model": "bench", "device": "cpu"}
        conn = http.client.HTTPConnection("127.0.0.1", port)
        conn.request("POST", "/v1/runs", json.dumps(run), {"Content-Type": "application/json"})
        assert conn.getresponse().read() and True
        bodies = [json.dumps({"events": b}).encode() for b in batches]
        accepted = [0] * clients

        def worker(k: int) -> None:
            c = http.client.HTTPConnection("127.0.0.1", port)
            for body in bodies[k::clients]:
                c.request("POST", "/v1/runs/bench/events", body, {"Content-Type": "application/json"})
                resp = c.getresponse()
                data = resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")
                accepted[k] += json.loads(data)["accepted"]

        return timed_threads(worker, clients), sum(accepted)
    finally:
        collectors.stop(proc)


def raw_sqlite(batches: list[list[dict]]) -> float:
    """Seconds for sqlite3.executemany of the same rows into the same steps table."""
    from replayscope.collector.store import Store

    tmp = tempfile.mkdtemp(prefix="replayscope-bench-")
    path = f"{tmp}/raw.db"
    Store.open(f"sqlite:///{path}", upgrade=True).dispose()   # the same schema, by migration
    cols = ("seq", "ts", "stage", "mode", "raw_bs", "graph_bs", "num_tokens", "padded_tokens", "reason", "duration_s")
    rows = [[(1,) + tuple(e[c] for c in cols) for e in batch] for batch in batches]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("INSERT INTO runs (id, run_id, name, source, backend, model, device, started_at, status, "
                 "created_at, last_seen_at) VALUES (1, 'raw', 'raw', 'runner', 'static', 'm', 'cpu', 0, "
                 "'running', 0, 0)")
    sql = ("INSERT INTO steps (run_pk, " + ", ".join(cols) + ") VALUES (" + ", ".join("?" * (len(cols) + 1)) + ")")
    start = time.perf_counter()
    for batch in rows:
        conn.execute("BEGIN")
        conn.executemany(sql, batch)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=HTTP_BATCH_EVENTS)
    parser.add_argument("--clients", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(7)
    batches = [make_events(args.batch_size, k * args.batch_size, 1.7e9, rng) for k in range(args.batches)]
    n = args.batches * args.batch_size
    raw_s = raw_sqlite(batches)
    http_s, accepted = http_ingest(batches, args.clients)
    assert accepted == n, (accepted, n)
    raw_rate, http_rate = n / raw_s, n / http_s
    print(f"{'measure':<44}{'events':>10}{'seconds':>10}{'events/s':>12}")
    print(f"{'raw sqlite3.executemany (steps table)':<44}{n:>10}{raw_s:>10.2f}{raw_rate:>12,.0f}")
    print(f"{'HTTP ingest, batches of %d, %d clients' % (args.batch_size, args.clients):<44}{n:>10}"
          f"{http_s:>10.2f}{http_rate:>12,.0f}")
    print(f"HTTP / raw = {http_rate / raw_rate:.2f}x   (targets: >= {TARGET_EVENTS_PER_S:,} events/s, "
          f">= {TARGET_RAW_FRACTION}x raw)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
