"""replayscope.runner.engine: the built-in decode workload on the CPU ``static`` backend, end to end in process.

The reasons a step runs eager must come from the batches themselves through dispatch;
these tests run the real tiny model, scheduler and graph runners and check the stream.
"""

import itertools
import time

import pytest
import torch

from replayscope.contract import wire
from replayscope.runner.engine import DecodeEngine, RunConfig
from replayscope.contract.errors import ReplayscopeError

torch.set_num_threads(1)


class Recorder:
    def __init__(self):
        self.events = []
        self._seq = itertools.count()

    def emit(self, kind, **fields):
        self.events.append({"seq": next(self._seq), "ts": time.time(), "kind": kind, **fields})

    def step(self, stage, mode, raw_bs, graph_bs, num_tokens, padded_tokens, reason, timing):
        self.events.append({"seq": next(self._seq), "ts": time.time(), "kind": "step", "stage": stage,
                            "mode": mode, "raw_bs": raw_bs, "graph_bs": graph_bs, "num_tokens": num_tokens,
                            "padded_tokens": padded_tokens, "reason": reason, "duration_s": timing})

    def steps(self):
        return [e for e in self.events if e["kind"] == "step"]


def run_engine(**overrides):
    """Run the engine; return (engine, recorder, generated tokens per completed iteration)."""
    config = dict(backend="static", preset="tiny", workload="mixed", steps=600, max_bs=16, progress=False)
    config.update(overrides)
    recorder = Recorder()
    engine = DecodeEngine(RunConfig(**config), recorder)
    engine.setup()
    tokens = []
    complete = engine.scheduler.complete

    def recording_complete(iteration, new_tokens):
        tokens.append((iteration.stage, tuple(r.id for r in iteration.requests), tuple(map(tuple, new_tokens))))
        complete(iteration, new_tokens)

    engine.scheduler.complete = recording_complete
    engine.run()
    return engine, recorder, tokens


def step_trace(recorder):
    return [(s["stage"], s["mode"], s["raw_bs"], s["graph_bs"], s["reason"]) for s in recorder.steps()]


@pytest.fixture(scope="module")
def mixed():
    # The defaults of `replayscope run --workload mixed` (max_bs 32), long enough for every feature.
    return run_engine(steps=2000, max_bs=32)


def test_mixed_produces_all_three_modes(mixed):
    _, recorder, _ = mixed
    assert {s["mode"] for s in recorder.steps()} == {"graph", "padded", "eager"}


def test_mixed_produces_at_least_five_distinct_reasons(mixed):
    _, recorder, _ = mixed
    reasons = {s["reason"] for s in recorder.steps() if s["mode"] == "eager"}
    assert len(reasons) >= 5, reasons
    assert reasons <= set(wire.REASONS) - {"unknown"}
    assert {"prefill", "spec_shape", "grammar_switch", "lora_not_captured", "batch_too_large"} <= reasons


def test_every_step_event_is_valid_wire_and_keeps_the_mode_rules(mixed):
    _, recorder, _ = mixed
    steps = recorder.steps()
    assert len(steps) == 2000
    assert {s["mode"] for s in steps} == {"graph", "padded", "eager"}        # every branch below is taken
    for s in steps:
        wire.validate_event(s)
        if s["mode"] == "eager":
            assert s["reason"] is not None and s["graph_bs"] is None
        elif s["mode"] == "graph":
            assert s["graph_bs"] == s["raw_bs"] and s["padded_tokens"] == 0
        else:
            assert s["graph_bs"] > s["raw_bs"] and s["padded_tokens"] > 0


def test_the_reasons_match_the_batches_that_caused_them(mixed):
    engine, recorder, _ = mixed
    sizes = engine.config.sizes
    steps = recorder.steps()
    assert any(s["stage"] == "prefill" for s in steps) and any(s["reason"] == "batch_too_large" for s in steps)
    for s in steps:
        if s["stage"] == "prefill":
            assert s["reason"] == "prefill"
        if s["reason"] == "batch_too_large":
            assert s["raw_bs"] > max(sizes) or (s["stage"] == "verify" and s["raw_bs"] > 16)
        if s["mode"] == "padded":
            assert s["graph_bs"] == min(x for x in sizes if x >= s["raw_bs"])


def test_the_run_emits_its_startup_phases_and_captures(mixed):
    engine, recorder, _ = mixed
    phases = [e["phase"] for e in recorder.events if e["kind"] == "phase"]
    assert phases[:3] == ["load_weights", "kv_cache", "warmup"] and "capture" in phases
    captures = [e for e in recorder.events if e["kind"] == "capture"]
    decode = [c["graph_bs"] for c in captures if c["stage"] == "decode"]
    assert decode == sorted(engine.config.sizes, reverse=True)
    assert {c["variant"] for c in captures} == {"static"}      # never presented as CUDA


def test_the_same_seed_gives_the_same_steps_and_tokens_and_another_seed_differs():
    _, first, first_tokens = run_engine(seed=1)
    _, second, second_tokens = run_engine(seed=1)
    _, other, other_tokens = run_engine(seed=2)
    assert step_trace(first) == step_trace(second)
    assert first_tokens == second_tokens and len(first_tokens) == 600
    assert step_trace(first) != step_trace(other)
    assert first_tokens != other_tokens


def test_without_padding_uncaptured_sizes_run_eager_as_not_captured():
    engine, recorder, _ = run_engine(padding=False, steps=300, capture_sizes=(1, 2, 4, 8, 16))
    steps = recorder.steps()
    assert not [s for s in steps if s["mode"] == "padded"]
    not_captured = [s for s in steps if s["reason"] == "not_captured"]
    assert not_captured
    assert all(s["raw_bs"] not in (1, 2, 4, 8, 16) for s in not_captured)
    assert all(s["raw_bs"] in (1, 2, 4, 8, 16) for s in steps if s["mode"] == "graph")


def test_the_disabled_backend_runs_every_step_eager_as_graphs_disabled():
    _, recorder, _ = run_engine(backend="disabled", steps=150)
    assert {(s["mode"], s["reason"]) for s in recorder.steps()} == {("eager", "graphs_disabled")}
    assert not [e for e in recorder.events if e["kind"] == "capture"]


def test_an_injected_capture_failure_degrades_that_size_and_the_run_goes_on():
    engine, recorder, _ = run_engine(steps=200, fail_capture_sizes=(4,))
    failed = [e for e in recorder.events if e["kind"] == "capture" and e["status"] == "failed"]
    assert [(e["stage"], e["graph_bs"]) for e in failed] == [("decode", 4)]
    assert [e["graph_bs"] for e in recorder.events if e["kind"] == "degrade"] == [4]
    assert not [s for s in recorder.steps() if s["stage"] == "decode" and s["graph_bs"] == 4]
    assert engine.stats.steps == 200


def test_parity_on_the_static_backend_shows_no_divergence():
    _, recorder, _ = run_engine(steps=150, parity_every=5)
    parity = [e for e in recorder.events if e["kind"] == "parity"]
    assert parity
    assert all(p["rel_err"] <= 1e-5 for p in parity)


@pytest.mark.parametrize("overrides, message", [
    ({"steps": 0}, "--steps must be at least 1"),
    ({"max_bs": 0}, "--max-bs goes from 1 to 4096"),
    ({"parity_every": -1}, "--parity-every must be >= 0"),
    ({"preset": "huge"}, "unknown model preset 'huge'"),
    ({"workload": "bursty"}, "unknown workload 'bursty'"),
    ({"preset": None}, "give exactly one of --preset and --model-dir"),
    ({"model_dir": "/nonexistent/ckpt"}, "give exactly one of --preset and --model-dir"),
    ({"preset": None, "model_dir": "/nonexistent/ckpt"}, "--model-dir /nonexistent/ckpt: no such directory"),
])
def test_a_bad_run_config_is_refused_up_front(overrides, message):
    with pytest.raises(ReplayscopeError, match=message):
        RunConfig(**{"backend": "static", "preset": "tiny", **overrides})
