"""The cost of ``replayscope trace`` to a real ``vllm serve`` (GPU, vLLM importable): the same
server and workload started untraced and traced, alternating, each start timed from the command to
a healthy ``/health``, then rounds of requests of exact lengths (requests per second, the first
round of each start left out as its warm-up). A first untraced start warms vLLM's compile and
kernel caches so that no start pays them.

    python -m benchmarks.vllm_bench [--pairs 2] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchmarks import vllm_harness as harness


def measure(pairs: int, out: Path, rounds: int = 4, requests: int = 48, later: int = 16) -> dict:
    model = harness.make_model(out / "model")
    harness.run_serve(model, out / "warm", "warm", False, requests=8, later=0)
    starts = []
    for index in range(pairs):
        for traced in (False, True):
            name = f"{'traced' if traced else 'untraced'}-{index}"
            run = harness.run_serve(model, out / name, name, traced, requests=requests, later=later, rounds=rounds)
            rates = [r for r in run.seconds["rounds"][1:] if r]
            starts.append({"traced": traced, "to_healthy_s": run.seconds["to_healthy"],
                           "requests_per_s": statistics.median(rates) if rates else None,
                           "exact": run.report.get("produced", {}).get("exact"),
                           "init_engine_s": run.log_facts.get("init_engine_s")})
    def median(traced: bool, key: str) -> float:
        return statistics.median(s[key] for s in starts if s["traced"] is traced)
    return {"starts": starts,
            "requests_per_s_ratio": median(True, "requests_per_s") / median(False, "requests_per_s"),
            "to_healthy_ratio": median(True, "to_healthy_s") / median(False, "to_healthy_s"),
            "init_engine_ratio": median(True, "init_engine_s") / median(False, "init_engine_s")}


def table(result: dict) -> str:
    lines = ["| start | traced | to healthy (s) | vLLM init engine (s) | requests/s | outputs exact |",
             "| --- | --- | --- | --- | --- | --- |"]
    for i, s in enumerate(result["starts"], 1):
        lines.append(f"| {i} | {'yes' if s['traced'] else 'no'} | {s['to_healthy_s']:.1f} | {s['init_engine_s']} "
                     f"| {s['requests_per_s']:.1f} | {s['exact']} |")
    lines.append(f"\ntraced/untraced (medians): requests/s {result['requests_per_s_ratio']:.3f}, "
                 f"to healthy {result['to_healthy_ratio']:.3f}, init engine {result['init_engine_ratio']:.3f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="where the runs' logs go (default: a temporary folder)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="vllm-bench-"))
    result = measure(args.pairs, out)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
