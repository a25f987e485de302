"""A Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU) with a static KV cache.

In the spirit of gpt-fast's model.py: configuration is data (``ModelArgs``, ``PRESETS``),
caches are set up once (``Transformer.setup_caches``) so every shape a graph sees is static,
and one ``forward`` serves prefill, decode and speculative verify:

    token (b, q) sits at absolute position positions[b, q] of the sequence held in cache
    slot slots[b]; its K/V are written there and it attends to that slot's positions <= its own.

``forward`` is CUDA-graph capturable: no host synchronisation, no value-dependent shapes or
Python branches. RoPE follows the Hugging Face rotate_half convention, so checkpoints load
without permuting q/k weights (see ``replayscope.runner.checkpoint``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from replayscope.contract.errors import ReplayscopeError

ROPE_TYPES = ("default", "llama3")


def rope_type_of(rope_scaling: dict | None) -> str:
    if not rope_scaling:
        return "default"
    # transformers < 4.45 wrote "type" instead of "rope_type"
    return rope_scaling.get("rope_type", rope_scaling.get("type", "default"))


def default_dtype(device: torch.device | str) -> torch.dtype:
    """bf16 on a GPU, fp32 elsewhere."""
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


@dataclass
class ModelArgs:
    vocab_size: int = 32000
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int | None = None      # None: same as n_heads (no GQA)
    intermediate_size: int = 11008
    head_dim: int | None = None        # None: dim // n_heads
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None   # None or the HF dict: {"rope_type": "llama3", "factor": ...}
    max_seq_len: int = 4096
    tie_embeddings: bool = False
    qkv_bias: bool = False             # Qwen2 has biases on q/k/v

    def __post_init__(self) -> None:
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.head_dim is None:
            self.head_dim = self.dim // self.n_heads
        if self.n_heads % self.n_kv_heads:
            raise ReplayscopeError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        rope_type = rope_type_of(self.rope_scaling)
        if rope_type not in ROPE_TYPES:
            raise ReplayscopeError(f"rope_type {rope_type!r} is not supported (supported: {', '.join(ROPE_TYPES)})")
        if rope_type == "llama3":
            missing = [k for k in ("factor", "low_freq_factor", "high_freq_factor",
                                   "original_max_position_embeddings") if k not in self.rope_scaling]
            if missing:
                raise ReplayscopeError(f"llama3 rope_scaling lacks {', '.join(missing)}")

    @classmethod
    def from_preset(cls, name: str, **overrides) -> ModelArgs:
        """A copy of the preset called ``name``, with any field overridden (head_dim is not re-derived)."""
        if name not in PRESETS:
            raise ReplayscopeError(f"unknown model preset {name!r} (known: {', '.join(PRESETS)})")
        preset = PRESETS[name]
        rope_scaling = dict(preset.rope_scaling) if preset.rope_scaling else None  # callers may edit theirs
        return dataclasses.replace(preset, **{"rope_scaling": rope_scaling, **overrides})

    def num_params(self) -> int:
        """Parameter count, computed from the shape alone (nothing is allocated)."""
        q_out, kv_out = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        attention = self.dim * (q_out + 2 * kv_out) + q_out * self.dim
        if self.qkv_bias:
            attention += q_out + 2 * kv_out
        ffn = 3 * self.dim * self.intermediate_size
        per_layer = attention + ffn + 2 * self.dim
        embeddings = self.vocab_size * self.dim * (1 if self.tie_embeddings else 2)
        return self.n_layers * per_layer + embeddings + self.dim


_LLAMA3_ROPE = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}

PRESETS: dict[str, ModelArgs] = {
    # CPU tests and demos: runs in milliseconds.
    "tiny": ModelArgs(vocab_size=512, dim=64, n_layers=2, n_heads=4, n_kv_heads=2,
                      intermediate_size=172, max_seq_len=256),
    "136m": ModelArgs(vocab_size=32000, dim=768, n_layers=12, n_heads=12, n_kv_heads=4,
                      intermediate_size=2048, max_seq_len=2048),
    # The shapes of Llama-3.2-1B and -3B (weights random unless a checkpoint is loaded).
    "1b": ModelArgs(vocab_size=128256, dim=2048, n_layers=16, n_heads=32, n_kv_heads=8,
                    intermediate_size=8192, norm_eps=1e-5, rope_theta=500000.0,
                    rope_scaling=dict(_LLAMA3_ROPE), max_seq_len=4096, tie_embeddings=True),
    "3b": ModelArgs(vocab_size=128256, dim=3072, n_layers=28, n_heads=24, n_kv_heads=8,
                    intermediate_size=8192, norm_eps=1e-5, rope_theta=500000.0,
                    rope_scaling=dict(_LLAMA3_ROPE), max_seq_len=4096, tie_embeddings=True),
}


class KVCache(nn.Module):
    """K and V for ``num_slots`` sequences of up to ``max_seq_len`` positions each."""

    def __init__(self, num_slots: int, n_kv_heads: int, max_seq_len: int, head_dim: int,
                 device: torch.device, dtype: torch.dtype):
        super().__init__()
        shape = (num_slots, n_kv_heads, max_seq_len, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, device=device, dtype=dtype), persistent=False)

    def update(self, slots: Tensor, positions: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write k, v [B, H, Q, D] at (slots[b], positions[b, q]); return the slots' caches [B, H, S, D]."""
        # Advanced indices on dims 0 and 2 put the [B, Q] index dims first: values are [B, Q, H, D].
        self.k_cache[slots[:, None], :, positions] = k.transpose(1, 2)
        self.v_cache[slots[:, None], :, positions] = v.transpose(1, 2)
        return self.k_cache[slots], self.v_cache[slots]


@dataclass
class LoraWeights:
    """A bank of LoRA adapters on q_proj and v_proj; row 0 is all zeros (no adapter).

    Tensors are stacked over layers: q_a [L, rows, rank, dim], q_b [L, rows, n_heads*head_dim, rank],
    v_a [L, rows, rank, dim], v_b [L, rows, n_kv_heads*head_dim, rank].
    """

    q_a: Tensor
    q_b: Tensor
    v_a: Tensor
    v_b: Tensor
    scale: float                       # alpha / rank

    @property
    def num_rows(self) -> int:
        return self.q_a.shape[1]

    @property
    def rank(self) -> int:
        return self.q_a.shape[2]

    @classmethod
    def random(cls, args: ModelArgs, num_adapters: int, rank: int = 8, seed: int = 0,
               device: torch.device | str = "cpu", dtype: torch.dtype | None = None,
               alpha: float | None = None) -> LoraWeights:
        """Rows 1..num_adapters random, large enough that an adapter visibly changes logits."""
        dtype = dtype or default_dtype(device)
        gen = torch.Generator(device=device).manual_seed(seed)
        rows, layers = num_adapters + 1, args.n_layers

        def bank(out: int, inp: int, std: float) -> Tensor:
            t = torch.empty(layers, rows, out, inp, device=device, dtype=dtype)
            t.normal_(0.0, std, generator=gen)
            t[:, 0] = 0
            return t

        # A keeps x's scale (std 1/sqrt(dim)); B then gives a delta comparable to q and v.
        q_out, kv_out = args.n_heads * args.head_dim, args.n_kv_heads * args.head_dim
        q_a, v_a = bank(rank, args.dim, args.dim ** -0.5), bank(rank, args.dim, args.dim ** -0.5)
        q_b, v_b = bank(q_out, rank, 0.2), bank(kv_out, rank, 0.2)
        alpha = float(rank) if alpha is None else alpha
        return cls(q_a=q_a, q_b=q_b, v_a=v_a, v_b=v_b, scale=alpha / rank)

    def select(self, adapter_ids: list[int]) -> LoraWeights:
        """A smaller bank with rows [zero, *adapter_ids] (row i+1 holds adapter_ids[i])."""
        bad = [a for a in adapter_ids if not 1 <= a < self.num_rows]
        if bad:
            raise ReplayscopeError(f"unknown LoRA adapter id(s) {bad}: this bank holds 1..{self.num_rows - 1}")
        index = torch.tensor([0, *adapter_ids], device=self.q_a.device)
        return LoraWeights(q_a=self.q_a[:, index], q_b=self.q_b[:, index],
                           v_a=self.v_a[:, index], v_b=self.v_b[:, index], scale=self.scale)


def lora_delta(x: Tensor, a: Tensor, b: Tensor, rows: Tensor, scale: float) -> Tensor:
    """((x @ A[rows]^T) @ B[rows]^T) * scale for x [B, Q, dim]; a gather and two bmm, capturable."""
    return torch.bmm(torch.bmm(x, a[rows].transpose(1, 2)), b[rows].transpose(1, 2)) * scale


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        # Normalise in fp32, as Hugging Face does, then scale in the parameter dtype.
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return x * cos + rotate_half(x) * sin


def rope_inv_freq(args: ModelArgs) -> Tensor:
    """Inverse frequencies [head_dim/2] in fp32, with llama3 scaling when configured."""
    hd = args.head_dim
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    if rope_type_of(args.rope_scaling) != "llama3":
        return inv_freq
    rs = args.rope_scaling
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_len = rs["original_max_position_embeddings"]
    # Long wavelengths are stretched by `factor`, short ones kept, the band between interpolated.
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, smoothed, scaled)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = args.n_heads, args.n_kv_heads, args.head_dim
        self.q_out, self.kv_out = args.n_heads * args.head_dim, args.n_kv_heads * args.head_dim
        # q, k and v in one matmul; the checkpoint loader writes q_proj/k_proj/v_proj into its rows.
        self.wqkv = nn.Linear(args.dim, self.q_out + 2 * self.kv_out, bias=args.qkv_bias)
        self.wo = nn.Linear(self.q_out, args.dim, bias=False)
        self.kv_cache: KVCache | None = None

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor, slots: Tensor,
                positions: Tensor, lora: tuple[Tensor, Tensor, Tensor, Tensor, float] | None,
                lora_rows: Tensor | None) -> Tensor:
        bsz, seqlen, _ = x.shape
        q, k, v = self.wqkv(x).split([self.q_out, self.kv_out, self.kv_out], dim=-1)
        if lora is not None:
            q_a, q_b, v_a, v_b, scale = lora
            q = q + lora_delta(x, q_a, q_b, lora_rows, scale)
            v = v + lora_delta(x, v_a, v_b, lora_rows, scale)

        q = q.view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(bsz, seqlen, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(bsz, seqlen, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)

        k, v = self.kv_cache.update(slots, positions, k, v)
        # GQA without copying K/V (enable_gqa needs torch >= 2.5): the query heads that share
        # a KV head become extra query rows of that head, and the mask repeats per group.
        groups = self.n_heads // self.n_kv_heads
        q = q.reshape(bsz, self.n_kv_heads, groups * seqlen, self.head_dim)
        mask = mask.unsqueeze(2).expand(bsz, 1, groups, seqlen, mask.shape[-1]).reshape(
            bsz, 1, groups * seqlen, mask.shape[-1])
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.reshape(bsz, self.n_heads, seqlen, self.head_dim)
        return self.wo(y.transpose(1, 2).reshape(bsz, seqlen, self.q_out))


class FeedForward(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.w1 = nn.Linear(args.dim, args.intermediate_size, bias=False)  # gate_proj
        self.w3 = nn.Linear(args.dim, args.intermediate_size, bias=False)  # up_proj
        self.w2 = nn.Linear(args.intermediate_size, args.dim, bias=False)  # down_proj

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args)
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor, slots: Tensor,
                positions: Tensor, lora, lora_rows: Tensor | None) -> Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin, mask, slots, positions, lora, lora_rows)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        # Tied models read logits straight off the embedding matrix: no second parameter to keep in sync.
        self.output = None if args.tie_embeddings else nn.Linear(args.dim, args.vocab_size, bias=False)
        self.num_slots = 0
        self.max_seq_len = 0
        # Filled by setup_caches; buffers so that .to() moves them with the weights.
        self.register_buffer("rope_cos", None, persistent=False)
        self.register_buffer("rope_sin", None, persistent=False)
        self.register_buffer("cache_positions", None, persistent=False)

    @classmethod
    def empty(cls, args: ModelArgs, device: torch.device | str, dtype: torch.dtype | None = None) -> Transformer:
        """A model with uninitialised weights on ``device`` (built on meta: no CPU round trip)."""
        with torch.device("meta"):
            model = cls(args)
        model = model.to(dtype or default_dtype(device)).to_empty(device=device)
        return model.requires_grad_(False)  # inference only: no autograd state inside a captured graph

    @classmethod
    def random(cls, args: ModelArgs, seed: int = 0, device: torch.device | str = "cpu",
               dtype: torch.dtype | None = None, progress=None) -> Transformer:
        """Seeded random weights (N(0, 0.02) for linears and embeddings, ones for norms), made on ``device``.

        ``progress`` (a ``replayscope.runner.progress.Progress``) advances per tensor.
        """
        model = cls.empty(args, device, dtype)
        gen = torch.Generator(device=device).manual_seed(seed)
        params = list(model.named_parameters())
        if progress is not None:
            progress.reset(len(params))
        with torch.no_grad():
            for name, param in params:
                if isinstance(model.get_submodule(name.rsplit(".", 1)[0]), RMSNorm):
                    param.fill_(1.0)
                elif name.endswith(".bias"):
                    param.zero_()
                else:
                    param.normal_(0.0, 0.02, generator=gen)
                if progress is not None:
                    progress.update(note=name)
        return model.eval()

    def setup_caches(self, num_slots: int, max_seq_len: int, device: torch.device | str | None = None,
                     dtype: torch.dtype | None = None) -> None:
        """Allocate each layer's KV cache [num_slots, n_kv_heads, max_seq_len, head_dim] and the RoPE tables."""
        if max_seq_len > self.args.max_seq_len:
            raise ReplayscopeError(f"max_seq_len {max_seq_len} exceeds the model's {self.args.max_seq_len}")
        param = self.tok_embeddings.weight
        device = torch.device(device) if device is not None else param.device
        dtype = dtype or param.dtype
        args = self.args
        for layer in self.layers:
            layer.attention.kv_cache = KVCache(num_slots, args.n_kv_heads, max_seq_len, args.head_dim,
                                               device, dtype)
        freqs = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), rope_inv_freq(args))
        emb = torch.cat((freqs, freqs), dim=-1)  # rotate_half layout: the two halves share frequencies
        self.rope_cos, self.rope_sin = emb.cos().to(device), emb.sin().to(device)
        self.cache_positions = torch.arange(max_seq_len, device=device)
        self.num_slots, self.max_seq_len = num_slots, max_seq_len

    def forward(self, tokens: Tensor, positions: Tensor, slots: Tensor,
                lora: LoraWeights | None = None, lora_rows: Tensor | None = None) -> Tensor:
        """Logits [B, Q, vocab] in fp32 for tokens [B, Q] at positions [B, Q] of cache slots [B]."""
        if self.rope_cos is None:
            raise RuntimeError("call setup_caches() before forward()")
        if lora is not None and lora_rows is None:
            raise ValueError("lora_rows is required with lora")
        x = self.tok_embeddings(tokens)
        cos = self.rope_cos[positions].to(x.dtype).unsqueeze(1)  # [B, 1, Q, D]: broadcast over heads
        sin = self.rope_sin[positions].to(x.dtype).unsqueeze(1)
        # Each token sees its slot's positions up to its own; later (stale) entries stay hidden.
        mask = (self.cache_positions <= positions[..., None]).unsqueeze(1)  # [B, 1, Q, S]
        for i, layer in enumerate(self.layers):
            layer_lora = None
            if lora is not None:
                layer_lora = (lora.q_a[i], lora.q_b[i], lora.v_a[i], lora.v_b[i], lora.scale)
            x = layer(x, cos, sin, mask, slots, positions, layer_lora, lora_rows)
        x = self.norm(x)
        weight = self.tok_embeddings.weight if self.output is None else self.output.weight
        return F.linear(x, weight).float()
