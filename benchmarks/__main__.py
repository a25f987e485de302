"""All of replayscope's benchmarks, one table: ``python -m benchmarks [--quick] [--verbose]``.

Runs each benchmark module's ``main()`` (their own tables go to stdout with --verbose),
plus the startup of ``replayscope demo`` to its first chart, and prints one summary:

- runner: the emitter's host cost per step on any machine; eager/graph/instrumented step
  times and capture cost only with CUDA (docs/gpu-results.md has the GPU figures);
- trace: host cost ``replayscope trace`` adds per replay and per step; with CUDA, traced against
  untraced decode steps;
- ingest: HTTP ingest against raw ``sqlite3.executemany`` into the same table;
- query latency at 1M and 5M steps (``--quick``: 100k and 500k);
- dashboard page data time (layout + callback data of every page) on a 1M-step run;
- ``replayscope --help`` wall time against a bare interpreter start (target < 0.3 s);
- ``replayscope demo`` from launch to the run page's data holding a step, measured through
  the HTTP API the run page's chart reads (``GET /v1/runs/{id}/timeline`` non-empty).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _quiet_main(main, argv: list[str], verbose: bool) -> tuple[int, str]:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(argv)
    text = buffer.getvalue()
    if verbose:
        print(text, end="", flush=True)
    return code, text


def _json_result(main, verbose: bool) -> dict:
    """The figures a benchmark's ``main(["--json", FILE])`` writes, read back from a temporary file."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        _quiet_main(main, ["--json", path], verbose)
        return json.loads(Path(path).read_text())
    finally:
        os.unlink(path)


def _number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    if match is None:
        raise RuntimeError(f"benchmark output without {pattern!r}:\n{text}")
    return float(match.group(1).replace(",", ""))


def runner_rows(verbose: bool) -> list[tuple[str, str, str]]:
    from benchmarks import runner_bench

    result = _json_result(runner_bench.main, verbose)
    e = result["emitter"]
    rows = [("runner", "Emitter.step host cost", f"{e['emitter_step_us']:.2f} us/step "
                                                 f"(list append {e['list_append_us']:.2f} us)")]
    worst = max(result["host_cpu"], key=lambda r: r["added_host_us"])
    rows.append(("runner", "GraphRunner.step host cost over a bare loop (CPU static, worst bs)",
                 f"+{worst['added_host_us']:.2f} us/step at bs {worst['bs']} "
                 f"({worst['instrumented_host_us']:.2f} vs {worst['bare_host_us']:.2f} us)"))
    if "rows" not in result:
        rows.append(("runner", "graph vs eager, instrumentation overhead, capture",
                     "needs CUDA (figures in docs/gpu-results.md)"))
        return rows
    for r in result["rows"]:
        rows.append(("runner", f"{r['preset']} bs {r['bs']}: eager / graph / instrumented ms",
                     f"{r['eager_ms']:.3f} / {r['graph_ms']:.3f} / {r['instrumented_ms']:.3f} "
                     f"(x{r['overhead_ratio']:.3f})"))
    for s in result["summaries"]:
        rows.append(("runner", f"{s['preset']}: capture total, pool", f"{s['capture_total_s']:.2f} s, "
                                                                      f"{(s['pool_bytes'] or 0) / 2**20:.0f} MiB"))
    return rows


def trace_rows(verbose: bool) -> list[tuple[str, str, str]]:
    from benchmarks import trace_bench

    result = _json_result(trace_bench.main, verbose)
    h = result["host"]
    rows = [("trace", "host cost added per hooked replay / per traced step",
             f"{h['replay_added_us']:.2f} us / {h['step_added_us']:.2f} us")]
    if "rows" not in result:
        rows.append(("trace", "traced vs untraced decode step", "needs CUDA (figures in docs/gpu-results.md)"))
        return rows
    for r in result["rows"]:
        rows.append(("trace", f"{r['preset']} bs {r['bs']}: traced / untraced step (synced, mean)",
                     f"x{r['ratio_synced']:.4f}, x{r['ratio_mean']:.4f}"))
    return rows


def ingest_rows(verbose: bool, quick: bool) -> list[tuple[str, str, str]]:
    from benchmarks import ingest_bench

    batches = "12" if quick else "40"
    _code, text = _quiet_main(ingest_bench.main, ["--batches", batches], verbose)
    raw = _number(r"raw sqlite3\.executemany.*?\s([\d,]+)\s*$", text.splitlines()[1])
    http = _number(r"HTTP ingest.*?\s([\d,]+)\s*$", text.splitlines()[2])
    return [("ingest", "raw sqlite3.executemany (steps table)", f"{raw:,.0f} events/s"),
            ("ingest", f"HTTP ingest, batches of {ingest_bench.HTTP_BATCH_EVENTS}, 1 client",
             f"{http:,.0f} events/s ({http / raw:.2f}x raw)")]


def query_rows(verbose: bool, steps: int) -> list[tuple[str, str, str]]:
    from benchmarks import query_bench

    _code, text = _quiet_main(query_bench.main, ["--steps", str(steps)], verbose)
    slowest = _number(r"slowest: ([\d.]+) ms", text)
    summary = _number(r"run_summary\s+([\d.]+)", text)
    timeline = _number(r"GET /v1/runs/\{id\}/timeline\s+([\d.]+)", text)
    label = f"{steps / 1e6:g}M steps"
    return [("query", f"{label}: run_summary", f"{summary:.1f} ms"),
            ("query", f"{label}: GET /v1/runs/{{id}}/timeline", f"{timeline:.1f} ms"),
            ("query", f"{label}: slowest of 17 queries (target < 200 ms)", f"{slowest:.1f} ms")]


def dashboard_rows(verbose: bool, steps: int) -> list[tuple[str, str, str]]:
    from benchmarks import dashboard_bench

    _code, text = _quiet_main(dashboard_bench.main, ["--steps", str(steps), "--repeat", "5"], verbose)
    slowest = _number(r"slowest page: ([\d.]+) ms", text)
    match = re.search(r"^Run \(/run/<id>\)\s+([\d.]+)", text, re.MULTILINE)
    run_page = float(match.group(1)) if match else None
    rows = [("dashboard", f"{steps / 1e6:g}M steps: slowest page data (layout + callbacks)", f"{slowest:.1f} ms")]
    if run_page is not None:
        rows.append(("dashboard", f"{steps / 1e6:g}M steps: run page data", f"{run_page:.1f} ms"))
    return rows


def cli_rows(verbose: bool) -> list[tuple[str, str, str]]:
    from benchmarks import cli_bench

    result = cli_bench.measure(repeat=15)
    if verbose:
        print(json.dumps(result, indent=2), flush=True)
    heavy = ", ".join(result["heavy_imports"]) or "none"
    return [("cli", "replayscope --help, median of 15 processes (target < 0.3 s)",
             f"{result['help_s'] * 1000:.0f} ms ({result['ratio']:.1f}x python -c pass; heavy imports: {heavy})")]


def fleet_rows(verbose: bool, quick: bool) -> list[tuple[str, str, str]]:
    """The fleet benchmark on PostgreSQL ($REPLAYSCOPE_TEST_PG_URL); --quick: 8 GPUs x 7 days."""
    from benchmarks import fleet_bench

    argv = ["--gpus", "8", "--days", "7", "--raw-steps", "2000000", "--ingest-events", "60000"] if quick else []
    _code, text = _quiet_main(fleet_bench.main, argv, verbose)
    kept = _number(r"kept for good .*?([\d.]+) KiB", text)
    raw = _number(r"raw step events .*?([\d.]+) MiB", text)
    ratio = _number(r"HTTP / COPY = ([\d.]+)x", text)
    query = _number(r"slowest query ([\d.]+) ms", text)
    page = _number(r"slowest page ([\d.]+) ms", text)
    fleet = _number(r"slowest fleet view ([\d.]+) ms", text)
    return [("fleet", "kept for good / raw detail per GPU-day", f"{kept:,.0f} KiB / {raw:,.1f} MiB"),
            ("fleet", "HTTP ingest through 3 collectors / PostgreSQL COPY", f"{ratio:.2f}x (target >= 0.3x)"),
            ("fleet", "slowest query / page (target 200 ms)", f"{query:.1f} ms / {page:.1f} ms"),
            ("fleet", "slowest fleet view (target 500 ms)", f"{fleet:.1f} ms")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=2) as response:
        return json.loads(response.read())


def demo_rows(verbose: bool, timeout_s: float = 180.0) -> list[tuple[str, str, str]]:
    """``replayscope demo`` from launch to the run page's chart data holding a step."""
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix="replayscope-demo-bench-")
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "replayscope", "demo", "--port", str(port), "--db",
                             f"sqlite:///{tmp}/demo.db", "--duration", str(int(timeout_s) + 30)],
                            cwd=REPO, stdin=subprocess.DEVNULL, stdout=None if verbose else subprocess.DEVNULL,
                            stderr=None if verbose else subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    serving = first_chart = None
    try:
        while time.perf_counter() - start < timeout_s:
            if proc.poll() is not None:
                raise RuntimeError(f"replayscope demo exited with {proc.returncode}")
            try:
                if serving is None:
                    _get(base + "/healthz")
                    serving = time.perf_counter() - start
                runs = [r for r in _get(base + "/v1/runs") if r["steps"] > 0]
                if runs and _get(f"{base}/v1/runs/{runs[0]['run_id']}/timeline"):
                    first_chart = time.perf_counter() - start
                    break
            except OSError:
                pass
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if first_chart is None:
        return [("demo", "replayscope demo to first chart", f"no chart within {timeout_s:.0f} s")]
    return [("demo", "replayscope demo: launch to collector serving", f"{serving:.1f} s"),
            ("demo", "replayscope demo: launch to first chart (timeline has a step)", f"{first_chart:.1f} s")]


def machine() -> str:
    try:
        import torch
        gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    except Exception:  # noqa: BLE001
        gpu = "torch unavailable"
    cpu = platform.processor() or platform.machine()
    return f"{platform.node()}: {os.cpu_count()} cores {cpu}, {gpu}, Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller stores (100k/500k query steps, 200k "
                                                             "dashboard steps, fewer ingest batches)")
    parser.add_argument("--only", help="comma-separated subset: cli,runner,trace,ingest,query,dashboard,demo, or "
                                       "fleet (PostgreSQL, $REPLAYSCOPE_TEST_PG_URL; not in the default set: ~20 min)")
    parser.add_argument("--verbose", action="store_true", help="also print each benchmark's own output")
    args = parser.parse_args(argv)
    wanted = set((args.only or "cli,runner,trace,ingest,query,dashboard,demo").split(","))
    query_steps = (100_000, 500_000) if args.quick else (1_000_000, 5_000_000)
    dash_steps = 200_000 if args.quick else 1_000_000

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"replayscope benchmarks, {started}; {machine()}", flush=True)
    rows: list[tuple[str, str, str]] = []
    sections = [
        ("cli", lambda: cli_rows(args.verbose)),
        ("runner", lambda: runner_rows(args.verbose)),
        ("trace", lambda: trace_rows(args.verbose)),
        ("ingest", lambda: ingest_rows(args.verbose, args.quick)),
        ("query", lambda: [r for n in query_steps for r in query_rows(args.verbose, n)]),
        ("dashboard", lambda: dashboard_rows(args.verbose, dash_steps)),
        ("demo", lambda: demo_rows(args.verbose)),
        ("fleet", lambda: fleet_rows(args.verbose, args.quick)),
    ]
    for name, fn in sections:
        if name not in wanted:
            continue
        t0 = time.perf_counter()
        print(f"  running {name} ...", file=sys.stderr, flush=True)
        try:
            rows += fn()
        except Exception as error:  # noqa: BLE001 (one failing benchmark must not hide the others)
            rows.append((name, "FAILED", f"{type(error).__name__}: {error}"[:120]))
        print(f"  {name} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    width = max(len(r[1]) for r in rows) + 2
    print(f"\n{'area':<10}{'measure':<{width}}result")
    print("-" * (10 + width + 40))
    for area, measure, result in rows:
        print(f"{area:<10}{measure:<{width}}{result}")
    return 1 if any(r[1] == "FAILED" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
