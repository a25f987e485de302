"""Dashboard page latency on a run of one million steps (SQLite).

For each page: what its layout and its callback do on the server — the query-layer
calls, the figure building, and the JSON encoding Dash sends to the browser — timed as
one unit (median of several calls). The run is built by ``benchmarks.query_bench``.

    python -m benchmarks.dashboard_bench [--steps 1000000] [--db PATH] [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

TARGET_MS = 500


def _encode(value) -> int:
    from plotly.io.json import to_json_plotly

    return len(to_json_plotly(value))


def page_cases(store, run_id: str, baseline: str):
    """(page, callable) pairs doing what each page does per load / refresh."""
    from replayscope.app import comparisons
    from replayscope.app.pages import advisor, alerts, run, runs, startup

    def runs_page():
        return _encode(runs.page_data(store))

    def run_page():
        run.layout(run_id=run_id)
        data = run.page_data(store, run_id)
        return _encode([data["stats"], list(data["figures"].values()),
                        run.reason_cards(data["reasons"]), comparisons.comparison_block(data["comparison"])])

    def startup_page():
        startup.layout(run_id=run_id)
        data = startup.page_data(store, run_id, baseline)
        return _encode([data["waterfall"], data["capture_fig"], data["diff_fig"], data["diff"],
                        startup.diagnosis_children(data)])

    def advisor_page():
        advisor.layout(run_id=run_id)
        data = advisor.page_data(store, run_id, 8)
        return _encode([data["rows"], data["figure"], advisor.body(data)])

    def alerts_page():
        return _encode(alerts.page_data(store))

    return [("Runs (/)", runs_page), ("Run (/run/<id>)", run_page), ("Startup (/startup/<id>)", startup_page),
            ("Advisor (/advisor/<id>, K=8)", advisor_page), ("Alerts (/alerts)", alerts_page)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--db", help="reuse/keep this SQLite file (built when missing)")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)

    from replayscope.app.server import create_server
    from benchmarks.query_bench import build_run
    from replayscope.collector.models import queries
    from replayscope.collector.alerting.alerts import create_rule
    from replayscope.collector.ingest import ingest_events, ingest_run
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    path = args.db or os.path.join(tempfile.mkdtemp(prefix="replayscope-dbench-"), "d.db")
    fresh = not os.path.exists(path)
    store = Store.open(f"sqlite:///{path}", upgrade=True)
    run_id, baseline = "big-run", "baseline-run"
    if fresh:
        start = time.perf_counter()
        build_run(store, args.steps)
        ingest_run(store, {"run_id": baseline, "name": "baseline", "source": "runner", "started_at": 1.6e9,
                           "backend": "cuda", "model": "llama-8b", "device": "H200"})
        ingest_events(store, baseline, [
            {"seq": i, "ts": 1.6e9 + i, "kind": "capture", "graph_bs": bs, "stage": "decode",
             "duration_s": 0.04 * bs ** 0.5, "pool_bytes": bs << 24, "pool_delta_bytes": 1 << 24, "status": "ok"}
            for i, bs in enumerate((1, 2, 4, 8, 16, 32))])
        create_rule(store, {"name": "eager-high", "threshold": 0.05, "window_s": 600, "min_steps": 100})
        print(f"built {args.steps:,} steps in {time.perf_counter() - start:.1f}s at {path}")
    create_server(store, Settings(run_services=False))      # binds the store, registers the pages
    steps = queries.run_summary(store, run_id)["steps"]
    print(f"run {run_id}: {steps:,} steps; each page's layout + callback data (queries, figures, JSON); "
          f"median of {args.repeat}, target < {TARGET_MS} ms")
    print(f"{'page':<32}{'median ms':>11}{'max ms':>9}{'JSON kB':>9}")
    worst = 0.0
    for name, fn in page_cases(store, run_id, baseline):
        size = fn()                                          # warm caches
        samples = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1000)
        median = statistics.median(samples)
        worst = max(worst, median)
        print(f"{name:<32}{median:>11.1f}{max(samples):>9.1f}{size / 1024:>9.1f}")
    print(f"slowest page: {worst:.1f} ms ({'within' if worst < TARGET_MS else 'OVER'} the {TARGET_MS} ms target)")
    store.dispose()
    return 0 if worst < TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
