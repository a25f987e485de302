"""replayscope.runner.graphs.GraphRunner on the CPU ``static`` backend: capture, padding, degradation, parity, misuse.

The static backend keeps the CUDA backend's contract (static input buffers, one call per
captured size, pad rows holding each input's pad value) without a graph, so everything
here but the CUDA capture itself is specified on CPU.
"""

import itertools
import re
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from replayscope.contract import wire
from replayscope.runner.capture import capturing_size
from replayscope.contract.errors import ReplayscopeError
from replayscope.runner.graphs import GraphRunner, StaticInput
from replayscope.runner.model import ModelArgs, Transformer
from replayscope.runner.plan import CapturePlan

torch.set_num_threads(1)

SIZES = (1, 2, 4, 8)
SCRATCH = 9                       # the cache slot pad rows write into
FEATURES = 4


class Recorder:
    """An emitter stand-in: keeps each event in its wire form and checks it against the contract."""

    def __init__(self):
        self.events = []
        self._seq = itertools.count()

    def _add(self, event):
        event = {"seq": next(self._seq), "ts": time.time(), **event}
        wire.validate_event(event)
        self.events.append(event)

    def emit(self, kind, **fields):
        self._add({"kind": kind, **fields})

    def step(self, stage, mode, raw_bs, graph_bs, num_tokens, padded_tokens, reason, timing):
        self._add({"kind": "step", "stage": stage, "mode": mode, "raw_bs": raw_bs, "graph_bs": graph_bs,
                   "num_tokens": num_tokens, "padded_tokens": padded_tokens, "reason": reason,
                   "duration_s": timing})

    def of(self, kind):
        return [e for e in self.events if e["kind"] == kind]


class CacheStep(torch.nn.Module):
    """A row-wise MLP that also writes each row into a per-slot cache, like a KV cache write."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.w1 = torch.randn(FEATURES, 16, generator=gen)
        self.w2 = torch.randn(16, 3, generator=gen)
        self.cache = torch.zeros(SCRATCH + 1, FEATURES)
        self.seen_slots = []

    def forward(self, x, slots):
        if capturing_size() is None:
            self.seen_slots.append(slots.clone())
        self.cache[slots] = x
        return torch.relu(x @ self.w1) @ self.w2, slots * 10


INPUTS = [StaticInput("x", (FEATURES,), torch.float32), StaticInput("slots", (), torch.long, pad_value=SCRATCH)]


def batch(bs, value=None, slots=None, seed=0):
    x = torch.randn(bs, FEATURES, generator=torch.Generator().manual_seed(seed)) if value is None \
        else torch.full((bs, FEATURES), float(value))
    return {"x": x, "slots": torch.arange(bs) if slots is None else torch.tensor(slots)}


def make_runner(step=None, sizes=SIZES, padding=True, **kw):
    runner = GraphRunner(step or CacheStep(), INPUTS, CapturePlan(sizes, padding=padding), backend="static",
                         device="cpu", emitter=kw.pop("emitter", Recorder()), progress=False, **kw)
    runner.capture()
    return runner


# --- padding -------------------------------------------------------------------------------

@pytest.mark.parametrize("bs", [3, 5, 7])
def test_padded_output_equals_eager_output_on_the_real_rows(bs):
    step = CacheStep()
    runner = make_runner(step)
    inputs = batch(bs, seed=bs)
    logits, tens = runner.step(inputs)
    assert runner.emitter.of("step")[-1]["mode"] == "padded"
    eager_logits, eager_tens = step(**inputs)
    torch.testing.assert_close(logits, eager_logits, rtol=0, atol=1e-6)
    assert torch.equal(tens, eager_tens)


def test_padded_decode_of_a_real_transformer_matches_eager_over_several_steps():
    args = ModelArgs.from_preset("tiny")
    graphed, plain = Transformer.random(args, seed=3), Transformer.random(args, seed=3)
    for model in (graphed, plain):
        model.setup_caches(SCRATCH + 1, 16)

    def decode(model):
        return lambda tokens, positions, slots: model(tokens, positions, slots)[:, -1]

    inputs = [StaticInput("tokens", (1,), torch.long), StaticInput("positions", (1,), torch.long),
              StaticInput("slots", (), torch.long, pad_value=SCRATCH)]
    runner = GraphRunner(decode(graphed), inputs, CapturePlan(SIZES), backend="static", device="cpu",
                         emitter=Recorder(), progress=False)
    with torch.inference_mode():
        runner.capture()
        tokens = torch.tensor([[5], [17], [99]])
        for position in range(4):   # later steps attend to the cache the padded steps wrote
            feed = {"tokens": tokens, "positions": torch.full((3, 1), position), "slots": torch.tensor([0, 2, 5])}
            got = runner.step(feed)
            want = decode(plain)(**feed)
            assert got.shape == (3, args.vocab_size)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            tokens = want.argmax(-1, keepdim=True)
    assert {e["mode"] for e in runner.emitter.of("step")} == {"padded"}


def test_outputs_keep_only_the_real_rows():
    runner = make_runner()
    logits, tens = runner.step(batch(5))
    assert logits.shape == (5, 3) and tens.shape == (5,)
    assert torch.equal(tens, torch.arange(5) * 10)


def test_pad_rows_write_the_scratch_slot_not_a_stale_slot_of_an_earlier_larger_batch():
    step = CacheStep()
    runner = make_runner(step)
    runner.step(batch(8, value=1))                 # graph at 8: rows 0-7 hold slots 0-7
    step.cache.zero_()
    runner.step(batch(3, value=5))                 # padded to 4: row 3 must not write slot 3 again
    runner.step(batch(5, value=7))                 # padded to 8: rows 5-7 must not write slots 5-7
    assert [e["mode"] for e in runner.emitter.of("step")] == ["graph", "padded", "padded"]
    assert torch.equal(step.cache[:5], torch.full((5, FEATURES), 7.0))
    assert torch.equal(step.cache[5:SCRATCH], torch.zeros(SCRATCH - 5, FEATURES))
    assert torch.equal(step.seen_slots[-1], torch.tensor([0, 1, 2, 3, 4, SCRATCH, SCRATCH, SCRATCH]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=12))
def test_every_padded_replay_sees_pad_values_in_every_pad_row(sizes):
    step = CacheStep()
    runner = make_runner(step, sizes=(2, 5, 8), emitter=None)
    for bs in sizes:
        runner.step(batch(bs, slots=[SCRATCH - 1 - i for i in range(bs)]))
        seen = step.seen_slots[-1]
        assert torch.equal(seen[:bs], torch.tensor([SCRATCH - 1 - i for i in range(bs)]))
        assert (seen[bs:] == SCRATCH).all(), f"stale rows after {sizes}: {seen.tolist()}"


def test_a_padded_step_records_its_graph_size_and_padded_tokens():
    runner = make_runner()
    runner.step(batch(3))
    step = runner.emitter.of("step")[-1]
    assert (step["mode"], step["raw_bs"], step["graph_bs"], step["num_tokens"], step["padded_tokens"],
            step["reason"]) == ("padded", 3, 4, 3, 1, None)
    assert step["duration_s"] >= 0


# --- capture -------------------------------------------------------------------------------

def test_capture_emits_one_ok_event_per_size_largest_first_then_the_capture_phase():
    runner = make_runner()
    kinds = [e["kind"] for e in runner.emitter.events]
    assert kinds == ["capture"] * 4 + ["phase"]
    captures = runner.emitter.of("capture")
    assert [c["graph_bs"] for c in captures] == [8, 4, 2, 1]
    assert {(c["status"], c["stage"], c["variant"]) for c in captures} == {("ok", "decode", "static")}
    phase = runner.emitter.of("phase")[0]
    assert phase["phase"] == "capture" and phase["duration_s"] >= 0
    assert runner.report.captured == [8, 4, 2, 1] and runner.report.failed == {}


def test_a_verify_runner_names_its_capture_phase_after_the_stage():
    runner = GraphRunner(CacheStep(), INPUTS, CapturePlan((1, 2)), backend="static", device="cpu",
                         emitter=Recorder(), stage="verify", progress=False)
    runner.capture()
    assert runner.emitter.of("phase")[0]["phase"] == "capture_verify"
    assert {c["stage"] for c in runner.emitter.of("capture")} == {"verify"}


def test_the_disabled_backend_captures_nothing_and_runs_every_step_eager():
    runner = GraphRunner(CacheStep(), INPUTS, CapturePlan(SIZES), backend="disabled", device="cpu",
                         emitter=Recorder(), progress=False)
    runner.capture()
    assert runner.emitter.events == []
    runner.step(batch(4))
    assert runner.emitter.of("step")[0]["reason"] == "graphs_disabled"


# --- degradation ladder --------------------------------------------------------------------

def failing_at(*sizes):
    step = CacheStep()

    def fn(x, slots):
        size = capturing_size()
        if size in sizes:
            raise RuntimeError(f"boom at {size}")
        return step(x, slots)
    return fn


def test_a_failed_capture_drops_that_size_with_a_failed_capture_event_and_a_degrade_event():
    runner = make_runner(failing_at(4))
    failed = [c for c in runner.emitter.of("capture") if c["status"] == "failed"]
    assert [(c["graph_bs"], c["error"]) for c in failed] == [(4, "RuntimeError: boom at 4")]
    assert [(d["from"], d["to"], d["graph_bs"]) for d in runner.emitter.of("degrade")] == [("static", "eager", 4)]
    assert runner.plan.captured == (1, 2, 8) and runner.report.failed == {4: "RuntimeError: boom at 4"}


def test_batches_of_a_failed_size_pad_up_to_the_next_captured_size():
    runner = make_runner(failing_at(4))
    out, _ = runner.step(batch(3))
    step = runner.emitter.of("step")[-1]
    assert (step["mode"], step["graph_bs"]) == ("padded", 8)
    assert out.shape == (3, 3)


def test_without_padding_a_batch_of_a_failed_size_runs_eager_as_capture_failed():
    runner = make_runner(failing_at(4), padding=False)
    runner.step(batch(4))
    step = runner.emitter.of("step")[-1]
    assert (step["mode"], step["reason"]) == ("eager", "capture_failed")


def test_a_batch_above_every_surviving_size_runs_eager_as_capture_failed():
    runner = make_runner(failing_at(8))
    runner.step(batch(6))
    assert runner.emitter.of("step")[-1]["reason"] == "capture_failed"


def test_when_every_capture_fails_the_run_degrades_to_eager_and_keeps_going():
    runner = make_runner(failing_at(*SIZES))
    run_level = [d for d in runner.emitter.of("degrade") if d.get("graph_bs") is None]
    assert len(run_level) == 1 and run_level[0]["to"] == "eager"
    assert "no batch size captured" in run_level[0]["error"]
    assert len(runner.emitter.of("degrade")) == 5        # one per size, then the run
    for bs in (1, 3, 8):
        out, _ = runner.step(batch(bs))
        assert out.shape == (bs, 3)
    assert {(s["mode"], s["reason"]) for s in runner.emitter.of("step")} == {("eager", "capture_failed")}


@torch.library.custom_op("replayscope_tests::doubled", mutates_args=())
def doubled(x: torch.Tensor) -> torch.Tensor:
    """Runs eagerly; its fake (tracing) kernel raises, so torch.compile of a step using it fails."""
    return x * 2


@doubled.register_fake
def _doubled_fake(x):
    raise RuntimeError("this step cannot be compiled")


def test_a_failed_compile_falls_back_to_capture_without_compile():
    torch._dynamo.reset()

    def uncompilable(x, slots):
        return doubled(x), slots

    recorder = Recorder()
    runner = GraphRunner(uncompilable, INPUTS, CapturePlan((2,)), backend="compile", device="cpu",
                         emitter=recorder, progress=False)
    runner.capture()
    torch._dynamo.reset()
    degrade = recorder.of("degrade")
    assert [(d["from"], d["to"], d["graph_bs"]) for d in degrade] == [("compile", "static", 2)]
    assert "cannot be compiled" in degrade[0]["error"]
    capture = recorder.of("capture")
    assert [(c["graph_bs"], c["status"], c["variant"]) for c in capture] == [(2, "ok", "static")]
    out, _ = runner.step(batch(2, value=3))
    assert recorder.of("step")[-1]["mode"] == "graph" and torch.equal(out, torch.full((2, FEATURES), 6.0))


def no_compile(fn, **_options):
    """Stands in for torch.compile: what the runner does around it, without compiling."""
    return fn


def test_the_compile_backend_leaves_dynamos_recompile_limit_alone_and_says_when_it_is_below_the_plan(
        monkeypatch, caplog):
    monkeypatch.setattr(torch, "compile", no_compile)
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 2)
    runner = GraphRunner(CacheStep(), INPUTS, CapturePlan((1, 2, 4)), backend="compile", device="cpu",
                         emitter=Recorder(), progress=False)
    with caplog.at_level("WARNING", logger="replayscope.runner.capture"):
        runner.capture()
    assert torch._dynamo.config.recompile_limit == 2
    assert [r.getMessage() for r in caplog.records] == [
        "torch._dynamo.config.recompile_limit is 2, below the 3 batch sizes to compile: Dynamo runs the sizes "
        "past it uncompiled; raise it, or pass raise_recompile_limit=True"]
    assert [c["variant"] for c in runner.emitter.of("capture")] == ["compile"] * 3


def test_asked_to_the_compile_backend_raises_dynamos_recompile_limit_for_the_plan_and_logs_it(monkeypatch, caplog):
    monkeypatch.setattr(torch, "compile", no_compile)
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 2)
    runner = GraphRunner(CacheStep(), INPUTS, CapturePlan((1, 2, 4)), backend="compile", device="cpu",
                         emitter=Recorder(), progress=False, raise_recompile_limit=True)
    with caplog.at_level("WARNING", logger="replayscope.runner.capture"):
        runner.capture()
        runner.capture()                          # already high enough: nothing changes, nothing said
    assert torch._dynamo.config.recompile_limit == 11
    assert [r.getMessage() for r in caplog.records] == [
        "replayscope raised torch._dynamo.config recompile_limit 2 -> 11 to compile 3 batch sizes"]


def test_other_backends_never_read_or_change_dynamos_config(monkeypatch, caplog):
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 1)
    runner = GraphRunner(CacheStep(), INPUTS, CapturePlan(SIZES), backend="static", device="cpu",
                         progress=False, raise_recompile_limit=True)
    with caplog.at_level("WARNING", logger="replayscope.runner.capture"):
        runner.capture()
    assert torch._dynamo.config.recompile_limit == 1 and caplog.records == []


def test_capture_progress_names_each_size_while_it_compiles_and_its_time_when_done(capsys):
    torch._dynamo.reset()

    def uncompilable(x, slots):
        return doubled(x), slots

    runner = GraphRunner(uncompilable, INPUTS, CapturePlan((2, 4)), backend="compile", device="cpu",
                         emitter=Recorder(), progress=True)
    runner.capture()
    torch._dynamo.reset()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("Compiling (decode):   0%|          | 0/2 [") and lines[0].endswith(", bs=4 compiling]")
    assert re.match(r"Compiling \(decode\): 100%\|##########\| 2/2 \[.*, bs=2 \d+\.\d\ds\]$", lines[-1])


def test_a_runner_without_progress_prints_nothing(capsys):
    make_runner().step(batch(3))
    assert capsys.readouterr().err == ""


# --- parity --------------------------------------------------------------------------------

def test_parity_is_recorded_every_n_replays_with_no_divergence_on_cpu():
    runner = make_runner(parity_every=2, parity_tolerance=1e-4)
    for bs in (1, 3, 4, 5, 9, 8):       # 9 is eager: not a replay
        runner.step(batch(bs, seed=bs))
    parity = runner.emitter.of("parity")
    assert [p["graph_bs"] for p in parity] == [4, 8]     # the 2nd and 4th replays: bs 3 -> 4, bs 5 -> 8
    for p in parity:
        assert p["rel_err"] <= 1e-6 and p["max_abs_diff"] <= 1e-6 and p["tolerance"] == 1e-4


def test_no_parity_events_when_parity_is_off():
    runner = make_runner()
    for bs in (1, 2, 3, 4):
        runner.step(batch(bs))
    assert runner.emitter.of("parity") == []


# --- misuse --------------------------------------------------------------------------------

def test_a_step_that_changes_the_batch_dimension_is_refused_at_capture():
    def summed(x, slots):
        return x.sum(0, keepdim=True), slots
    with pytest.raises(ReplayscopeError, match="changed the batch dimension"):
        make_runner(summed)


def test_a_step_returning_a_non_tensor_is_refused_at_capture():
    with pytest.raises(ReplayscopeError, match="step output 1 is list, not a tensor"):
        make_runner(lambda x, slots: (x, [1]))


@pytest.mark.parametrize("inputs, message", [
    ({"x": torch.zeros(3, 5), "slots": torch.arange(3)}, r"input 'x' has shape \(3, 5\), expected \(3, 4\)"),
    ({"x": torch.zeros(3, FEATURES, dtype=torch.float64), "slots": torch.arange(3)},
     "input 'x' has dtype torch.float64, expected torch.float32"),
    ({"x": torch.zeros(3, FEATURES, device="meta"), "slots": torch.arange(3)},
     "input 'x' is on meta, the runner's static buffers are on cpu"),
    ({"x": [[0.0] * FEATURES] * 3, "slots": torch.arange(3)}, "input 'x' is of type list, not a tensor"),
    ({"x": torch.zeros(3, FEATURES), "slots": 3}, "input 'slots' is of type int, not a tensor"),
    ({"x": torch.tensor(0.0), "slots": torch.arange(3)},
     r"input 'x' has shape \(\), with no batch dimension; expected \(batch, 4\)"),
    ({"x": torch.zeros(3, FEATURES)}, "missing input 'slots'"),
    ({"slots": torch.arange(3)}, "missing input 'x'"),
    ({"x": torch.zeros(3, FEATURES), "slots": torch.arange(3), "mask": torch.ones(3)}, r"unknown inputs \['mask'\]"),
])
def test_inputs_that_break_the_static_contract_are_refused_by_name(inputs, message):
    runner = make_runner()
    with pytest.raises(ReplayscopeError, match=message):
        runner.step(inputs)
    assert runner.emitter.of("step") == []


def test_inputs_are_checked_on_every_step_not_only_the_first_of_their_shape():
    runner = make_runner()
    runner.step(batch(3))
    with pytest.raises(ReplayscopeError, match="input 'x' has dtype torch.float64, expected torch.float32"):
        runner.step({"x": torch.zeros(3, FEATURES, dtype=torch.float64), "slots": torch.arange(3)})
    with pytest.raises(ReplayscopeError, match=r"unknown inputs \['mask'\]"):
        runner.step({"x": torch.zeros(3, FEATURES), "mask": torch.arange(3)})
    assert len(runner.emitter.of("step")) == 1


def test_a_steps_inputs_are_matched_at_most_once_and_explained_only_when_the_match_fails(monkeypatch):
    import replayscope.runner.graphs
    import replayscope.runner.inputs

    calls = {"fits": 0, "explain": 0}
    real_fits, real_explain = replayscope.runner.inputs.fits, replayscope.runner.inputs.InputContract.explain

    def fits(*args):
        calls["fits"] += 1
        return real_fits(*args)

    def explain(*args, **kwargs):
        calls["explain"] += 1
        return real_explain(*args, **kwargs)

    for module in (replayscope.runner.graphs, replayscope.runner.inputs):
        monkeypatch.setattr(module, "fits", fits)
    monkeypatch.setattr(replayscope.runner.inputs.InputContract, "explain", explain)
    runner_ = make_runner()

    def checks(**step):
        calls.update(fits=0, explain=0)
        try:
            runner_.step(**step)
        except ReplayscopeError:
            pass
        return calls["fits"], calls["explain"]

    assert checks(inputs=batch(3)) == (1, 0)                       # the first of its size: a route is made
    assert checks(inputs=batch(3)) == (1, 0)                       # seen before: its route, after the match
    assert checks(inputs={"x": torch.zeros(3, FEATURES, dtype=torch.float64), "slots": torch.arange(3)}) == (1, 1)
    assert checks(inputs={"x": torch.zeros(3, FEATURES)}) == (1, 1)  # a missing input, explained by name
    assert checks(inputs=batch(3), reason="weight swap") == (1, 0)
    assert [s["raw_bs"] for s in runner_.emitter.of("step")] == [3, 3, 3]


def test_a_step_before_capture_is_refused_with_a_message():
    runner = GraphRunner(CacheStep(), INPUTS, CapturePlan(SIZES), backend="static", device="cpu",
                         emitter=Recorder(), progress=False)
    with pytest.raises(ReplayscopeError, match=r"call capture\(\) before the first step"):
        runner.step(batch(4))


def test_dispatch_follows_the_plan_after_a_later_capture_drops_a_size():
    step = CacheStep()
    broken = set()

    def fn(x, slots):
        if capturing_size() in broken:
            raise RuntimeError("boom")
        return step(x, slots)

    runner = make_runner(fn)
    runner.step(batch(3))
    broken.add(4)
    runner.capture()                    # a second capture: size 4 fails this time
    runner.step(batch(3))
    assert [(s["mode"], s["graph_bs"]) for s in runner.emitter.of("step")] == [("padded", 4), ("padded", 8)]


def test_a_plan_size_above_max_bs_is_refused():
    with pytest.raises(ReplayscopeError, match=r"capture size 16 is larger than the static buffers \(max_bs=8\)"):
        GraphRunner(CacheStep(), INPUTS, CapturePlan((1, 16)), backend="static", device="cpu", max_bs=8)


@pytest.mark.parametrize("kwargs, message", [
    ({"stage": "mixed"}, "stage must be one of decode, prefill, verify"),
    ({"backend": "tpu"}, "unknown backend 'tpu'"),
    ({"backend": "cuda"}, "backend 'cuda' needs a CUDA device"),
])
def test_bad_runner_options_are_refused(kwargs, message):
    with pytest.raises(ReplayscopeError, match=message):
        GraphRunner(CacheStep(), INPUTS, CapturePlan(SIZES), device="cpu", **kwargs)


def test_static_input_names_must_be_unique_and_present():
    with pytest.raises(ReplayscopeError, match="must be unique"):
        GraphRunner(CacheStep(), INPUTS + INPUTS[:1], CapturePlan(SIZES), device="cpu")
    with pytest.raises(ReplayscopeError, match="at least one StaticInput"):
        GraphRunner(CacheStep(), [], CapturePlan(SIZES), device="cpu")


# --- caller reasons ------------------------------------------------------------------------

def test_a_callers_own_reason_runs_eager_recorded_as_custom():
    runner = make_runner()
    out, _ = runner.step(batch(4), reason="first step after a weight swap")
    step = runner.emitter.of("step")[-1]
    assert (step["mode"], step["graph_bs"], step["reason"]) == ("eager", None, "custom:first step after a weight swap")
    assert out.shape == (4, 3)


def test_a_vocabulary_reason_from_the_caller_is_recorded_as_is():
    runner = make_runner()
    runner.step(batch(4), reason="grammar_switch")
    assert runner.emitter.of("step")[-1]["reason"] == "grammar_switch"


def test_an_overlong_custom_reason_is_refused_before_the_step_runs():
    step = CacheStep()
    runner = make_runner(step)
    with pytest.raises(ReplayscopeError, match="custom reason is 1-120 printable characters"):
        runner.step(batch(4), reason="x" * (wire.CUSTOM_REASON_MAX_CHARS + 1))
    assert runner.emitter.of("step") == [] and step.seen_slots == []


def test_a_callers_reason_or_adapters_on_one_step_leave_the_next_plain_step_on_its_graph():
    runner = make_runner()
    inputs = batch(4)
    runner.step(inputs)
    runner.step(inputs, reason="weight swap")
    runner.step(inputs, adapters=frozenset({3}))          # no adapter was captured
    runner.step(inputs)
    assert [(s["mode"], s["reason"]) for s in runner.emitter.of("step")] == [
        ("graph", None), ("eager", "custom:weight swap"), ("eager", "lora_not_captured"), ("graph", None)]


def test_free_text_reasons_leave_no_state_behind_per_reason():
    runner = make_runner()
    runner.step(batch(4))
    kept = len(runner._routes.kept) + len(runner._routes.plain)
    for i in range(200):
        runner.step(batch(4), reason=f"request {i} asked for eager")
    assert len(runner._routes.kept) + len(runner._routes.plain) == kept


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 10), st.sampled_from([None, "weight swap", "grammar_switch"])),
                min_size=1, max_size=14))
def test_any_sequence_of_batches_and_caller_reasons_returns_what_the_step_computes(steps):
    step = CacheStep()
    runner = make_runner(step, sizes=(2, 5, 8), max_bs=10)
    for i, (bs, reason) in enumerate(steps):
        inputs = batch(bs, seed=i, slots=[SCRATCH - 1 - r for r in range(bs)])
        logits, tens = runner.step(inputs, reason=reason)
        assert torch.allclose(logits, torch.relu(inputs["x"] @ step.w1) @ step.w2, atol=1e-6)
        assert torch.equal(tens, inputs["slots"] * 10)
        event = runner.emitter.of("step")[-1]
        expected = ("eager" if reason or bs > 8 else "graph" if bs in (2, 5, 8) else "padded")
        assert (event["raw_bs"], event["mode"]) == (bs, expected)
        if expected == "padded":
            assert (step.seen_slots[-1][bs:] == SCRATCH).all(), f"stale pad rows after {steps[:i + 1]}"


def test_on_a_device_the_fast_check_cannot_judge_every_step_is_checked_in_full():
    runner = GraphRunner(lambda x: x * 2, [StaticInput("x", (3,), torch.float32)], CapturePlan((2, 4)),
                         backend="static", device="meta", emitter=Recorder(), progress=False)
    runner.capture()
    runner.step({"x": torch.ones(2, 3, device="meta")})
    with pytest.raises(ReplayscopeError, match="input 'x' is on cpu, the runner's static buffers are on meta"):
        runner.step({"x": torch.ones(2, 3)})
    assert len(runner.emitter.of("step")) == 1
