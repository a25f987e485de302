"""The host-path benchmark runs on the CPU and reports every stage it names (its figures here mean
nothing: no timing is asserted)."""

import json

from benchmarks import host_path_bench


def test_every_stage_is_measured_for_every_size_and_written_as_json_and_markdown(tmp_path, capsys):
    assert host_path_bench.main(["--sizes", "1,4", "--rounds", "2", "--calls", "50", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "host_path_bench.json").read_text())
    stages = [key for key, _label in host_path_bench.STAGES]
    assert list(result["sizes"]) == ["1", "4"]
    for figures in result["sizes"].values():
        assert set(figures) == set(stages)
        assert all(len(f["rounds"]) == 2 and f["spread_us"] >= 0 for f in figures.values())
        assert {k for k, f in figures.items() if "added_us" in f} == {
            "step_no_emitter", "step_untimed", "step", "step_gc_off"}
    table = (tmp_path / "host_path_bench.md").read_text()
    printed = capsys.readouterr().out
    for _key, label in host_path_bench.STAGES:
        assert label in table and label in printed
