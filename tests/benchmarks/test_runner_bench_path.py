"""The runner benchmark's GPU path, run on the CPU with stand-ins for CUDA, so that a device
call is never spent on a benchmark that breaks before it prints (its figures here mean nothing);
and its CPU path, a row per size and step core."""

import json
from unittest import mock

import pytest
import torch

from benchmarks import runner_bench
from replayscope.runner import model
from replayscope.runner.model import ModelArgs
from replayscope.runner.runner_core import cores

BOTH = ["python", "compiled"] if "compiled" in cores() else ["python"]      # --core both: each core built here


class StandInEvent:
    def __init__(self, **_kwargs):
        pass

    def record(self, stream=None):
        pass


def on_the_cpu(fn):
    def call(*args, **kwargs):
        kwargs.pop("device", None)
        return fn(*args, **kwargs)
    return call


@pytest.mark.parametrize("core", ["both", "python"])
def test_the_whole_gpu_path_runs_and_prints_every_figure_it_names(tmp_path, capsys, monkeypatch, core):
    monkeypatch.setitem(model.PRESETS, "tiny", ModelArgs(vocab_size=64, dim=32, n_layers=1, n_heads=2, n_kv_heads=1,
                                                         intermediate_size=64))
    real_runner, real_random = runner_bench.GraphRunner, runner_bench.Transformer.random
    monkeypatch.setattr(runner_bench, "GraphRunner",
                        lambda *a, **kw: real_runner(*a, **{**kw, "backend": "static", "device": "cpu"}))
    monkeypatch.setattr(runner_bench.Transformer, "random", staticmethod(
        lambda args, seed, device, dtype: real_random(args, seed=seed, device="cpu", dtype=torch.float32)))
    monkeypatch.setattr(torch, "randint", on_the_cpu(torch.randint))
    monkeypatch.setattr(torch, "randperm", on_the_cpu(torch.randperm))
    monkeypatch.setattr(runner_bench, "host_cost_cpu", lambda sizes, step_cores: [])
    with mock.patch.multiple(torch.cuda, synchronize=lambda *a: None, Event=StandInEvent,
                             current_stream=lambda *a: None, is_available=lambda: True,
                             get_device_name=lambda *a: "stand-in", empty_cache=lambda: None):
        assert runner_bench.main(["--presets", "tiny", "--sizes", "1,8", "--iters", "4", "--seq-len", "32",
                                  "--breakdown", "--rounds", "2", "--out", str(tmp_path / "out"),
                                  "--json", str(tmp_path / "bench.json"), "--core", core]) == 0
    result = json.loads((tmp_path / "bench.json").read_text())
    step_cores = BOTH if core == "both" else [core]
    assert result["cores"] == step_cores
    assert [(row["preset"], row["bs"], row["core"]) for row in result["rows"]] == [
        ("tiny", bs, c) for bs in (1, 8) for c in step_cores]
    assert [s["core"] for s in result["summaries"]] == step_cores[:1]
    for row in result["rows"]:
        assert {"overhead_ratio", "added_host_untimed_us", "added_host_untimed_iqr_us", "added_host_floor_us",
                "added_host_timed_us", "added_host_cycle_us", "added_host_back_to_back_us"} <= set(row)
        assert {"added_record_after_us", "added_check_before_us", "added_step_us"} <= set(row["breakdown"])
        assert len(row["rounds"]) == 2 and {"overhead_ratio_spread", "added_host_back_to_back_us_spread",
                                            "added_host_untimed_us_spread"} <= set(row)
    assert json.loads((tmp_path / "out" / "runner_bench.json").read_text())["rows"] == result["rows"]
    table = (tmp_path / "out" / "runner_bench.md").read_text()
    for c in step_cores:
        assert f"| tiny | 1 | {c} |" in table and f"| tiny | 8 | {c} |" in table
    assert "back to back" in table and "step core" in table
    printed = capsys.readouterr().out
    assert "instr/bare" in printed and "record" in printed and "speedup" in printed


def test_the_cpu_path_gives_a_row_per_size_and_step_core_against_one_bare_loop():
    rows = runner_bench.host_cost_cpu([1, 4], tuple(BOTH), calls=20, repeats=2)
    assert [(r["bs"], r["core"]) for r in rows] == [(bs, c) for bs in (1, 4) for c in BOTH]
    for bs in (1, 4):
        bare = {r["bare_host_us"] for r in rows if r["bs"] == bs}
        assert len(bare) == 1, "each size's cores are measured against the same bare loop"
    for r in rows:
        assert r["added_host_us"] == pytest.approx(r["instrumented_host_us"] - r["bare_host_us"])
    markdown = runner_bench.rounds_markdown({"torch": "t", "emitter": {"emitter_step_us": 0.1, "list_append_us": 0.01},
                                             "host_cpu": rows})
    assert all(f"| {bs} | {c} |" in markdown for bs in (1, 4) for c in BOTH)


def test_a_core_this_process_does_not_have_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setattr("replayscope.runner.runner_core.COMPILED", None)
    with pytest.raises(SystemExit):
        runner_bench.main(["--core", "compiled", "--sizes", "1"])
    assert "--core compiled: the compiled runner core is not loaded here" in capsys.readouterr().err
