"""The fleet ``benchmarks.fleet_bench`` measures, generated inside PostgreSQL (COPY and
generate_series): rollups for all of it (whole-run and minute rollups, batch sizes,
phases, captures), 1-second rollups for the last days, raw step events for the most recent
days that fit; and the store's size per kind of row.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass


DAY = 86400
MODELS = {   # model: (graph step s, capture total s, load s, pool bytes)
    "llama-3.1-8b": (0.012, 18.0, 25.0, 3 << 30),
    "qwen2.5-7b": (0.011, 16.0, 22.0, 3 << 30),
    "mistral-7b": (0.010, 15.0, 20.0, 2 << 30),
    "llama-3.1-70b": (0.035, 45.0, 140.0, 9 << 30),
}
DEVICES = ("NVIDIA H200", "NVIDIA H100 80GB HBM3")
VERSIONS = ("v1.0", "v1.1", "v1.2")
SLOW = ("qwen2.5-7b", "v1.2", 1.25)          # the injected regression: graph steps 25 % slower
CAPTURE_SIZES = [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
# (stage, mode, reason, share of steps, tokens per step, padded tokens per step, step-time kind)
KEYS = (("decode", "graph", "", 0.88, 24, 0, "graph"), ("decode", "padded", "", 0.07, 21, 3, "graph"),
        ("decode", "eager", "batch_too_large", 0.02, 80, 0, "eager"),
        ("prefill", "eager", "prefill", 0.03, 2048, 0, "prefill"))


@dataclass(frozen=True)
class Fleet:
    gpus: int
    days: int
    run_hours: float
    steps_per_s: float
    graph_sample: int
    raw_days: float
    second_days: float
    raw_steps: int
    now: float

    @property
    def start(self) -> float:
        return math.floor(self.now / 3600) * 3600 - self.days * DAY

    @property
    def graph_share(self) -> float:
        return KEYS[0][3]

    def raw_rows_per_gpu_s(self) -> tuple[float, float]:
        """(step events, per-second count events) a GPU keeps per second with sampling."""
        sent = self.steps_per_s * (1 - self.graph_share + self.graph_share / self.graph_sample)
        skipped = self.steps_per_s * self.graph_share * (1 - 1 / self.graph_sample)
        return sent, 1 - math.exp(-skipped)

    @property
    def raw_window_days(self) -> float:
        sent, counts = self.raw_rows_per_gpu_s()
        return min(self.raw_days, self.raw_steps / (self.gpus * DAY * (sent + counts)))


def _copy(cursor, table: str, columns: tuple[str, ...], rows) -> None:
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def generate(store, fleet: Fleet, log) -> dict:
    """Fill an empty, migrated store with the fleet; returns what was generated."""
    from replayscope.collector.models.fleet import config_key
    from replayscope.collector.models import retention

    rng = random.Random(15)
    runs, per_run = [], []
    run_s = fleet.run_hours * 3600
    per_gpu = int(fleet.days * DAY // run_s)
    pk = 0
    for g in range(fleet.gpus):
        model = list(MODELS)[g % len(MODELS)]
        device = DEVICES[0] if g < fleet.gpus * 3 // 4 else DEVICES[1]
        graph_s, capture_s, load_s, pool = MODELS[model]
        config = {"capture_sizes": CAPTURE_SIZES, "max_bs": 64, "padding": True, "compile": False,
                  "workload": {"name": "chat"}}
        key = config_key(model, "cuda", device, config)
        for k in range(per_gpu):
            pk += 1
            started = fleet.start + k * run_s + (g % 8) * 60
            day = (started - fleet.start) / DAY
            version = VERSIONS[min(len(VERSIONS) - 1, int(day * len(VERSIONS) / fleet.days + (g % 5) / 25))]
            slow = SLOW[2] if (model, version) == SLOW[:2] else 1.0
            ended = started + run_s - 60
            running = ended > fleet.now
            runs.append((pk, f"fleet-{g:02d}-{k:03d}", f"gpu{g:02d}-{model}-{k:03d}", "runner", "cuda", model,
                         device, "2.9.0", json.dumps(dict(config, seed=k)), 1, started,
                         None if running else ended, "running" if running else "finished", started,
                         fleet.now if running else ended, min(ended, fleet.now), version, fleet.graph_sample, key))
            jitter = rng.uniform(0.97, 1.03)
            per_run.append((pk, started, min(ended, fleet.now), graph_s * slow * jitter, graph_s * 1.05 * jitter,
                            graph_s * 3 * jitter, 0.03 * jitter, capture_s * jitter, load_s * jitter,
                            int(pool * jitter)))
    raw = store.engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute("SET synchronous_commit = off")
        t0 = time.perf_counter()
        _copy(cur, "runs", ("id", "run_id", "name", "source", "backend", "model", "device", "torch_version", "config",
                            "wire_version", "started_at", "ended_at", "status", "created_at", "last_seen_at",
                            "last_event_ts", "version", "graph_sample", "config_key"), runs)
        cur.execute("SELECT setval(pg_get_serial_sequence('runs', 'id'), %s)", (pk,))
        cur.execute("CREATE TEMP TABLE bench_runs (run_pk int, started float8, ended float8, graph_s float8, "
                    "padded_s float8, eager_s float8, prefill_s float8)")
        _copy(cur, "bench_runs", ("run_pk", "started", "ended", "graph_s", "padded_s", "eager_s", "prefill_s"),
              (r[:7] for r in per_run))
        cur.execute("CREATE TEMP TABLE bench_keys (stage text, mode text, reason text, share float8, tokens int, "
                    "pad int, kind text)")
        _copy(cur, "bench_keys", ("stage", "mode", "reason", "share", "tokens", "pad", "kind"), KEYS)
        _startup_rows(cur, per_run)
        raw.commit()
        log(f"runs, phases, captures: {len(runs):,} runs in {time.perf_counter() - t0:.0f} s")

        second_from = math.floor((fleet.now - fleet.second_days * DAY) / 60) * 60
        raw_from = fleet.now - fleet.raw_window_days * DAY
        days = set(range(int(min(second_from, raw_from) // DAY), int(fleet.now // DAY) + 1))
        retention.ensure_partitions(store, days)
        t0 = time.perf_counter()
        cur.execute(_made_up_rollups(
            1, "s.t", f"generate_series(greatest(ceil(r.started), {second_from})::bigint, "
                      f"floor(r.ended)::bigint - 1) s(t)",
            f"floor(k.share * {fleet.steps_per_s} + random())::bigint", where=f"r.ended > {second_from}"))
        seconds = cur.rowcount
        cur.execute(_summed_rollups(60, "t - t % 60", of_bucket=1))
        cur.execute(_made_up_rollups(
            60, "m.t", f"generate_series((ceil(r.started / 60) * 60)::bigint, "
                       f"least(floor(r.ended / 60) * 60 - 60, {second_from} - 60)::bigint, 60) m(t)",
            f"round(k.share * {fleet.steps_per_s} * 60 * (0.8 + 0.4 * random()))::bigint"))
        cur.execute(_summed_rollups(0, None, of_bucket=60))
        raw.commit()
        log(f"rollups: {seconds:,} 1-second rows, minutes and whole runs in {time.perf_counter() - t0:.0f} s")
        t0 = time.perf_counter()
        _batch_rows(cur)
        raw.commit()
        log(f"batch sizes in {time.perf_counter() - t0:.0f} s")
        t0 = time.perf_counter()
        steps, counts = _raw_rows(cur, fleet, raw_from)
        raw.commit()
        log(f"raw: {steps:,} step events and {counts:,} count events (last {fleet.raw_window_days:.2f} days) "
            f"in {time.perf_counter() - t0:.0f} s")
        raw.driver_connection.autocommit = True
        t0 = time.perf_counter()
        cur.execute("VACUUM ANALYZE")
        log(f"vacuum analyze in {time.perf_counter() - t0:.0f} s")
    finally:
        raw.close()
    return {"runs": len(runs), "second_rows": seconds, "raw_steps": steps, "raw_counts": counts}


ROLLUP_COLUMNS = "run_pk, bucket_s, t, stage, mode, reason, steps, num_tokens, padded_tokens, duration_s, timed_steps"
# A key's step time in a run of bench_runs r: graph, padded, eager or prefill.
STEP_TIME = ("CASE k.kind WHEN 'graph' THEN (CASE k.mode WHEN 'graph' THEN r.graph_s ELSE r.padded_s END) "
             "WHEN 'eager' THEN r.eager_s ELSE r.prefill_s END")


def _made_up_rollups(bucket_s: int, t: str, times: str, steps: str, where: str | None = None) -> str:
    """SQL adding rollup rows of ``bucket_s`` for each run of bench_runs r, key of bench_keys k
    and time ``t`` of the series ``times``: ``steps`` steps of the key (a row where that is > 0),
    their tokens, and their step time with 5 % of noise."""
    run_filter = f"{where} AND " if where else ""
    return f"""
        INSERT INTO step_rollups ({ROLLUP_COLUMNS})
        SELECT r.run_pk, {bucket_s}, {t}, k.stage, k.mode, k.reason, n.steps, n.steps * k.tokens, n.steps * k.pad,
               n.steps * {STEP_TIME} * (0.95 + 0.1 * random()), n.steps
        FROM bench_runs r
        CROSS JOIN LATERAL {times}
        CROSS JOIN bench_keys k
        CROSS JOIN LATERAL (SELECT {steps} AS steps) n
        WHERE {run_filter}n.steps > 0"""


def _summed_rollups(bucket_s: int, t: str | None, of_bucket: int) -> str:
    """SQL adding rollup rows of ``bucket_s``, the sums of those of ``of_bucket`` per time ``t``
    (an expression of theirs), or per run where ``t`` is None."""
    per_t = f"{t}, " if t else ""
    return f"""
        INSERT INTO step_rollups ({ROLLUP_COLUMNS})
        SELECT run_pk, {bucket_s}, {t or 0}, stage, mode, reason, sum(steps), sum(num_tokens), sum(padded_tokens),
               sum(duration_s), sum(timed_steps)
        FROM step_rollups WHERE bucket_s = {of_bucket} GROUP BY run_pk, {per_t}stage, mode, reason"""


def _startup_rows(cur, per_run) -> None:
    phases, caps = [], []
    for pk, started, _ended, _g, _p, _e, _f, capture_s, load_s, pool in per_run:
        t = started
        for seq, (name, seconds) in enumerate((("load_weights", load_s), ("warmup", 2.0), ("kv_cache", 3.0),
                                              ("capture", capture_s))):
            phases.append((pk, seq, t + seconds, name, t, seconds))
            t += seconds
        size_s, delta = capture_s / len(CAPTURE_SIZES), pool // len(CAPTURE_SIZES)
        for i, bs in enumerate(reversed(CAPTURE_SIZES)):
            caps.append((pk, 10 + i, t - capture_s + (i + 1) * size_s, bs, "decode", size_s, delta * (i + 1), delta,
                         "ok"))
    _copy(cur, "phases", ("run_pk", "seq", "ts", "phase", "start_ts", "duration_s"), phases)
    _copy(cur, "captures", ("run_pk", "seq", "ts", "graph_bs", "stage", "duration_s", "pool_bytes",
                            "pool_delta_bytes", "status"), caps)


def _batch_rows(cur) -> None:
    """Per run, its whole-run steps of each mode spread over batch sizes (graph at captured
    sizes, padded between them, eager above the largest)."""
    cur.execute("SELECT run_pk, stage, mode, reason, steps, num_tokens, padded_tokens, duration_s, timed_steps "
                "FROM step_rollups WHERE bucket_s = 0")
    whole = cur.fetchall()
    padded_sizes = [bs for bs in range(1, 65) if bs not in CAPTURE_SIZES]
    sizes = {"graph": CAPTURE_SIZES, "padded": padded_sizes, "eager": list(range(65, 97, 4))}
    rows = []
    for run_pk, stage, mode, reason, steps, tokens, padded, seconds, timed in whole:
        choices = sizes[mode] if stage == "decode" else [1, 2, 4, 8]
        left = steps
        for i, bs in enumerate(choices):
            n = left if i == len(choices) - 1 else steps // len(choices)
            left -= n
            if n:
                share = n / steps
                rows.append((run_pk, stage, bs, mode, reason, n, int(tokens * share), int(padded * share),
                             seconds * share, int(timed * share)))
    _copy(cur, "batch_rollups", ("run_pk", "stage", "raw_bs", "mode", "reason", "steps", "num_tokens",
                                 "padded_tokens", "duration_s", "timed_steps"), rows)


def _raw_rows(cur, fleet: Fleet, raw_from: float) -> tuple[int, int]:
    """Raw step events of the retained window: sent steps (every padded and eager one, 1 in
    N graph) and one count event per second for the graph steps not sent."""
    sent, counts_per_s = fleet.raw_rows_per_gpu_s()
    graph_sent = fleet.steps_per_s * fleet.graph_share / fleet.graph_sample / sent
    padded = fleet.steps_per_s * KEYS[1][3] / sent
    eager = fleet.steps_per_s * KEYS[2][3] / sent
    skipped = fleet.steps_per_s * fleet.graph_share * (1 - 1 / fleet.graph_sample)
    cur.execute(f"""
        INSERT INTO steps (run_pk, seq, ts, stage, mode, raw_bs, graph_bs, num_tokens, padded_tokens, reason,
                           duration_s)
        SELECT r.run_pk, i, w.lo + (i + 0.5) * (w.hi - w.lo) / w.n, m.stage, m.mode, m.bs,
               CASE m.mode WHEN 'graph' THEN m.bs WHEN 'padded' THEN m.bs + 1 END,
               CASE m.stage WHEN 'prefill' THEN 2048 ELSE m.bs END, CASE m.mode WHEN 'padded' THEN 1 ELSE 0 END,
               m.reason,
               CASE m.mode WHEN 'graph' THEN r.graph_s WHEN 'padded' THEN r.padded_s
                           ELSE (CASE m.stage WHEN 'prefill' THEN r.prefill_s ELSE r.eager_s END) END
        FROM bench_runs r
        CROSS JOIN LATERAL (SELECT greatest(r.started, {raw_from}) AS lo, r.ended AS hi,
                                   greatest(1, round((r.ended - greatest(r.started, {raw_from})) * {sent}))::bigint
                                   AS n) w
        CROSS JOIN LATERAL generate_series(0, w.n - 1) i
        CROSS JOIN LATERAL (SELECT random() AS x, 1 + floor(random() * 64)::int AS rb) u
        CROSS JOIN LATERAL (SELECT
            CASE WHEN u.x < {graph_sent} THEN 'decode' WHEN u.x < {graph_sent + padded} THEN 'decode'
                 WHEN u.x < {graph_sent + padded + eager} THEN 'decode' ELSE 'prefill' END AS stage,
            CASE WHEN u.x < {graph_sent} THEN 'graph' WHEN u.x < {graph_sent + padded} THEN 'padded'
                 ELSE 'eager' END AS mode,
            CASE WHEN u.x < {graph_sent + padded} THEN NULL
                 WHEN u.x < {graph_sent + padded + eager} THEN 'batch_too_large' ELSE 'prefill' END AS reason,
            CASE WHEN u.x < {graph_sent} THEN (ARRAY{CAPTURE_SIZES})[1 + u.rb % {len(CAPTURE_SIZES)}]
                 WHEN u.x < {graph_sent + padded} THEN (ARRAY[3,5,6,7,9,10,11,12,13,14,15,17,20,30,33,50])[1 + u.rb % 16]
                 WHEN u.x < {graph_sent + padded + eager} THEN 64 + u.rb ELSE 1 + u.rb % 8 END AS bs) m
        WHERE r.ended > {raw_from}""")
    steps = cur.rowcount
    per_second = max(1, round(skipped))
    cur.execute(f"""
        INSERT INTO step_counts (run_pk, seq, ts, stage, mode, reason, count, num_tokens, padded_tokens, duration_s,
                                 batch_sizes)
        SELECT r.run_pk, 1000000000 + s.t, s.t + 0.999, 'decode', 'graph', NULL, {per_second}, {per_second * 24},
               0, {per_second} * r.graph_s,
               json_build_object('24', json_build_object('count', {per_second}, 'num_tokens', {per_second * 24},
                                                         'padded_tokens', 0, 'duration_s', {per_second} * r.graph_s))
        FROM bench_runs r
        CROSS JOIN LATERAL generate_series(ceil(greatest(r.started, {raw_from}))::bigint, floor(r.ended)::bigint - 1) s(t)
        WHERE r.ended > {raw_from} AND random() < {counts_per_s}""")
    return steps, cur.rowcount


def sizes(store) -> dict[str, int]:
    """Bytes on disk (tables, indexes, TOAST) by what retention does with them."""
    from replayscope.collector.models.retention import PARTITIONS_SCHEMA

    with store.read() as conn:
        tables = dict(conn.exec_driver_sql(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND n.nspname IN (current_schema(), %s)", (PARTITIONS_SCHEMA,)).all())
    raw = sum(v for k, v in tables.items() if k.startswith(("steps_d", "step_counts_d")))
    seconds = sum(v for k, v in tables.items() if k.startswith("step_rollups_d"))
    kept = sum(v for k, v in tables.items() if not k.startswith(("steps_d", "step_counts_d", "step_rollups_d")))
    return {"kept": kept, "raw": raw, "seconds": seconds, "tables": tables}
