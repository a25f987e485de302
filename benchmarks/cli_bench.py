"""Wall time of ``replayscope --help`` (target < 0.3 s), against a bare interpreter start.

Each measurement is a fresh process, as a user runs it: ``python -m replayscope --help``
from the repository, and ``python -c pass`` as the baseline in the same loop. Also
reports whether building the parser imported torch, numpy, SQLAlchemy or FastAPI.

    python -m benchmarks.cli_bench [--repeat 15] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import write_json

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 0.3
HEAVY = ("torch", "numpy", "sqlalchemy", "fastapi", "dash")


def _wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def heavy_modules_loaded() -> list[str]:
    """Heavy packages in sys.modules after building the parser, in a fresh process."""
    probe = ("import sys; from replayscope.app.cli import build_parser; build_parser(); "
             f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, check=True, capture_output=True, text=True)
    return done.stdout.split()


def measure(repeat: int) -> dict:
    help_argv = [sys.executable, "-m", "replayscope", "--help"]
    bare_argv = [sys.executable, "-c", "pass"]
    _wall(help_argv)                                     # warm the file cache once
    helps, bares = [], []
    for _ in range(repeat):
        helps.append(_wall(help_argv))
        bares.append(_wall(bare_argv))
    help_s, bare_s = statistics.median(helps), statistics.median(bares)
    return {"help_s": help_s, "help_min_s": min(helps), "interpreter_s": bare_s,
            "ratio": help_s / bare_s, "target_s": TARGET_S, "heavy_imports": heavy_modules_loaded()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cli_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="processes of each kind (default 15)")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    args = parser.parse_args(argv)
    result = measure(args.repeat)
    print(f"replayscope --help      median {result['help_s'] * 1000:.0f} ms (min {result['help_min_s'] * 1000:.0f} ms), "
          f"target < {TARGET_S * 1000:.0f} ms")
    print(f"python -c pass          median {result['interpreter_s'] * 1000:.0f} ms "
          f"(--help is {result['ratio']:.1f}x a bare interpreter)")
    print(f"heavy imports at parse: {', '.join(result['heavy_imports']) or 'none'}")
    write_json(args.json, result)
    return 0 if result["help_s"] < TARGET_S and not result["heavy_imports"] else 1


if __name__ == "__main__":
    sys.exit(main())
