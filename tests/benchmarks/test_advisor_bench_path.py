"""The advisor benchmark's path: on the CPU with the static stand-in for CUDA (its figures mean
nothing, it only must not break between GPU runs), and on a GPU for real."""

import json
from unittest import mock

import pytest
import torch

from benchmarks import advisor_bench
from replayscope.runner import model
from replayscope.runner.model import ModelArgs

TINY = ModelArgs(vocab_size=64, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, intermediate_size=64)


def check(result: dict, budgets: list[int]) -> None:
    assert [b["k"] for b in result["budgets"]] == budgets
    rec = result["recorded"]
    assert rec["held_back_steps"] > 0 and rec["run_list"] == [1, 2, 4, 8, 16, 24, 32]
    for b in result["budgets"]:
        names = [r["name"] for r in b["lists"]]
        assert names == ["default", "advisor", "run"]
        default, advisor, run = b["lists"]
        assert default["sizes"] == advisor_bench.default_cut(b["k"]) and len(advisor["sizes"]) <= b["k"]
        assert run["sizes"] == rec["run_list"]
        for r in b["lists"]:
            assert r["mean_ms"] > 0 and r["p99_ms"] >= r["median_ms"] > 0
            assert 0 <= r["eager_share"] <= 1 and 0 <= r["padding_waste"] < 1 and r["capture_s"] >= 0
        assert set(b["advisor_vs_default"]) == {"mean_ratio", "median_pair_ratio", "not_slower"}


def test_the_benchmark_runs_on_the_cpu_stand_in_and_prints_its_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(model.PRESETS, "tiny", TINY)
    monkeypatch.setattr(advisor_bench, "BACKEND", "static")
    monkeypatch.setattr(advisor_bench, "DEVICE", "cpu")
    with mock.patch.object(torch.cuda, "synchronize", lambda *a: None):
        assert advisor_bench.main(["--preset", "tiny", "--steps", "240", "--budgets", "2,4",
                                   "--json", str(tmp_path / "advisor.json")]) == 0
    result = json.loads((tmp_path / "advisor.json").read_text())
    check(result, [2, 4])
    printed = capsys.readouterr().out
    assert "advisor / default mean step time" in printed and "held-back steps" in printed
    for b in result["budgets"]:
        assert all(r["pool_bytes"] is None for r in b["lists"])       # the stand-in has no graph pool


@pytest.mark.gpu
def test_the_benchmark_replays_the_held_back_steps_on_cuda_graphs(tmp_path, monkeypatch):
    monkeypatch.setitem(model.PRESETS, "tiny", TINY)
    assert advisor_bench.main(["--preset", "tiny", "--steps", "400", "--budgets", "4,8",
                               "--json", str(tmp_path / "advisor.json")]) == 0
    result = json.loads((tmp_path / "advisor.json").read_text())
    check(result, [4, 8])
    assert result["recorded"]["objective"]["kind"] == "time"             # the run's own measured step times
    for b in result["budgets"]:
        assert all(r["pool_bytes"] and r["capture_s"] > 0 and r["predicted_ms"] > 0 for r in b["lists"])


def check_tokens(result: dict, budgets: list[int], max_tokens: int, max_seqs: int) -> None:
    """A vLLM-shaped record: token batches, mixed steps among them, vLLM's default list and rules."""
    from replayscope.collector.analysis.advisor.engines import vllm_default_sizes

    rec = result["recorded"]
    assert result["shape"] == "tokens" and result["engine"] == "vllm"
    assert rec["run_list"] == [s for s in vllm_default_sizes(min(2 * max_seqs, 512)) if s <= max_tokens]
    assert rec["stages"]["mixed"] > 0 and rec["stages"]["decode"] > 0 and rec["held_back_steps"] > 0
    assert [b["k"] for b in result["budgets"]] == budgets
    for b in result["budgets"]:
        default, advisor, run = b["lists"]
        assert len(advisor["sizes"]) <= b["k"] and all(s <= max_tokens for s in advisor["sizes"])
        for r in b["lists"]:
            assert r["mean_ms"] > 0 and 0 <= r["eager_share"] <= 1


def test_the_benchmark_records_vllm_shaped_token_batches_on_the_cpu_stand_in(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(model.PRESETS, "tiny", TINY)
    monkeypatch.setattr(advisor_bench, "BACKEND", "static")
    monkeypatch.setattr(advisor_bench, "DEVICE", "cpu")
    with mock.patch.object(torch.cuda, "synchronize", lambda *a: None):
        assert advisor_bench.main(["--preset", "tiny", "--shape", "tokens", "--steps", "200", "--budgets", "2,4",
                                   "--max-num-batched-tokens", "64", "--max-num-seqs", "16",
                                   "--json", str(tmp_path / "advisor.json")]) == 0
    result = json.loads((tmp_path / "advisor.json").read_text())
    check_tokens(result, [2, 4], 64, 16)
    printed = capsys.readouterr().out
    assert "vLLM-shaped token batches (max_num_batched_tokens 64, max_num_seqs 16;" in printed


def test_the_token_batches_mix_prefill_chunks_and_decode_tokens_within_the_limits():
    from benchmarks.token_batches import token_steps

    steps = token_steps(1500, seed=3, max_num_batched_tokens=256, max_num_seqs=32)
    assert len(steps) > 1000 and all(1 <= s.tokens <= 256 for s in steps)
    assert all(s.tokens <= 32 for s in steps if s.stage == "decode")          # a token per running request
    assert {s.stage for s in steps} == {"decode", "mixed"}
    assert any(s.tokens == 256 for s in steps if s.stage == "mixed")          # chunks fill the step
    assert token_steps(1500, seed=3, max_num_batched_tokens=256, max_num_seqs=32) == steps   # seeded


@pytest.mark.gpu
def test_the_benchmark_replays_vllm_shaped_token_batches_on_cuda_graphs(tmp_path, monkeypatch):
    monkeypatch.setitem(model.PRESETS, "tiny", TINY)
    assert advisor_bench.main(["--preset", "tiny", "--shape", "tokens", "--steps", "400", "--budgets", "4,8",
                               "--json", str(tmp_path / "advisor.json")]) == 0
    result = json.loads((tmp_path / "advisor.json").read_text())
    check_tokens(result, [4, 8], 512, 64)
    assert result["recorded"]["objective"]["kind"] == "time"             # the run's own measured step times


GPU_HOST_LACKS = ("sqlalchemy", "fastapi", "dash", "plotly", "orjson", "uvicorn", "alembic")
WITHOUT = f"""
import sys

class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {GPU_HOST_LACKS!r}:
            print("TRIED", name, file=sys.stderr, flush=True)
            raise ModuleNotFoundError(name, name=name)
        return None

sys.meta_path.insert(0, Missing())
import benchmarks.advisor_bench
benchmarks.advisor_bench.main(["--help"])
"""


def test_the_benchmark_imports_nothing_the_gpu_host_lacks():
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run([sys.executable, "-c", WITHOUT], cwd=Path(__file__).resolve().parents[2],
                          capture_output=True, text=True, timeout=120)
    assert "TRIED" not in done.stderr and "usage:" in done.stdout, done.stderr
