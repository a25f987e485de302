"""examples/hf_decode.py: a transformers model wrapped in the runner library, end to end."""

import importlib.util
from pathlib import Path

import pytest
import torch

from replayscope import open_emitter
from replayscope.contract.events_file import read_events_file

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hf_decode.py"


def load_example():
    spec = importlib.util.spec_from_file_location("hf_decode", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_greedy(model, prompts, new_tokens):
    """transformers' own loop: full recompute each step, no cache, no graphs."""
    tokens = prompts
    with torch.inference_mode():
        for _ in range(new_tokens):
            logits = model(input_ids=tokens).logits[:, -1].float()
            tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
    return tokens[:, prompts.shape[1]:]


def test_example_runs_end_to_end_on_static_and_records_all_modes(tmp_path):
    example = load_example()
    target = tmp_path / "hf.jsonl"
    assert example.main(["--target", str(target), "--backend", "static", "--device", "cpu",
                         "--batches", "1,3,4,12", "--new-tokens", "5"]) == 0
    run, events, _ = read_events_file(target)
    assert run["source"] == "library" and run["name"] == "hf-llama-example"
    steps = [e for e in events if e["kind"] == "step"]
    assert {(e["mode"], e["reason"]) for e in steps} == {
        ("graph", None), ("padded", None), ("eager", "batch_too_large"), ("eager", "prefill")}
    assert sorted(e["graph_bs"] for e in events if e["kind"] == "capture") == [1, 2, 4, 8]
    assert events[-1]["kind"] == "run_end" and events[-1]["status"] == "finished"


@pytest.mark.parametrize("rows", [2, 3, 12])   # graph, padded 3 -> 4, eager above the largest size
def test_example_generates_what_transformers_generates(rows):
    example = load_example()
    model = example.build_model("cpu")
    decoder = example.HFGraphDecoder(model, (1, 2, 4, 8), max_len=64, backend="static", device="cpu")
    decoder.capture()
    prompts = torch.randint(1, 1024, (rows, 10), generator=torch.Generator().manual_seed(rows))
    assert torch.equal(decoder.generate(prompts, 6), reference_greedy(model, prompts, 6))


def test_a_custom_reason_is_recorded_as_the_callers_own(tmp_path):
    example = load_example()
    emitter = open_emitter(str(tmp_path / "e.jsonl"), name="custom", model="m", backend="static")
    decoder = example.HFGraphDecoder(example.build_model("cpu"), (1, 2), max_len=32, backend="static",
                                     device="cpu", emitter=emitter)
    decoder.capture()
    inputs = {"input_ids": torch.tensor([[5], [6]]), "cache_position": torch.tensor([[0], [0]])}
    with torch.inference_mode():
        decoder.runner.step(inputs, reason="adapter 7 is not loaded on this replica")
        decoder.runner.step(inputs, reason="lora_not_captured")
    emitter.close("finished")
    _, events, _ = read_events_file(tmp_path / "e.jsonl")
    reasons = [e["reason"] for e in events if e["kind"] == "step"]
    assert reasons == ["custom:adapter 7 is not loaded on this replica", "lora_not_captured"]


@pytest.mark.gpu
def test_example_on_the_gpu_matches_eager_generation():
    example = load_example()
    model = example.build_model("cuda")
    graphs = example.HFGraphDecoder(model, (1, 2, 4, 8), max_len=64, backend="cuda", device="cuda")
    report = graphs.capture()
    assert sorted(report.captured) == [1, 2, 4, 8], report.failed
    eager = example.HFGraphDecoder(model, (1, 2, 4, 8), max_len=64, backend="disabled", device="cuda")
    for rows in (4, 3, 8):
        prompts = torch.randint(1, 1024, (rows, 10), generator=torch.Generator().manual_seed(rows)).cuda()
        replayed, reference = graphs.generate(prompts, 8), eager.generate(prompts, 8)
        agreement = (replayed == reference).float().mean().item()
        # Same kernels replayed for exact sizes; a padded batch runs the larger size's kernels (bf16).
        assert agreement == 1.0 if rows in (4, 8) else agreement >= 0.9, (rows, agreement)
