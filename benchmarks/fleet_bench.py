"""Fleet-size benchmark on PostgreSQL: a generated fleet of GPUs over days, then what it costs.

The fleet (defaults: 64 GPUs x 30 days, 6-hour runs back to back, 20 decode/prefill steps
a second on average per GPU, 4 models on 2 device kinds, 3 versions deployed in turn, one
version slower on one model) is generated inside PostgreSQL (COPY and generate_series):

- rollups for all of it: whole-run and minute rollups, batch sizes, phases, captures;
- 1-second rollups for the last ``--second-days`` days;
- raw step events (steps sent one by one with 1-in-``--graph-sample`` graph sampling, and
  the per-second counts of the rest) for the most recent days that fit ``--raw-steps``
  (at most ``--raw-days``, the raw retention).

Then, in the same run: store size per GPU-day (kept for good / raw detail / 1-second
rollups); ingest of step events POSTed through three collector processes against
PostgreSQL's own ``COPY`` of the same rows; every query-layer call, API read and page's
data (median of ``--repeat``) with the raw steps in place; the fleet page over every run.

    python -m benchmarks.fleet_bench --pg postgresql+psycopg://user:pw@host/postgres \
        [--gpus 64] [--days 30] [--raw-steps 50000000] [--keep | --db URL]

``--pg`` names a server where the user may create a database (default:
$REPLAYSCOPE_TEST_PG_URL); ``--db`` reuses a fleet generated before (with ``--keep``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import time
import uuid

from benchmarks import collectors as collector_processes
from benchmarks.harness import timed_threads
from benchmarks.fleet_generate import CAPTURE_SIZES, DAY, DEVICES, Fleet, generate, sizes


QUERY_TARGET_MS = 200
FLEET_TARGET_MS = 500
INGEST_TARGET = 0.3
BATCH = 5000


def _post(conn, path: str, body: bytes) -> dict:
    conn.request("POST", path, body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    if response.status not in (200, 201):
        raise RuntimeError(f"HTTP {response.status} on {path}: {data[:200]!r}")
    return json.loads(data)


def ingest_batches(n_runs: int, per_run: int, now: float) -> dict[str, list[list[dict]]]:
    """Step events as runners post them (batches of 5000), for ``n_runs`` new runs."""
    rng = random.Random(3)
    out = {}
    for r in range(n_runs):
        events = []
        for i in range(per_run):
            mode = rng.choices(("graph", "padded", "eager"), (0.8, 0.15, 0.05))[0]
            bs = rng.choice(CAPTURE_SIZES) if mode == "graph" else rng.randint(1, 63)
            graph_bs = bs if mode == "graph" else (next(c for c in CAPTURE_SIZES if c > bs) if mode == "padded"
                                                   else None)
            events.append({"seq": i, "ts": now - per_run * 0.01 + i * 0.01, "kind": "step", "stage": "decode",
                           "mode": mode, "raw_bs": bs, "graph_bs": graph_bs, "num_tokens": bs,
                           "padded_tokens": (graph_bs - bs) if mode == "padded" else 0,
                           "reason": "batch_too_large" if mode == "eager" else None,
                           "duration_s": 0.01 + rng.random() * 0.002})
        out[f"ingest-{uuid.uuid4().hex[:8]}-{r}"] = [events[i:i + BATCH] for i in range(0, per_run, BATCH)]
    return out


def http_ingest(db_url: str, batches: dict[str, list[list[dict]]], collectors: int) -> float:
    """Seconds to POST every batch through ``collectors`` collector processes, one client
    per collector, each posting its runs' batches in turn (as runners spread over them)."""
    started = [collector_processes.start(db_url, services=True) for _ in range(collectors)]
    ports, procs = [port for port, _ in started], [proc for _, proc in started]
    try:
        runs = list(batches)
        for i, run_id in enumerate(runs):
            conn = http.client.HTTPConnection("127.0.0.1", ports[i % collectors])
            _post(conn, "/v1/runs", json.dumps({"run_id": run_id, "name": run_id, "source": "runner",
                                                "started_at": batches[run_id][0][0]["ts"], "backend": "cuda",
                                                "model": "llama-3.1-8b", "device": DEVICES[0]}).encode())
        bodies = {run_id: [json.dumps({"events": b}).encode() for b in batches[run_id]] for run_id in runs}
        accepted = [0] * collectors
        errors: list[BaseException] = []

        def client(k: int) -> None:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", ports[k], timeout=120)
                mine = runs[k::collectors]
                for j in range(max(len(bodies[r]) for r in mine)):
                    for run_id in mine:
                        if j < len(bodies[run_id]):
                            accepted[k] += _post(conn, f"/v1/runs/{run_id}/events", bodies[run_id][j])["accepted"]
            except BaseException as error:  # noqa: BLE001 (reported by the caller)
                errors.append(error)

        elapsed = timed_threads(client, collectors)
        if errors:
            raise errors[0]
        expected = sum(len(e) for b in batches.values() for e in b)
        if sum(accepted) != expected:
            raise RuntimeError(f"accepted {sum(accepted)} of {expected} events")
        return elapsed
    finally:
        collector_processes.stop(*procs)


def _tsv(rows) -> bytes:
    """COPY text format of rows with no tabs, newlines or backslashes in them."""
    return "".join("\t".join("\\N" if v is None else repr(v) if isinstance(v, float) else str(v) for v in row) + "\n"
                   for row in rows).encode()


def copy_ingest(store, batches: dict[str, list[list[dict]]]) -> float:
    """Seconds for PostgreSQL's COPY of the same step rows into the same steps table (one
    COPY and commit per batch of 5000, as the collectors commit), for runs of their own. The
    rows are encoded as COPY text before the clock starts, as the HTTP bodies are JSON."""
    cols = ("run_pk", "seq", "ts", "stage", "mode", "raw_bs", "graph_bs", "num_tokens", "padded_tokens",
            "reason", "duration_s")
    raw = store.engine.raw_connection()
    try:
        cur = raw.cursor()
        pks = []
        for run_id in batches:
            cur.execute("INSERT INTO runs (run_id, name, source, backend, model, device, started_at, status, "
                        "created_at, last_seen_at) VALUES (%s, %s, 'runner', 'cuda', 'copy', 'copy', 0, 'finished', "
                        "0, 0) RETURNING id", ("copy-" + run_id, "copy-" + run_id))
            pks.append(cur.fetchone()[0])
        raw.commit()
        rows = [[_tsv((pk,) + tuple(e[c] for c in cols[1:]) for e in batch) for batch in run_batches]
                for pk, run_batches in zip(pks, batches.values())]
        start = time.perf_counter()
        for j in range(max(len(r) for r in rows)):
            for run_rows in rows:
                if j < len(run_rows):
                    with cur.copy(f"COPY steps ({', '.join(cols)}) FROM STDIN") as copy:
                        copy.write(run_rows[j])
                    raw.commit()
        return time.perf_counter() - start
    finally:
        raw.close()


def time_ms(fn, repeat: int) -> tuple[float, float]:
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), max(samples)


def read_cases(store, recent: str, old: str, baseline: str):
    from fastapi.testclient import TestClient

    from replayscope.app.pages import fleet as fleet_page
    from benchmarks.dashboard_bench import _encode, page_cases
    from replayscope.collector.alerting import alerts
    from replayscope.collector.analysis import fleet, regressions
    from replayscope.collector.models import queries
    from replayscope.collector.api import create_api
    from replayscope.collector.settings import Settings

    client = TestClient(create_api(store, Settings(run_services=False)), base_url="http://127.0.0.1")  # a served host
    cases = [("list_runs (500 newest)", lambda: queries.list_runs(store))]
    for label, run_id in (("recent run", recent), ("30-day-old run", old)):
        cases += [
            (f"{label}: run_summary", lambda r=run_id: queries.run_summary(store, r)),
            (f"{label}: mode_timeline (auto)", lambda r=run_id: queries.mode_timeline(store, r)),
            (f"{label}: mode_timeline (1 s)", lambda r=run_id: queries.mode_timeline(store, r, bucket_s=1)),
            (f"{label}: reason_breakdown", lambda r=run_id: queries.reason_breakdown(store, r)),
            (f"{label}: batch_histogram", lambda r=run_id: queries.batch_histogram(store, r, stage="decode")),
            (f"{label}: step_time_by_mode", lambda r=run_id: queries.step_time_by_mode(store, r)),
            (f"{label}: captures + phases", lambda r=run_id: (queries.captures(store, r), queries.phases(store, r))),
            (f"{label}: regressions", lambda r=run_id: regressions.run_regressions(store, r)),
            (f"{label}: GET /v1/runs/{{id}}", lambda r=run_id: client.get(f"/v1/runs/{r}").raise_for_status()),
            (f"{label}: GET .../timeline", lambda r=run_id: client.get(f"/v1/runs/{r}/timeline").raise_for_status()),
        ]
    cases += [
        ("alert_events", lambda: queries.alert_events(store)),
        ("evaluate_alerts (eager-ratio + regression rule)", lambda: alerts.evaluate_alerts(store)),
        ("fleet_runs (every run, 30 days)", lambda: fleet.fleet_runs(store)),
        ("GET /v1/fleet?model=qwen2.5-7b", lambda: client.get("/v1/fleet", params={"model": "qwen2.5-7b"})
         .raise_for_status()),
    ]
    pages = [(f"page: {name}", fn) for name, fn in page_cases(store, recent, baseline)]
    pages.append(("page: Fleet (/fleet, last 30 days)",
                  lambda: _encode(list(fleet_page.page_data(store, period="30d").values())[:4])))
    pages.append(("page: Fleet (/fleet, one model, 7 days)",
                  lambda: _encode(list(fleet_page.page_data(store, model="qwen2.5-7b", period="7d").values())[:4])))
    return cases, pages


def _fresh_database(admin_url: str) -> str:
    import sqlalchemy as sa

    base = sa.make_url(admin_url)
    name = f"replayscope_fleet_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(base, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    engine.dispose()
    return base.set(database=name).render_as_string(hide_password=False)


def _drop_database(url: str) -> None:
    import sqlalchemy as sa

    target = sa.make_url(url)
    engine = sa.create_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT",
                              poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{target.database}" WITH (FORCE)')
    engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=os.environ.get("REPLAYSCOPE_TEST_PG_URL"),
                        help="a PostgreSQL server URL whose user may create databases")
    parser.add_argument("--db", help="reuse a fleet generated before (--keep printed its URL)")
    parser.add_argument("--keep", action="store_true", help="keep the generated database")
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--run-hours", type=float, default=6.0)
    parser.add_argument("--steps-per-s", type=float, default=20.0, help="average steps a second per GPU")
    parser.add_argument("--graph-sample", type=int, default=32)
    parser.add_argument("--raw-days", type=float, default=14.0, help="raw retention")
    parser.add_argument("--raw-steps", type=int, default=50_000_000,
                        help="at most this many raw step events (steps + count events) are kept")
    parser.add_argument("--second-days", type=float, default=1.0, help="days of 1-second rollups generated")
    parser.add_argument("--ingest-events", type=int, default=300_000)
    parser.add_argument("--collectors", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    if not (args.pg or args.db):
        parser.error("--pg URL (or $REPLAYSCOPE_TEST_PG_URL) or --db URL is required")

    from replayscope.app.server import create_server
    from replayscope.collector.alerting import alerts
    from replayscope.collector.models import queries
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    def log(message: str) -> None:
        print(f"  [{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    now = time.time()
    fleet = Fleet(args.gpus, args.days, args.run_hours, args.steps_per_s, args.graph_sample, args.raw_days,
                  args.second_days, args.raw_steps, now)
    url = args.db or _fresh_database(args.pg)
    store = None
    try:
        store = Store.open(url, upgrade=not args.db)
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        print(f"replayscope fleet benchmark, {started}; {os.cpu_count()} cores, load average "
              f"{os.getloadavg()[0]:.1f} at start")
        if not args.db:
            t0 = time.perf_counter()
            generated = generate(store, fleet, log)
            print(f"generated {generated['runs']:,} runs of {fleet.gpus} GPUs x {fleet.days} days in "
                  f"{time.perf_counter() - t0:.0f} s: {generated['second_rows']:,} 1-second rollup rows "
                  f"({fleet.second_days:g} days), {generated['raw_steps'] + generated['raw_counts']:,} raw step "
                  f"events ({generated['raw_steps']:,} steps + {generated['raw_counts']:,} count events, last "
                  f"{fleet.raw_window_days:.2f} days)")
        sent, counts = fleet.raw_rows_per_gpu_s()
        print(f"fleet model: {fleet.steps_per_s:g} steps/s per GPU ({fleet.steps_per_s * DAY / 1e6:.2f} M steps "
              f"per GPU-day); 1 in {fleet.graph_sample} graph steps sent: {sent:.2f} step events + {counts:.2f} "
              f"count events kept per GPU-second")

        size = sizes(store)
        gpu_days = fleet.gpus * fleet.days
        print(f"\nstore size            total      per GPU-day")
        print(f"kept for good      {size['kept'] / 2**30:7.2f} GiB   {size['kept'] / gpu_days / 2**10:8.1f} KiB "
              f"(runs, whole-run and minute rollups, batch sizes, phases, captures; {gpu_days:,} GPU-days)")
        raw_days = fleet.gpus * fleet.raw_window_days
        print(f"raw step events    {size['raw'] / 2**30:7.2f} GiB   {size['raw'] / raw_days / 2**20:8.1f} MiB "
              f"(while retained; {raw_days:,.0f} GPU-days held)")
        sec_days = fleet.gpus * fleet.second_days
        print(f"1-second rollups   {size['seconds'] / 2**30:7.2f} GiB   {size['seconds'] / sec_days / 2**20:8.1f} MiB "
              f"(while retained; {sec_days:,.0f} GPU-days held)")
        steady = (size["kept"] / gpu_days + size["raw"] / raw_days * 14 / 30 + size["seconds"] / sec_days * 7 / 30)
        print(f"steady state, 30 days kept, raw 14 days, 1-second rollups 7 days: "
              f"{steady / 2**20:.1f} MiB per GPU-day of history, {steady * gpu_days / 2**30:.1f} GiB for this fleet")

        per_run = args.ingest_events // (2 * args.collectors)
        batches = ingest_batches(2 * args.collectors, per_run, now)
        n = sum(len(b) for run in batches.values() for b in run)
        log("ingest: COPY baseline")
        copy_s = copy_ingest(store, batches)
        log(f"ingest: HTTP through {args.collectors} collectors")
        http_s = http_ingest(url, batches, args.collectors)
        print(f"\n{'ingest':<58}{'events':>10}{'seconds':>9}{'events/s':>11}")
        print(f"{'PostgreSQL COPY into steps (one COPY + commit per 5000)':<58}{n:>10,}{copy_s:>9.2f}{n / copy_s:>11,.0f}")
        print(f"{'HTTP POST through %d collectors (batches of 5000)' % args.collectors:<58}{n:>10,}{http_s:>9.2f}"
              f"{n / http_s:>11,.0f}")
        ratio = copy_s / http_s
        print(f"HTTP / COPY = {ratio:.2f}x (target >= {INGEST_TARGET}x)")

        create_server(store, Settings(run_services=False))
        for rule in ({"name": "eager over 5 percent", "threshold": 0.05, "window_s": 300, "min_steps": 100},
                     {"name": "slower than before", "kind": "regression", "threshold": 0.1, "window_s": DAY,
                      "min_steps": 1000}):
            if rule["name"] not in {r["name"] for r in queries.alert_rules(store)}:
                alerts.create_rule(store, rule)
        with store.read() as conn:
            recent = conn.exec_driver_sql("SELECT run_id FROM runs WHERE status = 'finished' AND run_id LIKE 'fleet-%%' "
                                          "ORDER BY started_at DESC LIMIT 1").scalar()
            old = conn.exec_driver_sql("SELECT run_id FROM runs WHERE run_id LIKE 'fleet-%%' "
                                       "ORDER BY started_at LIMIT 1").scalar()
            raw_steps = conn.exec_driver_sql("SELECT count(*) FROM steps").scalar()
        cases, pages = read_cases(store, recent, old, old)
        print(f"\nreads with {raw_steps:,} raw steps retained; median (max) of {args.repeat}")
        worst_query = worst_page = worst_fleet = 0.0
        for name, fn in cases + pages:
            median, peak = time_ms(fn, args.repeat)
            print(f"{name:<58}{median:>9.1f} ms  ({peak:.1f})")
            if name.startswith(("page: Fleet", "fleet", "GET /v1/fleet")):
                worst_fleet = max(worst_fleet, median)
            elif name.startswith("page:"):
                worst_page = max(worst_page, median)
            else:
                worst_query = max(worst_query, median)
        print(f"slowest query {worst_query:.1f} ms, slowest page {worst_page:.1f} ms (target {QUERY_TARGET_MS} ms); "
              f"slowest fleet view {worst_fleet:.1f} ms (target {FLEET_TARGET_MS} ms)")
        ok = (ratio >= INGEST_TARGET and worst_query <= QUERY_TARGET_MS and worst_page <= QUERY_TARGET_MS
              and worst_fleet <= FLEET_TARGET_MS)
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
        return 0 if ok else 1
    finally:
        if store is not None:
            store.dispose()
        if args.keep or args.db:
            print(f"fleet kept at {url}")
        else:
            _drop_database(url)


if __name__ == "__main__":
    sys.exit(main())
