"""load_checkpoint against transformers: same logits for prefill and cached decode, clear errors."""

import io
import json
import shutil
from pathlib import Path

import pytest
import torch

from replayscope.runner.checkpoint import args_from_hf_config, load_checkpoint
from replayscope.contract.errors import ReplayscopeError
from replayscope.runner.progress import Progress

transformers = pytest.importorskip("transformers")

VOCAB = 300
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=128, rms_norm_eps=1e-6)
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 16}

CASES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "llama3_rope": ("LlamaConfig", "LlamaForCausalLM", {"rope_parameters": dict(LLAMA3_ROPE)}),
    "llama_tied": ("LlamaConfig", "LlamaForCausalLM", {"tie_word_embeddings": True}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 4096}),
    "mistral_no_window": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None, "head_dim": 32}),
}


def build_hf_model(case: str):
    config_cls, model_cls, extra = CASES[case]
    config = getattr(transformers, config_cls)(**{**SMALL, **extra})
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(config).float().eval()
    # Move every weight off its default (norms are ones, biases zeros) so a wrong mapping shows.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1 + 0.1 * torch.randn_like(param))
            else:
                param.normal_(0.0, 0.05)
    return model


def save_hf_model(case: str, directory: Path, **save_kwargs) -> "transformers.PreTrainedModel":
    model = build_hf_model(case)
    model.save_pretrained(directory, **save_kwargs)
    return model


def hf_logits(model, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].float()


def tokens_of(n: int, seed: int) -> list[int]:
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def prefill(model, tokens: list[int], slot: int) -> torch.Tensor:
    n = len(tokens)
    with torch.no_grad():
        return model(torch.tensor([tokens]), torch.arange(n)[None], torch.tensor([slot]))[0]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """case -> (directory, HF model), saved once per module."""
    cache = {}

    def get(case: str):
        if case not in cache:
            directory = tmp_path_factory.mktemp(case)
            cache[case] = (directory, save_hf_model(case, directory))
        return cache[case]

    return get


@pytest.fixture
def llama_dir(saved, tmp_path) -> Path:
    """A private copy of a valid llama checkpoint, free to break."""
    directory = tmp_path / "ckpt"
    shutil.copytree(saved("llama")[0], directory)
    return directory


@pytest.mark.parametrize("case", list(CASES))
def test_prefill_then_decode_matches_transformers(saved, case):
    directory, hf = saved(case)
    model = load_checkpoint(directory, "cpu")
    model.setup_caches(num_slots=3, max_seq_len=32)
    prompt, continuation = tokens_of(7, seed=1), tokens_of(4, seed=2)
    expected = hf_logits(hf, prompt + continuation)

    torch.testing.assert_close(prefill(model, prompt, slot=1), expected[:7], atol=1e-4, rtol=1e-4)
    for i, token in enumerate(continuation):
        pos = len(prompt) + i
        with torch.no_grad():
            got = model(torch.tensor([[token]]), torch.tensor([[pos]]), torch.tensor([1]))[0, 0]
        torch.testing.assert_close(got, expected[pos], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("case", ["llama3_rope", "qwen2"])
def test_two_slots_decoded_in_one_batch_match_transformers(saved, case):
    directory, hf = saved(case)
    model = load_checkpoint(directory, "cpu")
    model.setup_caches(num_slots=4, max_seq_len=32)
    prompts = {2: tokens_of(9, seed=3), 0: tokens_of(5, seed=4)}
    continuations = {2: tokens_of(4, seed=5), 0: tokens_of(4, seed=6)}
    for slot, prompt in prompts.items():
        prefill(model, prompt, slot)

    slots = torch.tensor([2, 0])
    for i in range(4):
        tokens = torch.tensor([[continuations[s][i]] for s in (2, 0)])
        positions = torch.tensor([[len(prompts[s]) + i] for s in (2, 0)])
        with torch.no_grad():
            got = model(tokens, positions, slots)[:, 0]
        for row, slot in enumerate((2, 0)):
            expected = hf_logits(hf, prompts[slot] + continuations[slot][: i + 1])[-1]
            torch.testing.assert_close(got[row], expected, atol=1e-4, rtol=1e-4)


def test_sharded_checkpoint_loads(tmp_path):
    hf = save_hf_model("llama", tmp_path, max_shard_size="60KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("*.safetensors"))) > 1
    model = load_checkpoint(tmp_path, "cpu")
    model.setup_caches(num_slots=1, max_seq_len=16)
    prompt = tokens_of(6, seed=7)
    torch.testing.assert_close(prefill(model, prompt, 0), hf_logits(hf, prompt), atol=1e-4, rtol=1e-4)


def test_loading_shows_progress_per_tensor_with_its_shard(tmp_path):
    save_hf_model("llama", tmp_path, max_shard_size="60KB")
    shards = len(list(tmp_path.glob("*.safetensors")))
    stream = io.StringIO()
    with Progress("Loading safetensors weights (llama)", unit="tensors", stream=stream, interval_s=0) as bar:
        load_checkpoint(tmp_path, "cpu", progress=bar)
    lines = stream.getvalue().splitlines()
    tensors = 3 + 9 * SMALL["num_hidden_layers"]      # embed, norm, lm_head; 9 per layer
    assert lines[0].startswith(f"Loading safetensors weights (llama):   0%|          | 0/{tensors} [")
    assert len(lines) == tensors + 1
    assert lines[1].endswith(f", shard 1/{shards}]")
    assert lines[-1].startswith(f"Loading safetensors weights (llama): 100%|##########| {tensors}/{tensors} [")
    assert lines[-1].endswith(f", shard {shards}/{shards}]")


def test_replayscope_run_on_a_checkpoint_shows_its_loading_progress(tmp_path, capsys):
    from replayscope.app.cli import main

    save_hf_model("llama", tmp_path / "tiny-llama")
    code = main(["run", "--backend", "static", "--model-dir", str(tmp_path / "tiny-llama"), "--workload",
                 "decode-only", "--steps", "5", "--max-bs", "4", "--prompt-len", "4,8", "--output-len", "4,8"])
    err = capsys.readouterr().err
    assert code == 0, err
    tensors = 3 + 9 * SMALL["num_hidden_layers"]
    assert f"Loading safetensors weights (tiny-llama): 100%|##########| {tensors}/{tensors} [" in err
    assert ", shard 1/1]" in err and "Running decode-only workload: 100%|##########| 5/5 [" in err


def _to_transformers4_layout(config: dict) -> dict:
    """The same config as transformers 4 wrote it: rope_theta / rope_scaling at top level."""
    old = dict(config)
    rope = dict(old.pop("rope_parameters"))
    old["rope_theta"] = rope.pop("rope_theta")
    old["rope_scaling"] = None if rope.get("rope_type") == "default" else rope
    return old


@pytest.mark.parametrize("case", ["llama", "llama3_rope"])
def test_transformers4_config_layout_gives_same_args(saved, case):
    config = json.loads((saved(case)[0] / "config.json").read_text())
    old = _to_transformers4_layout(config)
    assert "rope_parameters" not in old
    assert args_from_hf_config(old) == args_from_hf_config(config)


def test_transformers4_legacy_type_key_is_accepted(saved):
    config = _to_transformers4_layout(json.loads((saved("llama3_rope")[0] / "config.json").read_text()))
    config["rope_scaling"]["type"] = config["rope_scaling"].pop("rope_type")
    assert args_from_hf_config(config).rope_scaling["rope_type"] == "llama3"


def test_transformers4_layout_checkpoint_matches_transformers(saved, tmp_path):
    source, hf = saved("llama3_rope")
    shutil.copytree(source, tmp_path, dirs_exist_ok=True)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(_to_transformers4_layout(config)))
    model = load_checkpoint(tmp_path, "cpu")
    model.setup_caches(num_slots=1, max_seq_len=16)
    prompt = tokens_of(12, seed=8)
    torch.testing.assert_close(prefill(model, prompt, 0), hf_logits(hf, prompt), atol=1e-4, rtol=1e-4)


def test_config_mapping(saved):
    args = args_from_hf_config(json.loads((saved("qwen2")[0] / "config.json").read_text()))
    assert (args.dim, args.n_layers, args.n_heads, args.n_kv_heads) == (64, 2, 4, 2)
    assert (args.intermediate_size, args.vocab_size, args.head_dim) == (128, VOCAB, 16)
    assert args.qkv_bias and not args.tie_embeddings
    assert args.rope_theta == 1e6 and args.rope_scaling is None
    assert args.norm_eps == 1e-6


def test_explicit_head_dim_is_used(saved):
    args = args_from_hf_config(json.loads((saved("mistral_no_window")[0] / "config.json").read_text()))
    assert args.head_dim == 32


def test_max_seq_len_defaults_to_positions_capped_at_4096():
    base = {"model_type": "llama", **SMALL}
    assert args_from_hf_config({**base, "max_position_embeddings": 128}).max_seq_len == 128
    assert args_from_hf_config({**base, "max_position_embeddings": 131072}).max_seq_len == 4096
    assert args_from_hf_config({**base, "max_position_embeddings": 131072}, max_seq_len=8192).max_seq_len == 8192


def test_load_checkpoint_max_seq_len_override(saved):
    assert load_checkpoint(saved("llama")[0], "cpu", max_seq_len=64).args.max_seq_len == 64


def test_load_checkpoint_dtype(saved):
    model = load_checkpoint(saved("llama")[0], "cpu", dtype=torch.bfloat16)
    assert model.tok_embeddings.weight.dtype == torch.bfloat16


def test_loaded_model_needs_no_grad(saved):
    model = load_checkpoint(saved("llama")[0], "cpu")
    assert not any(p.requires_grad for p in model.parameters())


# --- bad directories: one clear line each ---------------------------------------------------

def test_missing_directory(tmp_path):
    with pytest.raises(ReplayscopeError, match=r"checkpoint directory .*nope does not exist"):
        load_checkpoint(tmp_path / "nope", "cpu")


def test_no_config_json(llama_dir):
    (llama_dir / "config.json").unlink()
    with pytest.raises(ReplayscopeError, match=r"no config.json in"):
        load_checkpoint(llama_dir, "cpu")


def test_unparsable_config_json(llama_dir):
    (llama_dir / "config.json").write_text("{not json")
    with pytest.raises(ReplayscopeError, match=r"config.json is not valid JSON"):
        load_checkpoint(llama_dir, "cpu")


def _edit_config(directory: Path, **changes) -> None:
    config = json.loads((directory / "config.json").read_text())
    config.update(changes)
    (directory / "config.json").write_text(json.dumps(config))


def test_unsupported_model_type(llama_dir):
    _edit_config(llama_dir, model_type="gpt2")
    with pytest.raises(ReplayscopeError, match=r"unsupported model_type 'gpt2' \(supported: llama, qwen2, mistral\)"):
        load_checkpoint(llama_dir, "cpu")


def test_missing_config_key(llama_dir):
    config = json.loads((llama_dir / "config.json").read_text())
    del config["hidden_size"]
    (llama_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ReplayscopeError, match=r"config.json: missing 'hidden_size'"):
        load_checkpoint(llama_dir, "cpu")


def test_unsupported_rope_type(llama_dir):
    _edit_config(llama_dir, rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0})
    with pytest.raises(ReplayscopeError, match=r"rope_type 'yarn' is not supported \(supported: default, llama3\)"):
        load_checkpoint(llama_dir, "cpu")


def test_partial_rotary_factor_is_refused(llama_dir):
    _edit_config(llama_dir, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                             "partial_rotary_factor": 0.5})
    with pytest.raises(ReplayscopeError, match=r"partial_rotary_factor != 1 is not supported"):
        load_checkpoint(llama_dir, "cpu")


def test_config_value_of_the_wrong_type(llama_dir):
    _edit_config(llama_dir, num_hidden_layers="2")
    with pytest.raises(ReplayscopeError, match=r"config.json: 'num_hidden_layers' must be int, got '2'"):
        load_checkpoint(llama_dir, "cpu")


def test_tied_checkpoint_may_carry_a_copy_of_lm_head(saved, tmp_path):
    shutil.copytree(saved("llama_tied")[0], tmp_path, dirs_exist_ok=True)

    def add_copy(tensors):
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()

    _rewrite_weights(tmp_path, add_copy)
    assert load_checkpoint(tmp_path, "cpu").output is None


def test_mistral_sliding_window_shorter_than_max_seq_len_is_refused(saved):
    config = json.loads((saved("mistral")[0] / "config.json").read_text())
    config["sliding_window"] = 16
    with pytest.raises(ReplayscopeError, match=r"sliding_window 16 < max_seq_len 128"):
        args_from_hf_config(config)
    assert args_from_hf_config(config, max_seq_len=16).max_seq_len == 16


def test_no_safetensors_files(llama_dir):
    for file in llama_dir.glob("*.safetensors"):
        file.unlink()
    with pytest.raises(ReplayscopeError, match=r"no \*.safetensors files in"):
        load_checkpoint(llama_dir, "cpu")


def _rewrite_weights(directory: Path, edit) -> None:
    from safetensors.torch import load_file, save_file

    path = directory / "model.safetensors"
    tensors = load_file(path)
    edit(tensors)
    save_file(tensors, path)


def test_missing_tensor(llama_dir):
    _rewrite_weights(llama_dir, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(ReplayscopeError, match=r"missing tensor 'model.layers.1.mlp.up_proj.weight'"):
        load_checkpoint(llama_dir, "cpu")


def test_shape_mismatch(llama_dir):
    def shrink(tensors):
        tensors["model.layers.0.self_attn.k_proj.weight"] = torch.zeros(16, 64)

    _rewrite_weights(llama_dir, shrink)
    with pytest.raises(ReplayscopeError,
                       match=r"shape mismatch 'model.layers.0.self_attn.k_proj.weight': expected \[32, 64\], got \[16, 64\]"):
        load_checkpoint(llama_dir, "cpu")


def test_unexpected_tensors(llama_dir):
    def add(tensors):
        tensors["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(64)

    _rewrite_weights(llama_dir, add)
    with pytest.raises(ReplayscopeError, match=r"unexpected tensors: model.layers.0.self_attn.q_proj.bias$"):
        load_checkpoint(llama_dir, "cpu")


def test_corrupt_safetensors_file(llama_dir):
    (llama_dir / "model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(ReplayscopeError, match=r"cannot read .*model.safetensors"):
        load_checkpoint(llama_dir, "cpu")


def test_shard_listed_in_index_is_missing(tmp_path):
    save_hf_model("llama", tmp_path, max_shard_size="60KB")
    shard = sorted(tmp_path.glob("*.safetensors"))[0]
    shard.unlink()
    with pytest.raises(ReplayscopeError, match=rf"shard '{shard.name}' listed in model.safetensors.index.json is missing"):
        load_checkpoint(tmp_path, "cpu")
