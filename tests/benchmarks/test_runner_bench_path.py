"""The runner benchmark's GPU path, run on the CPU with stand-ins for CUDA, so that a device
call is never spent on a benchmark that breaks before it prints (its figures here mean nothing)."""

import json
from unittest import mock

import torch

from benchmarks import runner_bench
from replayscope.runner import model
from replayscope.runner.model import ModelArgs


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


def test_the_whole_gpu_path_runs_and_prints_every_figure_it_names(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(model.PRESETS, "tiny", ModelArgs(vocab_size=64, dim=32, n_layers=1, n_heads=2, n_kv_heads=1,
                                                         intermediate_size=64))
    real_runner, real_random = runner_bench.GraphRunner, runner_bench.Transformer.random
    monkeypatch.setattr(runner_bench, "GraphRunner",
                        lambda *a, **kw: real_runner(*a, **{**kw, "backend": "static", "device": "cpu"}))
    monkeypatch.setattr(runner_bench.Transformer, "random", staticmethod(
        lambda args, seed, device, dtype: real_random(args, seed=seed, device="cpu", dtype=torch.float32)))
    monkeypatch.setattr(torch, "randint", on_the_cpu(torch.randint))
    monkeypatch.setattr(torch, "randperm", on_the_cpu(torch.randperm))
    monkeypatch.setattr(runner_bench, "host_cost_cpu", lambda sizes: [])
    with mock.patch.multiple(torch.cuda, synchronize=lambda *a: None, Event=StandInEvent,
                             current_stream=lambda *a: None, is_available=lambda: True,
                             get_device_name=lambda *a: "stand-in", empty_cache=lambda: None):
        assert runner_bench.main(["--presets", "tiny", "--sizes", "1,8", "--iters", "4", "--seq-len", "32",
                                  "--breakdown", "--rounds", "2", "--out", str(tmp_path / "out"),
                                  "--json", str(tmp_path / "bench.json")]) == 0
    result = json.loads((tmp_path / "bench.json").read_text())
    assert [(row["preset"], row["bs"]) for row in result["rows"]] == [("tiny", 1), ("tiny", 8)]
    for row in result["rows"]:
        assert {"overhead_ratio", "added_host_untimed_us", "added_host_untimed_iqr_us", "added_host_floor_us",
                "added_host_timed_us", "added_host_cycle_us", "added_host_back_to_back_us"} <= set(row)
        assert {"added_record_after_us", "added_check_before_us", "added_step_us"} <= set(row["breakdown"])
        assert len(row["rounds"]) == 2 and {"overhead_ratio_spread", "added_host_back_to_back_us_spread",
                                            "added_host_untimed_us_spread"} <= set(row)
    assert json.loads((tmp_path / "out" / "runner_bench.json").read_text())["rows"] == result["rows"]
    table = (tmp_path / "out" / "runner_bench.md").read_text()
    assert "| tiny | 1 |" in table and "| tiny | 8 |" in table and "back to back" in table
    printed = capsys.readouterr().out
    assert "instr/bare" in printed and "record" in printed and "speedup" in printed
