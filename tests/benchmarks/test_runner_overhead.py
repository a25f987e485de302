"""The runner's per-step reading (benchmarks/runner_overhead.py) runs on the CPU: each side's
steps read and put with the right kind, the runner's routes left with their fit checks. Figures
are not judged here (benchmarks/, never timed tests)."""

import math

from benchmarks import runner_overhead
from benchmarks.harness import NullSink
from benchmarks.runner_bench import RUN, cpu_batch, decode_inputs
from replayscope.runner import runner_core
from replayscope.runner.emitter import Emitter
from replayscope.runner.graphs import GraphRunner
from replayscope.runner.plan import CapturePlan


def test_every_side_is_read_per_step_and_the_runner_is_left_with_its_fit_checks():
    rows = runner_overhead.cpu_rows([1, 4], blocks=6, block_steps=20)
    assert [(r["bs"], r["side"]) for r in rows] == [(bs, side) for bs in (1, 4) for side in runner_overhead.SIDES]
    for row in rows:
        assert row["steps"] == 2 * 19, "two blocks per side, every call after a block's first"
        if row["side"] == "floor":                       # the bare loop against itself: no runner steps timed
            assert row["timed_steps"] == 0 and row["added_cycle_us"] == row["added_untimed_us"]
        else:                                            # on the CPU every step is timed, on the host
            assert row["timed_steps"] == row["steps"] and row["added_cycle_us"] == row["added_timed_us"]
            assert math.isnan(row["added_untimed_us"])
        assert row["bare_us"] > 0 and not math.isnan(row["added_after_sync_us"])


def test_the_full_match_side_takes_the_fit_checks_away_and_gives_them_back():
    runner = GraphRunner(lambda tokens, positions, slots: tokens, decode_inputs(4), CapturePlan((4,)),
                         backend="static", device="cpu", emitter=Emitter(NullSink(), RUN), progress=False)
    runner.capture()
    inputs = cpu_batch(4)
    for _ in range(3):
        runner.step(inputs)
    route = runner._routes.plain[(runner.stage, 4)]
    runner_overhead.use_fit_checks(runner, False)
    assert route.fit_check is None
    runner.step(inputs)
    assert route.fit_check is None, "without a maker no check is made"
    runner_overhead.use_fit_checks(runner, True)
    runner.step(inputs)
    assert (route.fit_check is not None) == (runner_core.COMPILED is not None and
                                             runner_overhead.fit_check_maker() is not None)


def test_the_paired_reading_averages_the_two_orders_medians_and_gives_the_differences_spread():
    differences = {True: [1000, 2000, 3000], False: [-1000, 0, 1000, 9000]}     # ns: runner first, bare first
    middle, spread = runner_overhead.paired(differences)
    assert middle == (2000 + 500) / 2 / 1000
    values = sorted(differences[True] + differences[False])
    quartiles = runner_overhead.statistics.quantiles(values, n=4)
    assert spread == (quartiles[2] - quartiles[0]) / 2000
    assert all(math.isnan(v) for v in runner_overhead.paired({True: [1], False: []}))


def test_the_paired_reading_is_of_every_side_untimed_steps_and_of_the_timed_ones_on_the_cpu():
    rows = runner_overhead.cpu_rows([2], blocks=6, block_steps=10)
    for row in rows:
        assert not math.isnan(row["added_untimed_paired_us"]) and row["paired_spread_us"] >= 0
    table = runner_overhead.table(rows)
    assert "paired (± spread) µs" in table and table.count("\n") == 1 + len(rows)


def test_with_eviction_each_block_writes_the_memory_once_after_its_synchronise_before_its_first_call(monkeypatch):
    order = []
    written = runner_overhead.evictor(1)
    assert runner_overhead.evictor(0) is None and written is not None

    def sync():
        order.append("sync")

    def evict():
        order.append("evict")
        written()
    runner = GraphRunner(lambda tokens, positions, slots: tokens, decode_inputs(4), CapturePlan((4,)),
                         backend="static", device="cpu", emitter=Emitter(NullSink(), RUN), progress=False)
    runner.capture()
    inputs = cpu_batch(4)
    sides = runner_overhead.measure(runner, lambda: order.append("call"), inputs, runner.stage, blocks=3,
                                    block_steps=2, sync=sync, evict=evict)
    assert set(sides) == set(runner_overhead.SIDES)
    blocks = "".join("s" if o == "sync" else "e" if o == "evict" else "" for o in order)
    assert blocks == "ses" * 3, "each block: a synchronise, the memory written, its calls, a synchronise"
