"""The real-engine harness and ``benchmarks.vllm_bench`` on a stand-in ``vllm serve``
(tests/engines/fake_vllm): servers started side by side, timed to healthy, rounds alternated,
metrics read, Ctrl-C'd, ratios paired — so a device run is spent on the engine, not on the
harness. The engine's own behaviour is what tests/engines/test_vllm_gpu.py checks on a GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks import vllm_bench
from benchmarks import vllm_harness as harness

FAKE = Path(__file__).parent / "fake_vllm"


def test_the_benchmark_pairs_side_by_side_starts_and_alternates_rounds(tmp_path, monkeypatch):
    monkeypatch.setitem(harness.ENV, "PYTHONPATH", f"{FAKE}:{harness.ENV['PYTHONPATH']}")
    monkeypatch.setattr(harness, "make_model", lambda path: path)
    kept = []
    result = vllm_bench.measure(1, tmp_path, rounds=3, requests=4, later=2, after_pair=kept.append)
    assert kept == [result]                                          # the command writes it after each pair

    starts = result["starts"]
    assert [s["traced"] for s in starts] == [False, True]
    assert all(s["returncode"] is not None and s["exact"] and s["to_healthy_s"] >= 1.0 for s in starts)
    assert all(len(s["rounds"]) == 2 for s in starts)                # the first round is warm-up
    assert all(s["init_engine_s"] == 1.5 for s in starts)              # read from each server's own log
    assert all(s["engine_steps"] == 3 * sum(harness_lengths(6)) for s in starts)   # /metrics after 3 rounds
    assert len(result["requests_per_s_ratios"]) == 1 and result["requests_per_s_ratio"] > 0
    assert "median of the pairs' ratios" in vllm_bench.table(result)


def harness_lengths(n: int) -> list[int]:
    from benchmarks.vllm_programs.client import output_lengths
    return output_lengths(n)


def test_a_server_that_died_during_start_up_is_reported_not_hidden_by_its_stop(tmp_path):
    """A server gone before Ctrl-C: the harness says it did not become healthy, and stopping it
    returns its exit status instead of failing on the process group that no longer exists."""
    server = harness.Server(tmp_path, tmp_path, "dies", False)
    server.command = [sys.executable, "-c", "import sys; sys.exit(3)"]
    server.start()
    with pytest.raises(RuntimeError, match="did not become healthy"):
        server.wait_healthy(ready_timeout=30)
    assert server.stop().returncode == 3


def test_side_by_side_each_servers_time_to_healthy_is_its_own_not_the_slower_ones():
    """The second server polled becomes healthy first: its time is taken when it does, not once
    the first one polled is healthy too (a short-circuited poll gave both the slower time)."""
    clock = [0]                       # one tick per round of polls (the first server counts them)

    class StandIn:
        def __init__(self, ready_at: int, ticks: bool = False):
            self.ready_at, self.ticks, self.healthy_at = ready_at, ticks, None

        def check_healthy(self) -> bool:
            clock[0] += self.ticks
            if self.healthy_at is None and clock[0] >= self.ready_at:
                self.healthy_at = clock[0]
            return self.healthy_at is not None
    slow, fast = StandIn(ready_at=6, ticks=True), StandIn(ready_at=2)
    vllm_bench.wait_until_all_healthy([slow, fast])
    assert (slow.healthy_at, fast.healthy_at) == (6, 2)


def test_rounds_are_paired_round_by_round_within_each_pair():
    """Round r of a pair's traced server against round r of its untraced one: a drift between rounds
    that both servers see (here round 2 twice as fast) cancels out; pairs never mix."""
    starts = [{"pair": 0, "traced": False, "rounds": [10.0, 20.0]}, {"pair": 0, "traced": True, "rounds": [9.0, 19.0]},
              {"pair": 1, "traced": True, "rounds": [30.0]}, {"pair": 1, "traced": False, "rounds": [40.0]},
              {"pair": 2, "traced": False, "rounds": [50.0]}]              # its traced server never served
    assert vllm_bench.round_ratios(starts) == [0.9, 0.95, 0.75]


def test_the_round_by_round_interval_is_a_geometric_mean_with_its_bootstrap_interval():
    ratios = [0.98, 1.0, 1.02, 0.99, 1.01]
    interval = vllm_bench.geometric_mean_interval(ratios)
    assert interval["n"] == 5 and interval["geometric_mean"] == pytest.approx(0.99996, abs=1e-4)
    assert 0.98 <= interval["low"] < interval["geometric_mean"] < interval["high"] <= 1.02
    assert vllm_bench.geometric_mean_interval(ratios) == interval       # the same data, the same interval
    assert vllm_bench.geometric_mean_interval([1.0]) is None             # one round says nothing of spread
    table = vllm_bench.table({"starts": [], "round_ratios": ratios, "round_ratio_median": 1.0,
                              "round_ratio_interval": interval})
    assert "5 paired rounds): median 1.000, geometric mean 1.000 (95 % interval" in table
