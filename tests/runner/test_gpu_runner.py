"""The graph runner on a real GPU: capture, replay, padding, degradation, timing without sync.

Run on the device machine with ``pytest -m gpu``; skipped where CUDA is absent.
"""

import statistics

import pytest
import torch

from replayscope.runner.dispatch import BatchShape, Decision
from replayscope.runner.emitter import Emitter
from replayscope.runner.engine import DecodeEngine, RunConfig
from replayscope.contract.errors import ReplayscopeError
from replayscope.runner.graphs import GraphRunner, StaticInput
from replayscope.runner.model import ModelArgs, Transformer
from replayscope.runner.plan import CapturePlan
from replayscope.runner.timing import CUDA_TIME_EVERY
from tests.run_events import ListSink, sampled

pytestmark = pytest.mark.gpu
BF16_TOL = 2e-2


def decode_runner(model, sizes, emitter=None, parity_every=0, scratch=None, time_every=CUDA_TIME_EVERY):
    def step(tokens, positions, slots):
        logits = model(tokens, positions, slots)
        return logits.argmax(-1), logits

    inputs = [StaticInput("tokens", (1,), torch.long), StaticInput("positions", (1,), torch.long),
              StaticInput("slots", (), torch.long, pad_value=scratch)]
    return GraphRunner(step, inputs, CapturePlan(sizes), backend="cuda", device="cuda", emitter=emitter,
                       parity_every=parity_every, progress=False, time_every=time_every), step


def new_emitter(sink, run_id):
    return Emitter(sink, {"run_id": run_id, "name": run_id, "source": "library", "started_at": 0.0,
                          "backend": "cuda", "model": "136m", "device": "cuda"}).start()


def run_engine(**config):
    """The built-in workload on the GPU, every event kept; returns (events, stream after setup, stats)."""
    sink = ListSink()
    engine = DecodeEngine(RunConfig(backend=config.pop("backend", "cuda"), preset="tiny",
                                    workload="decode-only", progress=False, **config))
    emitter = Emitter(sink, engine.run_record()).start()
    engine.emitter = emitter
    engine.setup()
    stream_after_setup = torch.cuda.current_stream()
    stats = engine.run()
    emitter.close("finished")
    return sink.events, stream_after_setup, stats


@pytest.fixture()
def model():
    torch.manual_seed(0)
    m = Transformer.random(ModelArgs.from_preset("136m"), seed=0, device="cuda", dtype=torch.bfloat16)
    m.setup_caches(num_slots=17, max_seq_len=64)
    return m


def batch(bs, seed):
    g = torch.Generator().manual_seed(seed)
    return {"tokens": torch.randint(1, 32000, (bs, 1), generator=g).cuda(),
            "positions": torch.randint(0, 60, (bs, 1), generator=g).cuda(),
            "slots": torch.randperm(16, generator=g)[:bs].cuda()}


@torch.inference_mode()
def test_replay_matches_eager_within_bf16_tolerance(model):
    runner, step = decode_runner(model, (1, 2, 4, 8), scratch=16)
    report = runner.capture()
    assert sorted(report.captured) == [1, 2, 4, 8] and report.pool_bytes > 0
    for bs in (1, 2, 4, 8):
        inputs = batch(bs, seed=bs)
        replayed = [t.clone() for t in runner.run(Decision("graph", bs, None), inputs)]
        eager = step(**inputs)
        rel = (replayed[1] - eager[1]).norm() / eager[1].norm()
        assert rel.item() < BF16_TOL
        assert torch.equal(replayed[0], eager[0]) or rel.item() < 1e-3


@torch.inference_mode()
def test_padded_replay_returns_the_real_rows_and_spares_other_slots(model):
    runner, step = decode_runner(model, (1, 2, 4, 8), scratch=16)
    runner.capture()
    inputs = batch(5, seed=7)
    untouched = [layer.attention.kv_cache.k_cache[10:].clone() for layer in model.layers]
    inputs["slots"] = torch.tensor([0, 1, 2, 3, 4], device="cuda")
    decision = runner.decide(BatchShape("decode", 5))
    assert decision == Decision("padded", 8, None)
    padded = [t.clone() for t in runner.run(decision, inputs)]
    assert padded[1].shape[0] == 5
    eager = step(**inputs)
    assert ((padded[1] - eager[1]).norm() / eager[1].norm()).item() < BF16_TOL
    for layer, before in zip(model.layers, untouched):      # pad rows wrote only the scratch slot
        assert torch.equal(layer.attention.kv_cache.k_cache[10:16], before[:6])


@torch.inference_mode()
def test_inputs_off_the_runners_gpu_are_refused_by_name_and_change_no_buffer(model):
    runner, _ = decode_runner(model, (1, 2, 4, 8), scratch=16)
    runner.capture()
    good = batch(4, seed=3)
    assert runner._contract.fast_batch_size(good) == 4    # the step's fast contract check takes them
    buffers = {name: b.clone() for name, b in runner._buffers.tensors.items()}
    on_cpu = {**good, "positions": good["positions"].cpu()}
    assert runner._contract.fast_batch_size(on_cpu) is None
    with pytest.raises(ReplayscopeError, match="input 'positions' is on cpu, the runner's static buffers are on cuda"):
        runner.step(on_cpu)
    with pytest.raises(ReplayscopeError, match="input 'tokens' has dtype torch.int32, expected torch.int64"):
        runner.step({**good, "tokens": good["tokens"].int()})
    for name, before in buffers.items():
        assert torch.equal(runner._buffers.tensors[name], before)
    runner.step(good)
    assert torch.equal(runner._buffers.tensors["tokens"][:4], good["tokens"])


@torch.inference_mode()
def test_a_capture_that_fails_degrades_and_the_run_goes_on():
    events, stream, stats = run_engine(steps=200, max_bs=16, fail_capture_sizes=(8,))
    assert stream == torch.cuda.default_stream()        # restored after the failure
    captures = {e["graph_bs"]: e for e in events if e["kind"] == "capture" and e["stage"] == "decode"}
    assert captures[8]["status"] == "failed" and "capture" in captures[8]["error"].lower()
    assert all(captures[s]["status"] == "ok" for s in (1, 2, 4, 16)), \
        {s: (c["status"], c.get("error")) for s, c in captures.items()}
    degrades = [e for e in events if e["kind"] == "degrade"]
    assert degrades and degrades[0]["graph_bs"] == 8
    steps = [e for e in events if e["kind"] == "step"]
    assert len(steps) == stats.steps == 200
    assert not any(e["graph_bs"] == 8 for e in steps)
    assert any(e["mode"] == "padded" and e["graph_bs"] == 16 and 4 < e["raw_bs"] <= 8 for e in steps) \
        or not any(4 < e["raw_bs"] <= 8 for e in steps if e["stage"] == "decode")
    # GPU-timed: the first step of each stage, mode and batch size, then every CUDA_TIME_EVERY-th of it
    assert [e["duration_s"] is not None for e in steps] == sampled([(e["stage"], e["mode"], e["raw_bs"]) for e in steps])
    assert all(e["duration_s"] > 0 for e in steps if e["duration_s"] is not None)


@torch.inference_mode()
def test_instrumented_replay_adds_no_device_synchronisation(model):
    sink = ListSink()
    emitter = new_emitter(sink, "sync-check")
    runner, _ = decode_runner(model, (4, 8), emitter=emitter, scratch=16, time_every=1)   # events on every step
    runner.capture()
    inputs = batch(6, seed=3)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")        # any synchronising call now raises
    try:
        for _ in range(20):
            runner.run(Decision("padded", 8, None), inputs)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    emitter.close("finished")
    steps = [e for e in sink.events if e["kind"] == "step"]
    assert len(steps) == 20 and all(e["duration_s"] > 0 for e in steps)


@torch.inference_mode()
def test_step_timings_follow_the_stream_the_step_runs_on(model):
    sink = ListSink()
    emitter = new_emitter(sink, "streams")
    runner, _ = decode_runner(model, (4, 8), emitter=emitter, scratch=16, time_every=1)
    runner.capture()
    inputs = batch(4, seed=5)
    side = torch.cuda.Stream()
    runner.step(inputs)
    assert runner._clock._stream == torch.cuda.current_stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        runner.step(inputs)
        assert runner._clock._stream == side          # its events are recorded where the replay ran
    torch.cuda.current_stream().wait_stream(side)
    runner.step(inputs)
    assert runner._clock._stream == torch.cuda.current_stream()
    emitter.close("finished")
    steps = [e for e in sink.events if e["kind"] == "step"]
    assert len(steps) == 3 and all(e["duration_s"] > 0 for e in steps)


@torch.inference_mode()
def test_sampled_steps_carry_their_gpu_time_and_the_others_none(model):
    """Default timing: CUDA events on the first step of each (stage, mode, batch size) and every
    CUDA_TIME_EVERY-th after it; a timed step's duration is the GPU time of its copies and replay."""
    sink = ListSink()
    emitter = new_emitter(sink, "sampled")
    runner, _ = decode_runner(model, (4, 8), emitter=emitter, scratch=16)
    runner.capture()
    inputs = {bs: batch(bs, seed=bs) for bs in (4, 6, 8)}
    per_size = CUDA_TIME_EVERY + 8             # each size's first step and its (CUDA_TIME_EVERY + 1)-th timed
    order = [4, 6, 8] * per_size
    for bs in order:
        runner.step(inputs[bs])
    bare_ms = []                                # the same copies and replay, each timed with events
    for bs in order:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        views = [runner._buffers.tensors[name][:bs] for name in ("tokens", "positions", "slots")]
        start.record()
        for view, name in zip(views, ("tokens", "positions", "slots")):
            view.copy_(inputs[bs][name], non_blocking=True)
        runner._capturer.graphs[8 if bs == 6 else bs].graph.replay()
        end.record()
        end.synchronize()
        bare_ms.append(start.elapsed_time(end))
    emitter.close("finished")
    steps = [e for e in sink.events if e["kind"] == "step"]
    assert [(e["raw_bs"], e["mode"]) for e in steps] == [(bs, "padded" if bs == 6 else "graph") for bs in order]
    assert [e["duration_s"] is not None for e in steps] == sampled([(e["stage"], e["mode"], e["raw_bs"]) for e in steps])
    timed = [e["duration_s"] * 1000 for e in steps if e["duration_s"] is not None]
    assert len(timed) == 3 * 2                  # steps 1 and CUDA_TIME_EVERY + 1 of each size
    assert 0.5 < statistics.median(timed) / statistics.median(bare_ms) < 2.0, (timed, bare_ms)
    assert runner.step_timing == {"clock": "cuda_events", "every": CUDA_TIME_EVERY}


@torch.inference_mode()
def test_parity_check_records_divergence_on_the_gpu():
    events, _, _ = run_engine(steps=300, max_bs=48, parity_every=5)
    parity = [e for e in events if e["kind"] == "parity"]
    assert parity and all(e["rel_err"] < BF16_TOL for e in parity)


@torch.inference_mode()
def test_compile_backend_compiles_then_captures():
    events, _, _ = run_engine(backend="compile", steps=60, capture_sizes=(4, 8), max_bs=8)
    captures = [e for e in events if e["kind"] == "capture"]
    assert {c["graph_bs"] for c in captures} == {4, 8}
    # Either compiled and captured, or compile failed and the ladder captured without it.
    for c in captures:
        assert c["status"] == "ok"
        assert c["variant"] in ("compile+cuda", "cuda")
    if any(c["variant"] == "cuda" for c in captures):
        assert any(e["kind"] == "degrade" and e["from"] == "compile" for e in events)


def test_sampling_graph_steps_on_the_gpu_still_counts_every_step_with_its_gpu_time():
    """1 in 8 graph steps sent one by one; the rest counted from their CUDA-event timings."""
    import collections

    sink = ListSink()
    engine = DecodeEngine(RunConfig(backend="cuda", preset="tiny", workload="decode-only", steps=400,
                                    progress=False))
    emitter = Emitter(sink, engine.run_record(), graph_sample=8).start()
    engine.emitter = emitter
    engine.setup()
    stats = engine.run()
    emitter.close("finished")
    sent = [e for e in sink.events if e["kind"] == "step"]
    counted = [e for e in sink.events if e["kind"] == "step_counts"]
    modes = collections.Counter(e["mode"] for e in sent)
    for e in counted:
        modes[e["mode"]] += e["count"]
    assert sink.run["graph_sample"] == 8
    assert +modes == +stats.modes
    assert stats.modes["graph"] > 50 and sum(e["mode"] == "graph" for e in sent) <= stats.modes["graph"] // 8 + 4
    # CUDA events time a sample of steps (runner/timing.py): timed steps and timed counts carry a
    # positive GPU time, the others none, and both kinds reach the collector.
    durations = [e["duration_s"] for e in counted + sent]
    assert all(d is None or d > 0 for d in durations)
    assert any(d is not None for d in (e["duration_s"] for e in counted))
    assert any(d is not None for d in (e["duration_s"] for e in sent))
