"""replayscope.runner.model: presets, the static-KV-cache forward (prefill, decode, verify), LoRA bank."""

import dataclasses

import pytest
import torch

from replayscope.contract.errors import ReplayscopeError
from replayscope.runner.model import PRESETS, LoraWeights, ModelArgs, Transformer

TINY = ModelArgs.from_preset("tiny")
ATOL = 1e-5


@pytest.fixture(scope="module")
def model() -> Transformer:
    return Transformer.random(TINY, seed=0)


def tokens_of(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, TINY.vocab_size, (n,), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def run(model, tokens, positions, slots, lora=None, lora_rows=None) -> torch.Tensor:
    """Forward on python lists / tensors, for brevity in the tests below."""
    return model(torch.as_tensor(tokens), torch.as_tensor(positions), torch.as_tensor(slots),
                 lora, None if lora_rows is None else torch.as_tensor(lora_rows))


def prefill(model, tokens: torch.Tensor, slot: int, **lora) -> torch.Tensor:
    return run(model, tokens[None], torch.arange(len(tokens))[None], [slot], **lora)[0]


# --- presets -------------------------------------------------------------------------------

def test_presets_are_found_by_name():
    assert set(PRESETS) >= {"tiny", "136m", "1b", "3b"}
    assert ModelArgs.from_preset("1b") == PRESETS["1b"]


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ReplayscopeError, match=r"unknown model preset 'huge' \(known: tiny, 136m, 1b, 3b"):
        ModelArgs.from_preset("huge")


def test_from_preset_returns_a_copy_with_overrides():
    args = ModelArgs.from_preset("tiny", max_seq_len=64)
    assert args.max_seq_len == 64 and PRESETS["tiny"].max_seq_len == 256


def test_head_dim_and_kv_heads_default_from_dim_and_heads():
    args = ModelArgs(dim=128, n_heads=8)
    assert args.head_dim == 16 and args.n_kv_heads == 8


def test_heads_must_be_a_multiple_of_kv_heads():
    with pytest.raises(ReplayscopeError, match="n_heads 6 is not a multiple of n_kv_heads 4"):
        ModelArgs(dim=96, n_heads=6, n_kv_heads=4)


def test_tiny_forward_shapes(model):
    model.setup_caches(num_slots=4, max_seq_len=32)
    logits = run(model, torch.zeros(3, 5, dtype=torch.long), torch.arange(5).repeat(3, 1), [0, 1, 2])
    assert logits.shape == (3, 5, TINY.vocab_size) and logits.dtype == torch.float32


def test_logits_are_float32_for_a_bf16_model():
    bf16 = Transformer.random(TINY, seed=0, dtype=torch.bfloat16)
    bf16.setup_caches(num_slots=1, max_seq_len=8)
    assert bf16.layers[0].attention.kv_cache.k_cache.dtype == torch.bfloat16
    assert run(bf16, [[1, 2]], [[0, 1]], [0]).dtype == torch.float32


@pytest.mark.parametrize("overrides", [{}, {"tie_embeddings": True}, {"qkv_bias": True}, {"head_dim": 32}])
def test_num_params_counts_the_parameters(overrides):
    args = dataclasses.replace(TINY, **overrides)
    assert sum(p.numel() for p in Transformer.random(args).parameters()) == args.num_params()


@pytest.mark.parametrize("name, expected", [("1b", 1.236e9), ("3b", 3.213e9)])
def test_llama32_presets_have_llama32_sizes(name, expected):
    args = ModelArgs.from_preset(name)
    assert args.num_params() == pytest.approx(expected, rel=0.01)
    # the same count from the module itself, built on meta so nothing is allocated
    assert sum(p.numel() for p in Transformer.empty(args, "meta").parameters()) == args.num_params()


def test_136m_preset_size():
    assert 1.0e8 < ModelArgs.from_preset("136m").num_params() < 1.5e8


def test_seeded_random_weights_are_deterministic():
    a, b, c = (Transformer.random(TINY, seed=s) for s in (7, 7, 8))
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
        if "norm" not in name:
            assert not torch.equal(pa, pc), name
    assert all(torch.equal(layer.attention_norm.weight, torch.ones(TINY.dim)) for layer in a.layers)


def test_random_model_has_no_autograd_state():
    assert not any(p.requires_grad for p in Transformer.random(TINY).parameters())


# --- caches --------------------------------------------------------------------------------

def test_setup_caches_allocates_one_static_cache_per_layer(model):
    model.setup_caches(num_slots=3, max_seq_len=40)
    for layer in model.layers:
        assert layer.attention.kv_cache.k_cache.shape == (3, TINY.n_kv_heads, 40, TINY.head_dim)
        assert layer.attention.kv_cache.v_cache.shape == (3, TINY.n_kv_heads, 40, TINY.head_dim)
    assert model.rope_cos.shape == (40, TINY.head_dim)


def test_setup_caches_refuses_more_positions_than_the_model_has(model):
    with pytest.raises(ReplayscopeError, match="max_seq_len 512 exceeds the model's 256"):
        model.setup_caches(num_slots=1, max_seq_len=512)


def test_forward_before_setup_caches_is_an_error():
    with pytest.raises(RuntimeError, match="setup_caches"):
        run(Transformer.random(TINY), [[1]], [[0]], [0])


def test_prefill_writes_kv_into_its_slot_only(model):
    model.setup_caches(num_slots=3, max_seq_len=16)
    prefill(model, tokens_of(5, seed=0), slot=1)
    cache = model.layers[0].attention.kv_cache.k_cache
    assert cache[1, :, :5].abs().sum() > 0
    assert cache[1, :, 5:].abs().sum() == 0 and cache[0].abs().sum() == 0 and cache[2].abs().sum() == 0


# --- prefill / decode / verify ----------------------------------------------------------------

def test_decode_of_one_token_equals_last_row_of_full_prefill(model):
    seq = tokens_of(10, seed=1)
    model.setup_caches(num_slots=2, max_seq_len=32)
    full = prefill(model, seq, slot=0)
    prefill(model, seq[:9], slot=1)
    decoded = run(model, [[seq[9]]], [[9]], [1])[0, 0]
    torch.testing.assert_close(decoded, full[9], atol=ATOL, rtol=0)


def test_chunked_prefill_equals_one_prefill(model):
    seq = tokens_of(12, seed=2)
    model.setup_caches(num_slots=2, max_seq_len=32)
    full = prefill(model, seq, slot=0)
    first = run(model, seq[None, :7], torch.arange(7)[None], [1])[0]
    second = run(model, seq[None, 7:], torch.arange(7, 12)[None], [1])[0]
    torch.testing.assert_close(torch.cat([first, second]), full, atol=ATOL, rtol=0)


def test_verify_of_k_plus_1_tokens_equals_sequential_decodes(model):
    prompts = [tokens_of(6, seed=3), tokens_of(9, seed=4)]
    drafts = [tokens_of(4, seed=5), tokens_of(4, seed=6)]  # k = 3 draft tokens + 1

    model.setup_caches(num_slots=2, max_seq_len=32)
    for slot, prompt in enumerate(prompts):
        prefill(model, prompt, slot)
    sequential = []
    for i in range(4):
        positions = [[len(p) + i] for p in prompts]
        sequential.append(run(model, [[d[i]] for d in drafts], positions, [0, 1])[:, 0])
    sequential = torch.stack(sequential, dim=1)

    model.setup_caches(num_slots=2, max_seq_len=32)
    for slot, prompt in enumerate(prompts):
        prefill(model, prompt, slot)
    positions = torch.stack([torch.arange(len(p), len(p) + 4) for p in prompts])
    verified = run(model, torch.stack(drafts), positions, [0, 1])
    torch.testing.assert_close(verified, sequential, atol=ATOL, rtol=0)


def test_padded_row_in_scratch_slot_does_not_change_other_slots(model):
    prompts = {0: tokens_of(5, seed=7), 1: tokens_of(8, seed=8)}
    steps = [tokens_of(3, seed=9), tokens_of(3, seed=10)]

    def decode_three_steps(pad: bool) -> torch.Tensor:
        model.setup_caches(num_slots=3, max_seq_len=32)  # slot 2 is the scratch slot
        for slot, prompt in prompts.items():
            prefill(model, prompt, slot)
        out = []
        for i in range(3):
            tokens = [[steps[0][i]], [steps[1][i]]] + ([[0]] if pad else [])
            positions = [[5 + i], [8 + i]] + ([[0]] if pad else [])
            slots = [0, 1] + ([2] if pad else [])
            out.append(run(model, tokens, positions, slots)[:2, 0])
        return torch.stack(out)

    torch.testing.assert_close(decode_three_steps(pad=True), decode_three_steps(pad=False), atol=ATOL, rtol=0)


def test_stale_cache_entries_past_the_position_are_ignored(model):
    seq = tokens_of(6, seed=11)
    model.setup_caches(num_slots=1, max_seq_len=32)
    fresh = prefill(model, seq, slot=0)
    model.setup_caches(num_slots=1, max_seq_len=32)
    prefill(model, tokens_of(20, seed=12), slot=0)  # a longer, finished sequence left in the slot
    torch.testing.assert_close(prefill(model, seq, slot=0), fresh, atol=ATOL, rtol=0)


def test_forward_traces_as_one_graph_without_host_syncs(model):
    """Dynamo with fullgraph=True fails on .item(), .tolist(), data-dependent branches: the
    same things that break CUDA-graph capture. (Real capture is the gpu test below.)"""
    model.setup_caches(num_slots=4, max_seq_len=32)
    lora = LoraWeights.random(TINY, num_adapters=2, rank=4, seed=0)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="eager", fullgraph=True, dynamic=False)
    args = (torch.tensor([[1], [2]]), torch.tensor([[3], [4]]), torch.tensor([0, 2]), lora, torch.tensor([1, 0]))
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args), model(*args), atol=ATOL, rtol=0)


@pytest.mark.gpu
def test_cuda_graph_replay_matches_eager():
    gpu = Transformer.random(TINY, seed=0, device="cuda")
    gpu.setup_caches(num_slots=4, max_seq_len=32)
    lora = LoraWeights.random(TINY, num_adapters=2, rank=4, seed=0, device="cuda")
    static = [torch.zeros(2, 1, dtype=torch.long, device="cuda"), torch.zeros(2, 1, dtype=torch.long, device="cuda"),
              torch.zeros(2, dtype=torch.long, device="cuda"), torch.zeros(2, dtype=torch.long, device="cuda")]
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            gpu(static[0], static[1], static[2], lora, static[3])  # warm-up off the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = gpu(static[0], static[1], static[2], lora, static[3])
        new = [torch.tensor([[5], [6]]), torch.tensor([[0], [0]]), torch.tensor([1, 3]), torch.tensor([2, 0])]
        for buf, value in zip(static, new):
            buf.copy_(value)
        graph.replay()
        replayed = out.clone()
        eager = gpu(*[v.cuda() for v in new[:3]], lora, new[3].cuda())
    torch.testing.assert_close(replayed, eager, atol=1e-2, rtol=0)


# --- LoRA ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bank() -> LoraWeights:
    return LoraWeights.random(TINY, num_adapters=3, rank=8, seed=0)


def test_lora_bank_shapes_and_zero_row(bank):
    assert bank.num_rows == 4 and bank.rank == 8
    assert bank.q_a.shape == (TINY.n_layers, 4, 8, TINY.dim)
    assert bank.q_b.shape == (TINY.n_layers, 4, TINY.n_heads * TINY.head_dim, 8)
    assert bank.v_b.shape == (TINY.n_layers, 4, TINY.n_kv_heads * TINY.head_dim, 8)
    for t in (bank.q_a, bank.q_b, bank.v_a, bank.v_b):
        assert t[:, 0].abs().sum() == 0 and t[:, 1:].abs().sum() > 0


def test_lora_random_is_deterministic(bank):
    again = LoraWeights.random(TINY, num_adapters=3, rank=8, seed=0)
    assert torch.equal(again.q_a, bank.q_a) and torch.equal(again.v_b, bank.v_b)


def test_lora_row_0_equals_the_base_model(model, bank):
    seq = tokens_of(7, seed=13)
    model.setup_caches(num_slots=1, max_seq_len=16)
    base = prefill(model, seq, slot=0)
    with_row_0 = prefill(model, seq, slot=0, lora=bank, lora_rows=[0])
    assert torch.equal(with_row_0, base)


def test_an_adapter_changes_the_logits(model, bank):
    seq = tokens_of(7, seed=14)
    model.setup_caches(num_slots=1, max_seq_len=16)
    base = prefill(model, seq, slot=0)
    adapted = prefill(model, seq, slot=0, lora=bank, lora_rows=[2])
    assert (adapted - base).abs().max() > 0.1 * base.abs().max()


def test_mixed_adapter_batch_equals_per_row_single_runs(model, bank):
    rows = [0, 2, 1, 3]
    prompts = [tokens_of(5, seed=20 + i) for i in range(4)]
    model.setup_caches(num_slots=4, max_seq_len=16)
    singles = []
    for slot, (prompt, row) in enumerate(zip(prompts, rows)):
        prefill(model, prompt[:4], slot, lora=bank, lora_rows=[row])
        singles.append(run(model, [[prompt[4]]], [[4]], [slot], bank, [row])[0, 0])

    model.setup_caches(num_slots=4, max_seq_len=16)
    for slot, (prompt, row) in enumerate(zip(prompts, rows)):
        prefill(model, prompt[:4], slot, lora=bank, lora_rows=[row])
    batched = run(model, [[p[4]] for p in prompts], [[4]] * 4, [0, 1, 2, 3], bank, rows)[:, 0]
    torch.testing.assert_close(batched, torch.stack(singles), atol=ATOL, rtol=0)


def test_select_builds_a_bank_of_zero_plus_the_chosen_adapters(model, bank):
    small = bank.select([3, 1])
    assert small.num_rows == 3 and small.scale == bank.scale
    assert torch.equal(small.q_a[:, 1], bank.q_a[:, 3]) and torch.equal(small.v_b[:, 2], bank.v_b[:, 1])
    assert small.q_a[:, 0].abs().sum() == 0
    seq = tokens_of(6, seed=30)
    model.setup_caches(num_slots=1, max_seq_len=16)
    torch.testing.assert_close(prefill(model, seq, 0, lora=small, lora_rows=[1]),
                               prefill(model, seq, 0, lora=bank, lora_rows=[3]), atol=ATOL, rtol=0)


def test_select_refuses_unknown_adapters(bank):
    with pytest.raises(ReplayscopeError, match=r"unknown LoRA adapter id\(s\) \[4\]: this bank holds 1..3"):
        bank.select([1, 4])


def test_lora_needs_rows(model, bank):
    model.setup_caches(num_slots=1, max_seq_len=8)
    with pytest.raises(ValueError, match="lora_rows is required"):
        run(model, [[1]], [[0]], [0], lora=bank)
