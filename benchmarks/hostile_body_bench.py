"""Does a hostile body hold up other requests? ``python -m benchmarks.hostile_body_bench``

A collector on uvicorn (one process, 127.0.0.1). Baseline: ``GET /healthz`` latency with
nothing else going on. Then the same while a second client keeps posting an ~8 MB body
whose nesting check costs the most (groups of brackets 30 deep, 7.9 MB): the check runs in
a worker thread, so the event loop keeps answering. Prints medians, the worst, and the
ratio to the baseline (the 0.9 s stall this replaced showed as a worst case near 900 ms).
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import tempfile
import threading
import time


def _latencies(port: int, seconds: float) -> list[float]:
    out = []
    deadline = time.monotonic() + seconds
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while time.monotonic() < deadline:
        start = time.perf_counter()
        conn.request("GET", "/healthz")
        conn.getresponse().read()
        out.append(time.perf_counter() - start)
        time.sleep(0.01)
    conn.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each phase measures")
    args = parser.parse_args(argv)

    from replayscope.collector.api import create_api
    from replayscope.collector.ingest import ingest_run
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store
    from tests.live_server import serving

    body = b'{"events": [' + (b"[" * 30 + b"]" * 30 + b",") * 130_000 + b"1]}"
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{tmp}/bench.db", upgrade=True)
        ingest_run(store, {"run_id": "r", "name": "r", "source": "runner", "started_at": 1.0, "backend": "static",
                           "model": "tiny", "device": "cpu"})
        with serving(create_api(store, Settings(run_services=False))) as url:
            port = int(url.rsplit(":", 1)[1])
            idle = _latencies(port, args.seconds)
            stop = threading.Event()
            posted = []

            def hostile():
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                while not stop.is_set():
                    start = time.perf_counter()
                    conn.request("POST", "/v1/runs/r/events", body=body,
                                 headers={"Content-Type": "application/json"})
                    conn.getresponse().read()
                    posted.append(time.perf_counter() - start)
                conn.close()

            thread = threading.Thread(target=hostile, daemon=True)
            thread.start()
            time.sleep(0.5)
            busy = _latencies(port, args.seconds)
            stop.set()
            thread.join(60)
        store.dispose()
    print(f"{'GET /healthz':<40} {'median ms':>10} {'worst ms':>10}")
    print(f"{'idle':<40} {statistics.median(idle) * 1000:>10.2f} {max(idle) * 1000:>10.2f}")
    print(f"{'while 7.9 MB hostile bodies are posted':<40} {statistics.median(busy) * 1000:>10.2f} "
          f"{max(busy) * 1000:>10.2f}")
    print(f"hostile bodies answered: {len(posted)}, median {statistics.median(posted) * 1000:.0f} ms each; "
          f"/healthz median ratio busy/idle = {statistics.median(busy) / statistics.median(idle):.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
