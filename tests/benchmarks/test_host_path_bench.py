"""The host-path benchmark runs on the CPU and reports every stage it names, the whole step once per
step core asked for (its figures here mean nothing: no timing is asserted)."""

import json

import pytest

from benchmarks import host_path_bench
from replayscope.runner.runner_core import cores


def test_every_stage_is_measured_for_every_size_and_written_as_json_and_markdown(tmp_path, capsys):
    assert host_path_bench.main(["--sizes", "1,4", "--rounds", "2", "--calls", "50", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "host_path_bench.json").read_text())
    assert result["cores"] == (["python", "compiled"] if "compiled" in cores() else ["python"])
    stages = host_path_bench.stages(tuple(result["cores"]))
    step_keys = {key for key, _label in stages if key.startswith("step")}
    assert len(step_keys) == 4 * len(result["cores"])
    assert list(result["sizes"]) == ["1", "4"]
    for figures in result["sizes"].values():
        assert set(figures) == {key for key, _label in stages}
        assert all(len(f["rounds"]) == 2 and f["spread_us"] >= 0 for f in figures.values())
        assert {k for k, f in figures.items() if "added_us" in f} == step_keys
    table = (tmp_path / "host_path_bench.md").read_text()
    printed = capsys.readouterr().out
    for _key, label in stages:
        assert label in table and label in printed


@pytest.mark.parametrize("core", ["python", "compiled"])
def test_one_core_alone_measures_its_whole_step_alone(tmp_path, core):
    if core not in cores():
        with pytest.raises(SystemExit):
            host_path_bench.main(["--sizes", "2", "--rounds", "1", "--calls", "20", "--core", core])
        return
    assert host_path_bench.main(["--sizes", "2", "--rounds", "1", "--calls", "20", "--core", core,
                                 "--json", str(tmp_path / "figures.json")]) == 0
    result = json.loads((tmp_path / "figures.json").read_text())
    steps = sorted(key for key in result["sizes"]["2"] if key.startswith("step"))
    suffix = host_path_bench.CORE_SUFFIX[core]
    assert result["cores"] == [core]
    assert steps == sorted(key + suffix for key, _label in host_path_bench.STEPS)
