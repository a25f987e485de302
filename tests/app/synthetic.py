"""Wire-v1 runs made up for dashboard tests: deterministic, shaped like a runner's."""

from __future__ import annotations

import random
import time

CAPTURE_SIZES = (1, 2, 4, 8, 16, 32)


def run_record(run_id: str, name: str = "synthetic", started_at: float | None = None,
               backend: str = "static", source: str = "runner") -> dict:
    return {"run_id": run_id, "name": name, "source": source,
            "started_at": time.time() - 120 if started_at is None else started_at,
            "backend": backend, "model": "tiny", "device": "cpu", "torch_version": "2.x",
            "config": {"capture_sizes": list(CAPTURE_SIZES), "max_bs": 32, "padding": True,
                       "compile": False, "workload": "mixed"}}


def startup_events(t0: float, seq0: int = 0, slow_size: int | None = None,
                   failed_size: int | None = None) -> list[dict]:
    events, seq, t = [], seq0, t0
    for phase, duration in (("load_weights", 0.8), ("warmup", 0.2)):
        t += duration
        events.append({"seq": seq, "ts": t, "kind": "phase", "phase": phase, "duration_s": duration,
                       "start_ts": t - duration, "mem_bytes": 50_000_000 if phase == "load_weights" else None})
        seq += 1
    capture_start, pool = t, 0
    for bs in sorted(CAPTURE_SIZES, reverse=True):
        duration = 0.05 + bs * 0.002 + (1.0 if bs == slow_size else 0.0)
        t += duration
        if bs == failed_size:
            events.append({"seq": seq, "ts": t, "kind": "capture", "graph_bs": bs, "stage": "decode",
                           "duration_s": duration, "pool_bytes": pool, "pool_delta_bytes": 0,
                           "status": "failed", "error": "CUDA out of memory"})
            seq += 1
            events.append({"seq": seq, "ts": t, "kind": "degrade", "from": "cuda", "to": f"cuda-without-{bs}",
                           "error": "CUDA out of memory", "graph_bs": bs})
        else:
            delta = 1_000_000 * bs
            pool += delta
            events.append({"seq": seq, "ts": t, "kind": "capture", "graph_bs": bs, "stage": "decode",
                           "duration_s": duration, "pool_bytes": pool, "pool_delta_bytes": delta,
                           "status": "ok"})
        seq += 1
    events.append({"seq": seq, "ts": t, "kind": "phase", "phase": "capture", "duration_s": t - capture_start,
                   "start_ts": capture_start})
    return events


def step_events(t0: float, n: int, seq0: int, seed: int = 0, step_s: float = 0.01) -> list[dict]:
    rng = random.Random(seed)
    events = []
    for i in range(n):
        t = t0 + i * step_s
        if rng.random() < 0.08:
            bs = rng.randint(1, 8)
            events.append({"seq": seq0 + i, "ts": t, "kind": "step", "stage": "prefill", "mode": "eager",
                           "raw_bs": bs, "graph_bs": None, "num_tokens": bs * 32, "padded_tokens": 0,
                           "reason": "prefill", "duration_s": 0.004})
            continue
        bs = rng.choice((1, 1, 2, 3, 4, 5, 7, 8, 12, 16, 20, 32, 40))
        if bs > max(CAPTURE_SIZES):
            events.append({"seq": seq0 + i, "ts": t, "kind": "step", "stage": "decode", "mode": "eager",
                           "raw_bs": bs, "graph_bs": None, "num_tokens": bs, "padded_tokens": 0,
                           "reason": "batch_too_large", "duration_s": 0.005})
            continue
        graph_bs = next(s for s in CAPTURE_SIZES if s >= bs)
        mode = "graph" if graph_bs == bs else "padded"
        events.append({"seq": seq0 + i, "ts": t, "kind": "step", "stage": "decode", "mode": mode,
                       "raw_bs": bs, "graph_bs": graph_bs, "num_tokens": bs,
                       "padded_tokens": graph_bs - bs, "reason": None, "duration_s": 0.001})
    return events


def fill(store, run_id: str = "syn-1", name: str = "synthetic", steps: int = 500, ended: bool = True,
         **startup) -> dict:
    """A whole run into ``store`` through replayscope.collector.ingest; returns the run record."""
    from replayscope.collector.ingest import ingest_events, ingest_run

    record = run_record(run_id, name)
    ingest_run(store, record)
    t0 = record["started_at"]
    events = startup_events(t0, **startup)
    events += step_events(events[-1]["ts"] + 0.01, steps, seq0=len(events) + 10)
    events.append({"seq": 100_000, "ts": events[-1]["ts"], "kind": "parity", "graph_bs": 8,
                   "max_abs_diff": 0.0012, "rel_err": 0.0004, "tolerance": 0.01})
    if ended:
        events.append({"seq": 100_001, "ts": events[-1]["ts"] + 0.01, "kind": "run_end", "status": "finished"})
    ingest_events(store, run_id, events)
    return record
