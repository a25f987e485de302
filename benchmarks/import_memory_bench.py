"""Importer memory benchmark: peak RSS of ``replayscope import`` and ``follow`` on big logs.

    python -m benchmarks.import_memory_bench [--sizes-mb 500,2000] [--engines sglang,vllm] [--dir DIR] [--json FILE]

Each log is generated here: a real fixture's startup (tests/importers/fixtures), then its
serving lines repeated with advancing timestamps until the file has the size asked for
(SGLang: ``Decode batch`` / ``Prefill batch`` lines of ``sglang_v046_decode_sample_serving.log``;
vLLM: the ``--cudagraph-metrics`` tables of ``vllm_v013_cudagraph_metrics_serving.log``).
Each command runs in its own process (``python -m replayscope``), into a new SQLite store, and
its peak resident set is read from ``getrusage(RUSAGE_CHILDREN)`` after it exits, with its
wall time and what it imported. The bound it is checked against is 300 MB for any size.
docs/benchmarks.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "importers" / "fixtures"
BOUND_MB = 300
SOURCES = {"sglang": "sglang_v046_decode_sample_serving.log", "vllm": "vllm_v013_cudagraph_metrics_serving.log"}
SGLANG_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
VLLM_STAMP = re.compile(r"(\d\d-\d\d \d\d:\d\d:\d\d)")


def split_fixture(engine: str) -> tuple[list[str], list[str]]:
    """(startup lines, serving lines) of the engine's fixture: serving starts after the ready line."""
    lines = (FIXTURES / SOURCES[engine]).read_bytes().decode("utf-8").split("\n")
    ready = next(i for i, line in enumerate(lines)
                 if "fired up and ready" in line or "Application startup complete" in line or "Uvicorn running" in line)
    serving = [line for line in lines[ready + 1:] if line.strip()]
    return lines[:ready + 1], serving


def restamp(engine: str, line: str, when: datetime) -> str:
    if engine == "sglang":
        return SGLANG_STAMP.sub("[" + when.strftime("%Y-%m-%d %H:%M:%S"), line, count=1)
    return VLLM_STAMP.sub(when.strftime("%m-%d %H:%M:%S"), line, count=1)


def generate(engine: str, path: Path, size_mb: int) -> int:
    """Write a log of about ``size_mb`` MB; its number of lines."""
    startup, serving = split_fixture(engine)
    target = size_mb * 10**6
    when = datetime(2026, 1, 1, 1, tzinfo=timezone.utc)
    written = lines = 0
    with open(path, "w", encoding="utf-8") as out:
        head = "\n".join(startup) + "\n"
        out.write(head)
        written += len(head.encode())
        block = []
        while written < target:
            block.clear()
            for line in serving:
                when += timedelta(seconds=1)
                block.append(restamp(engine, line, when))
            text = "\n".join(block) + "\n"
            out.write(text)
            written += len(text.encode())
            lines += len(block)
    return lines + len(startup)


def measure(argv: list[str], cwd: Path) -> dict:
    """Run one command in a child process: its wall time, exit code, peak RSS (MB) and last line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "replayscope", *argv], cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss      # KiB on Linux: the largest child so far
    return {"rc": done.returncode, "wall_s": round(wall, 1), "peak_rss_mb": round(peak / 1024, 1),
            "peak_is_this_run": peak > before,
            "last_line": (done.stdout.strip().splitlines() or done.stderr.strip().splitlines() or [""])[-1][:200]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes-mb", default="500,2000")
    parser.add_argument("--engines", default="sglang,vllm")
    parser.add_argument("--commands", default="import,follow")
    parser.add_argument("--dir", default=None, help="where the logs are written (default: a temporary folder)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        work = Path(tmp)
        for engine in args.engines.split(","):
            for size in (int(s) for s in args.sizes_mb.split(",")):
                log = work / f"{engine}-{size}mb.log"
                lines = generate(engine, log, size)
                for command in args.commands.split(","):
                    db = work / f"{engine}-{size}-{command}.db"
                    if command == "import":
                        cmd = ["import", engine, str(log), "--db", f"sqlite:///{db}"]
                    else:
                        cmd = ["follow", engine, str(log), "--db", f"sqlite:///{db}", "--idle-exit", "1",
                               "--interval", "0.2", "--state", str(work / "state.json")]
                    # each measurement in its own process, so RUSAGE_CHILDREN's maximum is this one's
                    result = json.loads(subprocess.run(
                        [sys.executable, "-c", "import json,sys; from benchmarks.import_memory_bench import measure;"
                         "from pathlib import Path; print(json.dumps(measure(sys.argv[1:], Path.cwd())))", *cmd],
                        cwd=work, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                        check=True).stdout)
                    row = {"engine": engine, "size_mb": round(log.stat().st_size / 1e6), "lines": lines,
                           "command": command, **result, "within_bound": result["peak_rss_mb"] <= BOUND_MB}
                    rows.append(row)
                    print(f"{engine:7} {row['size_mb']:5d} MB {command:7} rc {row['rc']}  peak {row['peak_rss_mb']:7.1f} MB  "
                          f"{row['wall_s']:7.1f} s  {row['last_line'][:90]}", flush=True)
                    db.unlink(missing_ok=True)
                log.unlink()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0 if all(r["within_bound"] and r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
