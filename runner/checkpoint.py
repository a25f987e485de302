"""Load a Hugging Face-format directory (config.json + *.safetensors) into ``replayscope.runner.model.Transformer``.

Supported: model_type llama, qwen2 and mistral, config.json from transformers 4 (rope_theta /
rope_scaling at top level) or 5 (``rope_parameters``), single-file or sharded safetensors.
Everything is checked (config, tensor names, shapes) before any weight is read, so a bad
directory raises ``ReplayscopeError`` with one line and nothing is half-loaded. The model uses
HF's rotate_half RoPE, so q/k weights are copied as they are; q/k/v go into the fused ``wqkv``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from replayscope.contract.errors import ReplayscopeError
from replayscope.runner.model import ModelArgs, Transformer, default_dtype

MODEL_TYPES = ("llama", "qwen2", "mistral")
DEFAULT_MAX_SEQ_LEN = 4096
INDEX_FILE = "model.safetensors.index.json"


def _config_value(config: dict[str, Any], key: str, kind: type = int, default: Any = ...) -> Any:
    value = config.get(key)
    if value is None:
        if default is ...:
            raise ReplayscopeError(f"config.json: missing {key!r}")
        return default
    if kind is float and type(value) is int:
        value = float(value)
    if type(value) is not kind:  # exact: a JSON true must not pass for an int
        raise ReplayscopeError(f"config.json: {key!r} must be {kind.__name__}, got {value!r}")
    return value


def _rope_from_config(config: dict[str, Any], max_positions: int) -> tuple[float, dict | None]:
    """(rope_theta, rope_scaling) from either layout; rope_scaling None for plain RoPE."""
    params = config.get("rope_parameters")  # transformers 5
    if params is None:  # transformers 4: rope_theta (and partial_rotary_factor) beside rope_scaling
        params = config.get("rope_scaling") or {}
        if isinstance(params, dict):
            params = {**params, **{k: config[k] for k in ("rope_theta", "partial_rotary_factor")
                                   if config.get(k) is not None}}
    if not isinstance(params, dict):
        raise ReplayscopeError(f"config.json: rope parameters must be an object, got {params!r}")
    if params.get("partial_rotary_factor") not in (None, 1, 1.0):
        raise ReplayscopeError("config.json: partial_rotary_factor != 1 is not supported")
    theta = float(params.get("rope_theta") or 10000.0)
    rope_type = params.get("rope_type", params.get("type")) or "default"
    if rope_type == "default":
        return theta, None
    scaling = {k: v for k, v in params.items() if k not in ("rope_theta", "type", "partial_rotary_factor")}
    scaling["rope_type"] = rope_type
    if rope_type == "llama3" and scaling.get("original_max_position_embeddings") is None:
        scaling["original_max_position_embeddings"] = max_positions  # HF's fallback too
    return theta, scaling


def args_from_hf_config(config: dict[str, Any], max_seq_len: int | None = None) -> ModelArgs:
    """ModelArgs for a Hugging Face config.json (already parsed); ``max_seq_len`` overrides the default."""
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ReplayscopeError(f"config.json: unsupported model_type {model_type!r} "
                               f"(supported: {', '.join(MODEL_TYPES)})")
    act = config.get("hidden_act", "silu")
    if act != "silu":
        raise ReplayscopeError(f"config.json: hidden_act {act!r} is not supported (only silu)")
    if model_type == "llama" and (config.get("attention_bias") or config.get("mlp_bias")):
        raise ReplayscopeError("config.json: attention_bias / mlp_bias are not supported for llama")

    max_positions = _config_value(config, "max_position_embeddings", default=DEFAULT_MAX_SEQ_LEN)
    if max_seq_len is None:
        max_seq_len = min(max_positions, DEFAULT_MAX_SEQ_LEN)
    window = _config_value(config, "sliding_window", default=None)
    uses_window = model_type == "mistral" or (model_type == "qwen2" and config.get("use_sliding_window"))
    if uses_window and window is not None and window < max_seq_len:
        raise ReplayscopeError(f"config.json: sliding_window {window} < max_seq_len {max_seq_len}: "
                               f"sliding-window attention is not supported; use max_seq_len <= {window}")

    n_heads = _config_value(config, "num_attention_heads")
    dim = _config_value(config, "hidden_size")
    theta, scaling = _rope_from_config(config, max_positions)
    return ModelArgs(
        vocab_size=_config_value(config, "vocab_size"),
        dim=dim,
        n_layers=_config_value(config, "num_hidden_layers"),
        n_heads=n_heads,
        n_kv_heads=_config_value(config, "num_key_value_heads", default=n_heads),
        intermediate_size=_config_value(config, "intermediate_size"),
        head_dim=_config_value(config, "head_dim", default=dim // n_heads),
        norm_eps=_config_value(config, "rms_norm_eps", float, default=1e-6),
        rope_theta=theta,
        rope_scaling=scaling,
        max_seq_len=max_seq_len,
        tie_embeddings=_config_value(config, "tie_word_embeddings", bool, default=False),
        qkv_bias=model_type == "qwen2",
    )


def _read_config(directory: Path) -> dict[str, Any]:
    path = directory / "config.json"
    if not path.is_file():
        raise ReplayscopeError(f"no config.json in {directory}")
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReplayscopeError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ReplayscopeError(f"{path} must hold a JSON object")
    return config


def _safetensors_files(directory: Path) -> list[Path]:
    index = directory / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            names = sorted(set(weight_map.values()))
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise ReplayscopeError(f"{index} is not a valid safetensors index: {exc!r}") from None
        for name in names:
            if not (directory / name).is_file():
                raise ReplayscopeError(f"shard {name!r} listed in {INDEX_FILE} is missing from {directory}")
        return [directory / name for name in names]
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ReplayscopeError(f"no *.safetensors files in {directory}")
    return files


def _tensor_shapes(files: list[Path]) -> dict[str, tuple[Path, tuple[int, ...]]]:
    """Tensor name -> (file, shape), from the headers only."""
    found: dict[str, tuple[Path, tuple[int, ...]]] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():
                    if name in found:
                        raise ReplayscopeError(f"tensor {name!r} is in both {found[name][0].name} and {file.name}")
                    found[name] = (file, tuple(f.get_slice(name).get_shape()))
        except ReplayscopeError:
            raise
        except Exception as exc:  # safetensors raises its own error types for bad headers
            raise ReplayscopeError(f"cannot read {file}: {exc}") from None
    return found


def _weight_targets(model: Transformer) -> dict[str, tuple[torch.Tensor, slice | None]]:
    """HF tensor name -> (our parameter, rows of it or None for the whole)."""
    args = model.args
    q, kv = args.n_heads * args.head_dim, args.n_kv_heads * args.head_dim
    rows = {"q_proj": slice(0, q), "k_proj": slice(q, q + kv), "v_proj": slice(q + kv, q + 2 * kv)}
    targets = {"model.embed_tokens.weight": (model.tok_embeddings.weight, None),
               "model.norm.weight": (model.norm.weight, None)}
    if model.output is not None:
        targets["lm_head.weight"] = (model.output.weight, None)
    for i, layer in enumerate(model.layers):
        hf, attn, ffn = f"model.layers.{i}", layer.attention, layer.feed_forward
        for proj, part in rows.items():
            targets[f"{hf}.self_attn.{proj}.weight"] = (attn.wqkv.weight, part)
            if args.qkv_bias:
                targets[f"{hf}.self_attn.{proj}.bias"] = (attn.wqkv.bias, part)
        targets[f"{hf}.self_attn.o_proj.weight"] = (attn.wo.weight, None)
        targets[f"{hf}.mlp.gate_proj.weight"] = (ffn.w1.weight, None)
        targets[f"{hf}.mlp.up_proj.weight"] = (ffn.w3.weight, None)
        targets[f"{hf}.mlp.down_proj.weight"] = (ffn.w2.weight, None)
        targets[f"{hf}.input_layernorm.weight"] = (layer.attention_norm.weight, None)
        targets[f"{hf}.post_attention_layernorm.weight"] = (layer.ffn_norm.weight, None)
    return targets


def _ignored(name: str, args: ModelArgs) -> bool:
    # Old checkpoints store RoPE buffers; tied ones may still carry a copy of lm_head.
    return name.endswith("rotary_emb.inv_freq") or (args.tie_embeddings and name == "lm_head.weight")


def _check_tensors(found: dict[str, tuple[Path, tuple[int, ...]]],
                   expected: dict[str, tuple[int, ...]], args: ModelArgs) -> None:
    for name, shape in expected.items():
        if name not in found:
            raise ReplayscopeError(f"missing tensor {name!r}")
        got = found[name][1]
        if got != shape:
            raise ReplayscopeError(f"shape mismatch {name!r}: expected {list(shape)}, got {list(got)}")
    unexpected = sorted(n for n in found if n not in expected and not _ignored(n, args))
    if unexpected:
        more = f" (+{len(unexpected) - 3} more)" if len(unexpected) > 3 else ""
        raise ReplayscopeError(f"unexpected tensors: {', '.join(unexpected[:3])}{more}")


def _checked(directory: Path, max_seq_len: int | None = None):
    if not directory.is_dir():
        raise ReplayscopeError(f"checkpoint directory {directory} does not exist")
    args = args_from_hf_config(_read_config(directory), max_seq_len)
    found = _tensor_shapes(_safetensors_files(directory))

    # Check names and shapes against a model on meta, so a bad directory allocates nothing.
    expected = {name: tuple(param[part].shape if part is not None else param.shape)
                for name, (param, part) in _weight_targets(Transformer.empty(args, "meta")).items()}
    _check_tensors(found, expected, args)
    return args, found


def check_checkpoint(path: str | Path) -> ModelArgs:
    """Check a checkpoint directory (config, tensor names and shapes) without loading weights."""
    return _checked(Path(path))[0]


def load_checkpoint(path: str | Path, device: torch.device | str, dtype: torch.dtype | None = None,
                    max_seq_len: int | None = None, progress=None) -> Transformer:
    """A Transformer with the weights of the Hugging Face directory ``path`` (dtype: bf16 on GPU, else fp32).

    ``progress`` (a ``replayscope.runner.progress.Progress``) advances per tensor, noting the shard.
    """
    args, found = _checked(Path(path), max_seq_len)
    model = Transformer.empty(args, device, dtype or default_dtype(device))
    targets = _weight_targets(model)

    by_file: dict[Path, list[str]] = {}
    for name in targets:
        by_file.setdefault(found[name][0], []).append(name)
    if progress is not None:
        progress.reset(len(targets))
    with torch.no_grad():
        for shard, (file, names) in enumerate(by_file.items(), start=1):
            with safe_open(str(file), framework="pt") as f:
                for name in names:
                    param, part = targets[name]
                    (param[part] if part is not None else param).copy_(f.get_tensor(name))
                    if progress is not None:
                        progress.update(note=f"shard {shard}/{len(by_file)}")
    return model.eval()
