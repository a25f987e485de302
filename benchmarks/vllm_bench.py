"""The cost of ``replayscope trace`` to a real ``vllm serve`` (GPU, vLLM importable).

Each pair starts the same server twice at the same moment on the same GPU, one untraced and one
under ``replayscope trace`` (which one is launched first alternates between pairs), and times each
from its command to a healthy ``/health``; then rounds of the same requests of exact lengths go to
one server at a time, alternating (the first round of each server is its warm-up and left out),
and each server's requests per second is the median of its rounds; the rounds of a pair are also
compared one by one (round r of the traced server against round r of the untraced one, run next
to each other), which takes out what drifts between rounds. Side by side, both starts see
the same machine (its page cache, its other load, vLLM's warm compile and kernel caches), which is
what makes a few pairs enough; the servers never serve at the same time. A first untraced start
alone warms vLLM's caches so that no measured start pays them.

    python -m benchmarks.vllm_bench [--pairs 5] [--rounds 7] [--requests 48] [--later 16] [--json OUT.json] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from benchmarks import vllm_harness as harness


def start_side_by_side(model: Path, out: Path, index: int) -> dict[bool, harness.Server]:
    servers = {traced: harness.Server(model, out / f"{'traced' if traced else 'untraced'}-{index}",
                                      f"{'traced' if traced else 'untraced'}-{index}", traced)
               for traced in (False, True)}
    for traced in ((False, True) if index % 2 == 0 else (True, False)):
        servers[traced].start()
    wait_until_all_healthy(servers.values())
    return servers


def wait_until_all_healthy(servers) -> None:
    """Poll every server each time round (never only up to the first one still starting), so each
    one's time to healthy is its own, not the slower one's."""
    while not all([server.check_healthy() for server in servers]):
        time.sleep(0.05)


def measure_pair(model: Path, out: Path, index: int, rounds: int, requests: int, later: int) -> list[dict]:
    servers = start_side_by_side(model, out, index)
    try:
        for r in range(rounds):
            order = (False, True) if (index + r) % 2 == 0 else (True, False)
            for traced in order:
                servers[traced].round(requests, later)
    finally:
        runs = {traced: server.stop() for traced, server in servers.items()}
    starts = []
    for traced, run in runs.items():
        rates = [rate for rate in run.seconds.get("rounds", [])[1:] if rate]
        starts.append({"pair": index, "traced": traced, "to_healthy_s": run.seconds["to_healthy"],
                       "requests_per_s": statistics.median(rates) if rates else None, "rounds": rates,
                       "exact": run.report.get("produced", {}).get("exact"),
                       "engine_steps": run.report.get("engine", {}).get("iteration_steps"),
                       "init_engine_s": run.log_facts.get("init_engine_s"), "returncode": run.returncode})
    return starts


def ratios(starts: list[dict], key: str) -> list[float]:
    """traced / untraced of ``key``, one per pair."""
    pairs: dict[int, dict[bool, dict]] = {}
    for start in starts:
        pairs.setdefault(start["pair"], {})[start["traced"]] = start
    return [p[True][key] / p[False][key] for p in pairs.values()
            if len(p) == 2 and p[True][key] and p[False][key]]


def round_ratios(starts: list[dict]) -> list[float]:
    """traced / untraced requests per second round by round: round r of a pair's traced server
    against round r of its untraced one (the two ran one after the other), over every pair."""
    pairs: dict[int, dict[bool, list[float]]] = {}
    for start in starts:
        pairs.setdefault(start["pair"], {})[start["traced"]] = start["rounds"]
    return [traced / untraced for p in pairs.values() if len(p) == 2
            for traced, untraced in zip(p[True], p[False]) if traced and untraced]


def geometric_mean_interval(ratios: list[float], resamples: int = 4000, seed: int = 0) -> dict | None:
    """The geometric mean of ``ratios`` with a 95 % bootstrap interval (percentiles of the
    resampled means of the logs; a fixed seed, so the same data always give the same interval)."""
    if len(ratios) < 2:
        return None
    logs = [math.log(r) for r in ratios]
    draw = random.Random(seed)
    means = sorted(statistics.fmean(draw.choices(logs, k=len(logs))) for _ in range(resamples))
    return {"geometric_mean": math.exp(statistics.fmean(logs)), "low": math.exp(means[int(0.025 * resamples)]),
            "high": math.exp(means[int(0.975 * resamples) - 1]), "n": len(ratios)}


def measure(pairs: int, out: Path, rounds: int = 7, requests: int = 48, later: int = 16,
            after_pair: Callable[[dict], None] | None = None) -> dict:
    """Every pair's starts and rounds, and their ratios; ``after_pair`` gets the result so far after
    each pair (the command writes it, so a run cut short keeps the pairs it finished)."""
    model = harness.make_model(out / "model")
    harness.run_serve(model, out / "warm", "warm", False, requests=8, later=0)
    starts: list[dict] = []
    for index in range(pairs):
        starts += measure_pair(model, out, index, rounds, requests, later)
        if after_pair is not None:
            after_pair(summarised(starts))
    return summarised(starts)


def summarised(starts: list[dict]) -> dict:
    result: dict = {"starts": starts}
    for key, name in (("requests_per_s", "requests_per_s_ratio"), ("to_healthy_s", "to_healthy_ratio"),
                      ("init_engine_s", "init_engine_ratio")):
        each = ratios(starts, key)
        result[name] = statistics.median(each) if each else None
        result[name + "s"] = each
    each_round = round_ratios(starts)
    result["round_ratios"] = each_round
    result["round_ratio_median"] = statistics.median(each_round) if each_round else None
    result["round_ratio_interval"] = geometric_mean_interval(each_round)
    return result


def table(result: dict) -> str:
    lines = ["| pair | traced | to healthy (s) | vLLM init engine (s) | requests/s (median of rounds) | rounds | "
             "outputs exact |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for s in result["starts"]:
        rps = f"{s['requests_per_s']:.1f}" if s["requests_per_s"] else "—"
        lines.append(f"| {s['pair'] + 1} | {'yes' if s['traced'] else 'no'} | {s['to_healthy_s']:.1f} | "
                     f"{s['init_engine_s']} | {rps} | {len(s['rounds'])} | {s['exact']} |")

    def shown(name: str) -> str:
        each = result.get(name + "s") or []
        median = result.get(name)
        spread = f" (pairs {min(each):.3f}–{max(each):.3f})" if each else ""
        return (f"{median:.3f}" if median is not None else "—") + spread
    lines.append(f"\ntraced/untraced, median of the pairs' ratios: requests/s {shown('requests_per_s_ratio')}, "
                 f"to healthy {shown('to_healthy_ratio')}, init engine {shown('init_engine_ratio')}")
    each_round, interval = result.get("round_ratios") or [], result.get("round_ratio_interval")
    if each_round:
        line = f"requests/s round by round ({len(each_round)} paired rounds): median {result['round_ratio_median']:.3f}"
        if interval:
            line += (f", geometric mean {interval['geometric_mean']:.3f} (95 % interval "
                     f"{interval['low']:.3f}–{interval['high']:.3f})")
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=7, help="rounds of requests per server (the first is warm-up)")
    parser.add_argument("--requests", type=int, default=48, help="requests sent at once in a round")
    parser.add_argument("--later", type=int, default=16, help="requests sent while those run")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="where the runs' logs go (default: a temporary folder)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="vllm-bench-"))
    def keep(result: dict) -> None:
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
    result = measure(args.pairs, out, rounds=args.rounds, requests=args.requests, later=args.later, after_pair=keep)
    print(table(result))


if __name__ == "__main__":
    main()
