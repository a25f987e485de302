"""The cold reading of the runner step's parts (benchmarks/cold_stages.py) runs on the CPU: every
part read cold and warm, the caches filled before each cold call and nowhere else, the order
rotating. Figures are not judged here (benchmarks/, never timed tests)."""

from benchmarks import cold_stages

PARTS = ["empty call", "inputs read", "batch size", "route lookup", "fit check", "full match", "event",
         "bare step", "runner step"]


def test_every_part_is_read_cold_and_warm_against_the_empty_call():
    rows = cold_stages.cpu_rows([2, 4], rounds=4, evict_mib=1)
    assert [(r["bs"], r["part"]) for r in rows] == [(bs, part) for bs in (2, 4) for part in PARTS]
    for row in rows:
        assert row["cold_us"] > 0 and row["warm_us"] > 0
        assert row["cold_less_call_us"] == row["cold_us"] - next(
            r["cold_us"] for r in rows if r["bs"] == row["bs"] and r["part"] == "empty call")
    assert "| static | 2 | fit check |" in cold_stages.table(rows)


def test_the_caches_are_filled_after_each_synchronise_and_before_each_cold_call_only():
    log = []

    def part(name):
        return lambda: log.append(name)
    named = {"a": part("a"), "b": part("b"), "empty call": part("e")}
    figures = cold_stages.read(named, rounds=3, sync=lambda: log.append("sync"), evict=lambda: log.append("evict"),
                               clear=lambda: log.append("clear"))
    assert set(figures) == set(named) and all(f["cold_us"] >= 0 for f in figures.values())
    once = ["sync", "evict", "x", "x", "x", "x", "sync", "clear"]
    assert len(log) == 3 * 3 * len(once)
    firsts = [log[i + 2] for i in range(0, len(log), len(once))]
    assert firsts == ["a", "b", "e", "b", "e", "a", "e", "a", "b"], "which part goes first rotates round by round"
    for i in range(0, len(log), len(once)):
        assert [entry if entry in ("sync", "evict", "clear") else "x" for entry in log[i:i + len(once)]] == once


def test_bad_arguments_are_refused_before_anything_runs(capsys):
    import pytest
    for argv in (["--rounds", "0"], ["--sizes", "8,x"], ["--evict-mib", "-1"]):
        with pytest.raises(SystemExit) as stopped:
            cold_stages.main(argv)
        assert stopped.value.code == 2
