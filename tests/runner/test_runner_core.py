"""The runner's compiled step core (``_runcore*.c``) against its Python reference (``GraphRunner.step``
and ``_run``): the same scripted steps through both give the same outputs, events, route counts and
static buffers; a step the compiled core does not take goes to the Python before anything changes
(bad inputs are refused with the Python's error and change nothing); the C objects hold no
reference they should not; without the core, or with REPLAYSCOPE_PURE_PYTHON=1, the Python runs."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import sysconfig
from collections import OrderedDict
from pathlib import Path
from types import MappingProxyType

import pytest
import torch

from replayscope.contract import wire
from replayscope.contract.errors import ReplayscopeError
from replayscope.runner import runner_core
from replayscope.runner.capture import Captured, as_tuple, capturing_size
from replayscope.runner.compiled import ENV_PURE_PYTHON
from replayscope.runner.dispatch import BatchShape, Decision
from replayscope.runner.fit_checks import fit_check_maker
from replayscope.runner.graphs import CompiledGraphRunner, GraphRunner, StaticInput
from replayscope.runner.plan import CapturePlan
from replayscope.runner.routes import Route, slice_rows
from replayscope.runner.trace import step_core
from tests.compiled_checks import (compile_each_without_warnings, exported_names, memory_growth, needs_gcc,
                                   needs_gcc_and_nm)

torch.set_num_threads(1)

compiled_only = pytest.mark.skipif(runner_core.COMPILED is None, reason="the compiled runner core is not built "
                                                                        "here (python3 setup.py build_ext --inplace)")
SIZES = (1, 2, 4, 8)
MAX_BS = 16
SCRATCH = MAX_BS          # the cache slot pad rows write into
FEATURES = 4
INPUTS = [StaticInput("x", (FEATURES,), torch.float32), StaticInput("slots", (), torch.long, pad_value=SCRATCH)]
RUNNER_DIR = Path(runner_core.__file__).parent


class Step:
    """A row-wise step that writes each row into a per-slot cache (as a KV cache write: a stale pad
    row would write a slot again), keeps the slots it saw, and raises when told to."""

    def __init__(self):
        self.w = torch.randn(FEATURES, 3, generator=torch.Generator().manual_seed(0))
        self.cache = torch.zeros(SCRATCH + 1, FEATURES)
        self.seen_slots: list[list[int]] = []
        self.fail = False

    def __call__(self, x, slots):
        if self.fail:
            raise ValueError("the step's own error")
        if capturing_size() is None:
            self.seen_slots.append(slots.tolist())
        self.cache[slots] = x
        return x @ self.w, slots * 10


class FieldsEmitter:
    """An emitter like ``Emitter``: the runner hands it each step's fields made once (``step_fields``)."""

    def __init__(self):
        self.events: list[tuple] = []

    def step_fields(self, fields, timing):
        self.events.append(("step", fields, timing is not None))

    def emit(self, kind, **fields):
        self.events.append((kind, {k: v for k, v in fields.items() if not k.endswith(("_s", "_ts"))}))


class StepOnlyEmitter(FieldsEmitter):
    """An emitter of another kind, with ``step`` alone: the fields come as its arguments."""

    step_fields = None

    def step(self, *fields):
        self.events.append(("step", fields[:7], fields[7] is not None))


EMITTERS = {"none": lambda: None, "step_fields": FieldsEmitter, "step_only": StepOnlyEmitter}


def make_runner(core: str, emitter=None, graph_like: bool = False, **options) -> tuple[GraphRunner, Step]:
    step = Step()
    runner = GraphRunner(step, INPUTS, CapturePlan(SIZES), backend="static", device="cpu", max_bs=MAX_BS,
                         emitter=emitter, progress=False, step_core=core, **options)
    runner.capture()
    if graph_like:
        as_graphs(runner)
    step.cache.zero_()
    step.seen_slots.clear()
    return runner, step


def as_graphs(runner: GraphRunner) -> None:
    """Each captured size made to behave as a CUDA graph does: its call fills static outputs and
    returns nothing, and a route returns those static rows (cut to the batch once, when made)."""
    for size, captured in list(runner._capturer.graphs.items()):
        outputs = tuple(o.clone() for o in as_tuple(captured.call()))

        def replay(call=captured.call, outputs=outputs):
            for static, fresh in zip(outputs, as_tuple(call())):
                static.copy_(fresh)
        runner._capturer.graphs[size] = Captured(size, replay, outputs, graph="a graph's stand-in")
    runner._routes.forget()


def batch(bs: int, seed: int = 0) -> dict[str, torch.Tensor]:
    return {"x": torch.randn(bs, FEATURES, generator=torch.Generator().manual_seed(seed)),
            "slots": (torch.arange(bs) + seed) % SCRATCH}


def plain(value):
    """Outputs as plain data (tensors by shape, dtype and values)."""
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), str(value.dtype), value.tolist())
    return value


def snapshot(runner: GraphRunner, step: Step) -> dict:
    """What a step may change: the row mark, the parity counter, every route's count, the static
    buffers, the step's cache and the slots it saw."""
    plain_counts = {key: route.count[0] for key, route in runner._routes.plain.items()}
    kept_counts = {(stage, bs, d.mode, d.graph_bs, d.reason): route.count[0]
                   for (stage, bs, d), route in runner._routes.kept.items()}
    return {"dirty_until": runner._dirty_until, "replays": runner._replays, "plain": plain_counts,
            "kept": kept_counts, "buffers": {name: t.tolist() for name, t in runner._buffers.tensors.items()},
            "cache": step.cache.tolist(), "seen": len(step.seen_slots)}


def outcome(call) -> tuple:
    try:
        return ("returned", plain(call()))
    except Exception as error:  # noqa: BLE001 (the error is the outcome compared)
        return ("raised", type(error).__name__, str(error))


def bad_inputs() -> dict[str, dict]:
    """Inputs a runner refuses, each of a batch of 3 whose route exists."""
    good = batch(3)
    return {"dtype": {**good, "x": good["x"].double()},
            "row shape": {**good, "x": torch.zeros(3, FEATURES + 1)},
            "batch of another size": {**good, "slots": torch.arange(4)},
            "missing": {"x": good["x"]},
            "extra": {**good, "mask": torch.ones(3)},
            "first not a tensor": {**good, "x": good["x"].tolist()},
            "not a tensor": {**good, "slots": 3},
            "another device": {**good, "x": torch.zeros(3, FEATURES, device="meta")},
            "no batch dimension": {**good, "x": torch.tensor(0.0)},
            "a dimension more": {**good, "x": good["x"][None]}}


def script(runner: GraphRunner, step: Step) -> list[tuple]:
    """One caller's steps, every case the cores share, each with what it left: graph, padded (after
    larger batches left rows behind) and eager steps, each size seen again (its plain route then
    taken); num_tokens given; every reason, adapters, a grammar switch; other stages; bad inputs;
    other mappings and the keyword form; steps whose step function raises; ``run`` with a decision."""
    results = []

    def do(call):
        results.append((outcome(call), snapshot(runner, step)))

    for i, bs in enumerate((4, 8, 4, 3, 5, 3, 2, 2, 12, 12, 1, 16, 8, 3, 16, 5, 1)):
        do(lambda: runner.step(batch(bs, seed=i)))
    for bs, tokens in ((4, 7), (3, 9), (12, 30), (4, 7)):
        do(lambda: runner.step(batch(bs, seed=bs), num_tokens=tokens))
    for reason in (*wire.REASONS, "a weight swap"):
        do(lambda: runner.step(batch(3), reason=reason))
    do(lambda: runner.step(batch(4), adapters=frozenset({3})))
    do(lambda: runner.step(batch(4), grammar_switched=True))
    do(lambda: runner.step(batch(4), reason=None, adapters=frozenset(), grammar_switched=False))
    for stage in ("verify", "prefill", "verify", "prefill", ""):
        do(lambda: runner.step(batch(2), stage=stage))
    for inputs in bad_inputs().values():
        do(lambda: runner.step(inputs))
    do(lambda: runner.step(MappingProxyType(batch(4, seed=5))))
    do(lambda: runner.step(OrderedDict(batch(4, seed=6))))
    do(lambda: runner.step(inputs=batch(4, seed=7)))
    do(lambda: runner.step(dict(reversed(batch(4, seed=8).items()))))      # the same names in another order
    step.fail = True
    for bs in (4, 3, 12):                                                  # graph, padded, eager: the step raises
        do(lambda: runner.step(batch(bs)))
    step.fail = False
    do(lambda: runner.step(batch(3, seed=9)))
    do(lambda: runner.run(runner.decide(BatchShape("decode", 5)), batch(5, seed=10)))
    do(lambda: runner.run(Decision("eager", None, "prefill"), batch(5), stage="prefill", num_tokens=40,
                          eager_fn=lambda x, slots: (x * 2, slots)))
    return results


def handed_off(runner: GraphRunner) -> list[int]:
    """Counts the steps a compiled runner hands to its Python step (wrapped on the instance)."""
    calls = []

    def python_step(*args, **kwargs):
        calls.append(1)
        return GraphRunner._python_step(runner, *args, **kwargs)
    runner._python_step = python_step
    return calls


# --- the same steps through both cores ------------------------------------------------------

@compiled_only
@pytest.mark.parametrize("graph_like", [False, True], ids=["stand-in", "graph-like"])
@pytest.mark.parametrize("emitter", sorted(EMITTERS))
def test_the_same_steps_through_both_cores_give_the_same_outputs_events_counts_and_buffers(emitter, graph_like):
    results = {}
    for core in ("python", "compiled"):
        runner, step = make_runner(core, EMITTERS[emitter](), graph_like)
        assert runner.step_core == core
        results[core] = (script(runner, step), runner.emitter and runner.emitter.events, step.seen_slots)
    assert results["compiled"][2] == results["python"][2]
    assert results["compiled"][1] == results["python"][1]
    for (c_outcome, c_state), (py_outcome, py_state) in zip(results["compiled"][0], results["python"][0], strict=True):
        assert c_outcome == py_outcome
        assert c_state == py_state
    outcomes = [o for (o, _state) in results["python"][0]]
    assert sum(o[0] == "raised" for o in outcomes) == len(bad_inputs()) + 3
    if emitter != "none":
        steps = [e for e in results["python"][1] if e[0] == "step"]
        assert {e[1][1] for e in steps} == {"graph", "padded", "eager"}
        assert {e[1][6] for e in steps} >= {"batch_too_large", "prefill", "custom:a weight swap", "lora_not_captured"}


@compiled_only
def test_routes_whose_class_changed_since_configure_are_read_by_name_with_the_same_steps(monkeypatch):
    """The core reads a route's fields at their slots only while routes.Route is as configure() saw it."""
    results = {}
    original = Route.event_with
    monkeypatch.setattr(Route, "event_with", lambda self, num_tokens: original(self, num_tokens))
    try:
        for core in ("python", "compiled"):
            runner, step = make_runner(core, FieldsEmitter())
            results[core] = (script(runner, step), runner.emitter.events)
    finally:
        monkeypatch.undo()
        runner_core.configure(runner_core.COMPILED)      # the slots read again for the tests after
    assert results["compiled"] == results["python"]


@compiled_only
def test_the_compiled_core_takes_plain_steps_of_routes_seen_before_and_hands_off_the_rest():
    runner, step = make_runner("compiled", FieldsEmitter())
    assert type(runner) is CompiledGraphRunner
    calls = handed_off(runner)
    for bs in (4, 3, 12):                          # the first step of a size makes its route: the Python's
        runner.step(batch(bs))
    assert len(calls) == 3
    for i in range(30):                            # graph, padded, eager, num_tokens given: here
        runner.step(batch((4, 3, 12)[i % 3], seed=i), num_tokens=None if i % 2 else 5)
    runner.step(batch(4), stage="decode", reason=None)
    assert len(calls) == 3
    runner.step(batch(4), reason="a weight swap")
    runner.step(batch(4), adapters=frozenset({2}))
    runner.step(batch(4), grammar_switched=True)
    runner.step(OrderedDict(batch(4)))
    with pytest.raises(ReplayscopeError):
        runner.step(bad_inputs()["dtype"])
    assert len(calls) == 8
    runner.parity_every = 1                        # parity checks on: every step the Python's
    runner.step(batch(4))
    assert len(calls) == 9
    assert len([e for e in runner.emitter.events if e[0] == "step"]) == 3 + 30 + 1 + 4 + 1
    assert [e[0] for e in runner.emitter.events[-2:]] == ["step", "parity"]


class ClaimsARowMore(torch.Tensor):
    """A tensor whose shape claims a row more than it holds: a batch's size is its .shape's, as the
    Python reads it (its copy into that many static rows then fails, in both cores alike)."""

    @property
    def shape(self):
        real = super().shape
        return torch.Size((real[0] + 1, *real[1:]))


class CountedCopies(torch.Tensor):
    """Static buffers of a tensor subclass whose copy_ counts its calls: the core calls it, not torch's own."""

    copies = 0

    def copy_(self, source, non_blocking=False):
        CountedCopies.copies += 1
        return super().copy_(source, non_blocking=non_blocking)


class CallLog(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


def both_cores(steps, prepare=lambda runner: None) -> dict[str, tuple]:
    """``steps(runner)``'s outcomes, events and state through each core, and how many steps the
    compiled runner handed to its Python."""
    results = {}
    for core in ("python", "compiled"):
        runner, step = make_runner(core, FieldsEmitter(), graph_like=True)
        prepare(runner)
        calls = handed_off(runner)
        results[core] = ([outcome(lambda: call(runner)) for call in steps], runner.emitter.events,
                         snapshot(runner, step), len(calls))
    return results


@compiled_only
def test_a_batch_size_is_read_as_the_python_reads_it_whatever_the_first_input_is():
    """Exactly torch.Tensor: its size read by torch's C length; a subclass (its own .shape), a 0-d
    tensor or a torch function mode: read or seen as .shape is, with the same steps."""
    claims = lambda bs: {name: t.as_subclass(ClaimsARowMore) for name, t in batch(bs).items()}   # noqa: E731
    steps = [lambda r, bs=bs: r.step(batch(bs)) for bs in (4, 3, 4, 3)]
    steps += [lambda r, bs=bs: r.step(claims(bs)) for bs in (3, 7)]
    steps += [lambda r: r.step({**batch(3), "x": torch.tensor(1.0)})]
    results = both_cores(steps)
    assert results["compiled"][:3] == results["python"][:3]
    modes = [e[1][1] for e in results["python"][1] if e[0] == "step"]
    assert modes == ["graph", "padded", "graph", "padded"]
    assert [o[0] for o in results["python"][0][4:]] == ["raised"] * 3
    assert results["compiled"][3] == 2 + 1 + 1, ("the routes' first steps, the route of 8 a claimed 7 rows first "
                                                 "takes, and the 0-d input's: the Python's; the claimed 4 rows here")
    with CallLog() as log:
        under_mode = both_cores([lambda r, bs=bs: r.step(batch(bs)) for bs in (4, 3, 4, 3)])
    assert under_mode["compiled"][:3] == under_mode["python"][:3]
    assert log.calls > 0


@compiled_only
def test_static_rows_of_a_tensor_subclass_are_copied_into_through_their_own_copy():
    def subclass_buffers(runner):
        for name, tensor in list(runner._buffers.tensors.items()):
            runner._buffers.tensors[name] = tensor.as_subclass(CountedCopies)
        runner._routes.forget()
    CountedCopies.copies = 0
    results = both_cores([lambda r, bs=bs: r.step(batch(bs, seed=bs)) for bs in (4, 3, 4, 3)], subclass_buffers)
    assert results["compiled"][:3] == results["python"][:3]
    assert results["compiled"][3] == 2
    assert CountedCopies.copies == 2 * 4 * len(INPUTS), "every copy of both cores through the subclass's copy_"


class CountCell:
    """A route's count kept in a cell of another kind than a list: counted through its item methods."""

    def __init__(self, value):
        self.value = value

    def __getitem__(self, index):
        return [self.value][index]

    def __setitem__(self, index, value):
        self.value = [value][index]


@compiled_only
@pytest.mark.parametrize("cell", ["a list at the edge of a machine word", "another kind of cell"])
def test_a_routes_count_is_counted_as_python_counts_it_whatever_holds_it(cell):
    counts = {}
    for core in ("python", "compiled"):
        runner, _step = make_runner(core, FieldsEmitter())
        runner.step(batch(4))
        route = runner._routes.plain[(runner.stage, 4)]
        start = 2**63 - 2
        route.count = [start] if cell.startswith("a list") else CountCell(start)
        for seed in range(3):
            runner.step(batch(4, seed=seed))
        counts[core] = (route.count[0], type(route.count[0]), runner.emitter.events)
    assert counts["compiled"] == counts["python"]
    assert counts["python"][0] == 2**63 + 1


@compiled_only
def test_a_runner_shares_its_row_mark_between_the_cores_pad_rows_hold_pad_values_whichever_ran():
    """Rows a larger batch left are marked by whichever core ran it, and refilled by the other on the
    next smaller batch: the mark is RunnerState's one field, ``_dirty_until`` to both."""
    runner, step = make_runner("compiled", FieldsEmitter())
    for bs in (3, 5, 8):
        runner.step(batch(bs))                     # their routes made; batch 8's rows are marked
    routes = {bs: runner._plain_routes[("decode", bs)] for bs in (3, 5, 8)}
    assert runner._dirty_until == 8
    runner.step(batch(3))                          # compiled: row 3 refilled, rows 4 to 7 still batch 8's
    assert step.seen_slots[-1][3:] == [SCRATCH] and runner._dirty_until == 8
    runner._python_run(routes[5], batch(5), None, None)      # the Python's run: rows 5 to 7 refilled
    assert step.seen_slots[-1][5:] == [SCRATCH] * 3 and runner._dirty_until == 5
    runner._python_run(routes[8], batch(8), None, None)      # the Python marks batch 8's rows...
    runner.step(batch(5))                                    # ...the compiled core refills them
    assert step.seen_slots[-1][5:] == [SCRATCH] * 3 and runner._dirty_until == 5
    runner._dirty_until = 8                        # written from Python (as if rows 5 to 7 were a batch's), read in C
    runner.step(batch(3))
    assert step.seen_slots[-1][3:] == [SCRATCH] and runner._dirty_until == 8


@compiled_only
@pytest.mark.parametrize("name", sorted(bad_inputs()))
def test_inputs_that_do_not_fit_are_refused_with_the_pythons_error_and_change_nothing(name):
    errors = {}
    for core in ("python", "compiled"):
        runner, step = make_runner(core, FieldsEmitter())
        runner.step(batch(8))                       # rows a larger batch left behind
        runner.step(batch(3))                       # the route of a batch of 3
        runner.step(batch(3))
        before, events = snapshot(runner, step), list(runner.emitter.events)
        with pytest.raises(ReplayscopeError) as error:
            runner.step(bad_inputs()[name])
        assert snapshot(runner, step) == before, "a refused step changed the runner's state"
        assert runner.emitter.events == events
        errors[core] = str(error.value)
    assert errors["compiled"] == errors["python"]


# --- a route's fit check (fit_checks.py) ---------------------------------------------------------

class CountingMaker:
    """A fit check maker (the real one, or checks that raise) counting the checks it makes and their answers."""

    def __init__(self, make, raises: bool = False):
        self.make, self.raises, self.made, self.answers = make, raises, 0, []

    def __call__(self, tensors):
        check = self.make(tensors)
        self.made += 1

        def counted(*given):
            if self.raises:
                raise RuntimeError("a check that fails")
            self.answers.append(check(*given))
            return self.answers[-1]
        return counted


@pytest.fixture
def configured():
    """The compiled core configured with another maker for one test, configured as loaded after."""
    yield lambda maker: runner_core.COMPILED.configure(slice_rows, Route, maker, torch.Tensor)
    runner_core.configure(runner_core.COMPILED)


def inference_batch(bs: int, seed: int) -> dict[str, torch.Tensor]:
    with torch.inference_mode():
        return batch(bs, seed)


needs_fit_checks = pytest.mark.skipif(fit_check_maker() is None, reason="this torch has no usable tensor guards")


@compiled_only
@needs_fit_checks
def test_a_route_takes_its_fit_check_alone_once_made_and_a_miss_that_fits_makes_it_anew(configured):
    counting = CountingMaker(fit_check_maker())
    configured(counting)
    kinds = ["plain"] * 6 + ["inference"] * 3 + ["plain"] * 2
    results = {}
    for core in ("python", "compiled"):
        runner, step = make_runner(core, FieldsEmitter())
        calls = handed_off(runner) if core == "compiled" else []
        outcomes = [outcome(lambda: runner.step((batch if kind == "plain" else inference_batch)(4, seed=i)))
                    for i, kind in enumerate(kinds)]
        results[core] = (outcomes, runner.emitter.events, snapshot(runner, step))
    assert results["compiled"] == results["python"]
    assert len(calls) == 1, "the first step of the size made its route in the Python; the core took the rest"
    # made from the second step's inputs, then from the first inference inputs, then from plain ones again
    assert counting.made == 3
    assert counting.answers == [True] * 4 + [False, True, True] + [False, True]


@compiled_only
@pytest.mark.parametrize("maker", ["none", "raising checks"])
def test_without_fit_checks_or_with_checks_that_fail_the_full_match_gives_the_same_steps(configured, maker):
    counting = CountingMaker(fit_check_maker(), raises=True) if maker == "raising checks" else None
    configured(counting)
    results = {}
    for core in ("python", "compiled"):
        runner, step = make_runner(core, FieldsEmitter(), graph_like=True)
        results[core] = (script(runner, step), runner.emitter.events)
    assert results["compiled"] == results["python"]
    if counting is not None:
        assert counting.made > 10


class FakeCudaTensor(torch.Tensor):
    """A CPU tensor that says it is on CUDA device 0: the fast match's CUDA branch, run on the CPU."""

    @property
    def is_cuda(self):
        return True

    @property
    def is_cpu(self):
        return False

    def get_device(self):
        return 0


class FakeCudaTensorOnDevice1(FakeCudaTensor):
    def get_device(self):
        return 1


def cuda_batch(bs: int, kind: type) -> dict[str, torch.Tensor]:
    return {name: tensor.as_subclass(kind) for name, tensor in batch(bs).items()}


@compiled_only
def test_a_runner_on_cuda_device_0_takes_inputs_there_and_refuses_cpu_or_other_device_inputs_in_both_cores():
    results = {}
    for core in ("python", "compiled"):
        runner, step = make_runner(core, FieldsEmitter())
        runner._contract.cuda_index, runner._contract.device = 0, torch.device("cuda", 0)   # as if bound there
        calls = handed_off(runner)
        steps = [outcome(lambda: runner.step(cuda_batch(bs, FakeCudaTensor))) for bs in (4, 3, 4, 3)]
        taken_here = len(calls)
        before = snapshot(runner, step)
        refused = [outcome(lambda: runner.step(inputs)) for inputs in
                   (batch(4), cuda_batch(4, FakeCudaTensorOnDevice1), {**cuda_batch(3, FakeCudaTensor), "slots": 3})]
        assert snapshot(runner, step) == before
        results[core] = (steps, refused, runner.emitter.events, taken_here, len(calls))
    assert results["compiled"][:3] == results["python"][:3]
    _, refused, events, _, _ = results["python"]
    assert [r[2] for r in refused] == ["input 'x' is on cpu, the runner's static buffers are on cuda:0"] * 3
    assert [e[1][1] for e in events if e[0] == "step"] == ["graph", "padded", "graph", "padded"]
    assert results["compiled"][3:] == (2, 5), "the compiled core took the later two steps and refused none itself"


@compiled_only
def test_with_parity_checks_on_both_cores_record_the_same_parity_events():
    results = {}
    for core in ("python", "compiled"):
        runner, step = make_runner(core, FieldsEmitter(), parity_every=2, parity_tolerance=1e-4)
        for bs in (1, 3, 4, 5, 12, 8, 3, 3):
            runner.step(batch(bs, seed=bs))
        results[core] = (runner.emitter.events, snapshot(runner, step))
    assert results["compiled"] == results["python"]
    assert [e[1]["graph_bs"] for e in results["python"][0] if e[0] == "parity"] == [4, 8, 4]


# --- references and memory ------------------------------------------------------------------

@compiled_only
@pytest.mark.parametrize("graph_like", [False, True], ids=["stand-in", "graph-like"])
def test_the_compiled_core_keeps_no_reference_it_should_not_and_its_memory_is_flat(graph_like):
    emitter = FieldsEmitter()
    runner, step = make_runner("compiled", emitter, graph_like)
    inputs = [batch(bs) for bs in (4, 3, 12)]                 # graph, padded, eager
    bad = bad_inputs()["dtype"]
    tokens = 5

    def steps(n):
        for i in range(n):
            runner.step(inputs[i % 3], num_tokens=tokens if i % 4 == 0 else None)
            if i % 50 == 0:
                try:
                    runner.step(bad)                          # handed to the Python, refused there
                except ReplayscopeError:
                    pass
            emitter.events.clear()
            step.seen_slots.clear()
    steps(300)
    routes = list(runner._routes.plain.values())
    held = (runner, step, emitter, bad, runner._plain_routes, runner._clock, runner._buffers, runner._record,
            runner.stage, *inputs, *(t for i in (*inputs, bad) for t in i.values()), *routes,
            *(r.count for r in routes), *(r.event for r in routes), *(r.expected for r in routes),
            *(o for r in routes if r.outputs is not None for o in (r.outputs, *r.outputs)),
            *(rows for r in routes for _, rows in r.copies), *runner._buffers.tensors.values())

    def refs():
        gc.collect()
        return [sys.getrefcount(obj) for obj in held]
    before, objects = refs(), len(gc.get_objects())
    growth = memory_growth(steps)
    assert refs() == before
    assert growth < 4096
    assert len(gc.get_objects()) - objects < 50
    assert sum(r.count[0] for r in routes) == 20_300


# --- which core runs ------------------------------------------------------------------------

def test_without_the_compiled_module_or_with_pure_python_the_python_core_runs():
    def absent(name):
        raise ImportError(f"No module named {name!r}")
    assert runner_core.load({}, import_module=absent) is None
    assert runner_core.load({ENV_PURE_PYTHON: "1"}) is None
    if runner_core.COMPILED is not None:
        assert runner_core.load({ENV_PURE_PYTHON: "0"}) is runner_core.COMPILED
    runner, _ = make_runner("python")
    assert type(runner) is GraphRunner and runner.step_core == "python"


PURE = """import torch
from replayscope.runner import runner_core
from replayscope.runner.graphs import GraphRunner, StaticInput
from replayscope.runner.plan import CapturePlan
from replayscope.runner.routes import Route, slice_rows
from replayscope.runner.trace import step_core
runner = GraphRunner(lambda x: x * 2, [StaticInput("x", (2,), torch.float32)], CapturePlan((2,)), backend="static",
                     device="cpu", progress=False)
runner.capture()
print(runner_core.CORE, step_core.CORE, type(runner).__name__, runner.step_core, runner.step({"x": torch.ones(2, 2)}).sum().item())
"""


@pytest.mark.parametrize("pure", [True, False])
def test_a_process_told_pure_python_runs_the_python_cores(pure):
    env = {k: v for k, v in os.environ.items() if k != ENV_PURE_PYTHON}
    if pure:
        env[ENV_PURE_PYTHON] = "1"
    done = subprocess.run([sys.executable, "-c", PURE], env=env, capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    built = {"runner": runner_core.load({}) is not None, "trace": step_core.load({}) is not None}   # whatever this process runs
    core = "compiled" if built["runner"] and not pure else "python"
    trace_core = "compiled" if built["trace"] and not pure else "python"    # the one variable turns both off
    runner_class = "GraphRunner" if core == "python" else "CompiledGraphRunner"
    assert done.stdout.split() == [core, trace_core, runner_class, core, "8.0"]


def test_a_step_core_the_process_cannot_run_is_refused_by_name(monkeypatch):
    with pytest.raises(ReplayscopeError, match="step_core must be 'compiled' or 'python', got 'fast'"):
        make_runner("fast")
    monkeypatch.setattr(runner_core, "COMPILED", None)        # as where it was not built
    monkeypatch.setattr(runner_core, "CORE", "python")
    with pytest.raises(ReplayscopeError, match="step_core 'compiled': the compiled runner core is not loaded here"):
        make_runner("compiled")
    runner, _ = make_runner(None)                  # the process's default, now the Python core
    assert runner.step_core == "python"


def test_a_subclass_runs_the_python_core_unless_it_subclasses_the_compiled_runner():
    class Mine(GraphRunner):
        pass
    assert Mine(Step(), INPUTS, CapturePlan(SIZES), backend="static", device="cpu", progress=False).step_core == "python"
    if runner_core.COMPILED is not None:
        with pytest.raises(ReplayscopeError, match="a Mine runs the python core, not 'compiled'"):
            Mine(Step(), INPUTS, CapturePlan(SIZES), backend="static", device="cpu", step_core="compiled")

        class MineCompiled(CompiledGraphRunner):
            pass
        assert MineCompiled(Step(), INPUTS, CapturePlan(SIZES), backend="static", device="cpu").step_core == "compiled"


@compiled_only
def test_a_runner_state_made_before_configure_is_refused_by_name_not_a_crash():
    code = ("import importlib\n"
            "core = importlib.import_module('replayscope.runner._runcore')\n"
            "try:\n    core.RunnerState()\n"
            "except RuntimeError as error:\n    print('refused:', error)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert "refused: _runcore.configure(slice_rows, Route, make_fit_check, Tensor) must be called before a RunnerState is made" in done.stdout


@pytest.mark.skipif(os.environ.get("REPLAYSCOPE_EXPECT_COMPILED_CORE") != "1",
                    reason="only where the build is expected to have compiled the cores (.ci/run)")
def test_ci_runs_the_compiled_runner_core():
    assert runner_core.CORE == "compiled", "the C runner core was not built: pip fell back to pure Python"


# --- the build ------------------------------------------------------------------------------

def test_the_built_core_is_ignored_by_git():
    name = "runner/_runcore" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")
    done = subprocess.run(["git", "check-ignore", "-q", name], cwd=RUNNER_DIR.parent)
    assert done.returncode == 0, f"{name} is not git-ignored"


@needs_gcc
def test_the_core_compiles_without_a_warning(tmp_path):
    sources = sorted(RUNNER_DIR.glob("_runcore*.c"))
    assert len(sources) > 1, sources
    compile_each_without_warnings(sources, tmp_path)


@needs_gcc_and_nm
def test_the_built_core_exports_its_init_function_alone(tmp_path):
    exported = exported_names(sorted(RUNNER_DIR.glob("_runcore*.c")), tmp_path / "_runcore.so")
    assert exported == {"PyInit__runcore"}, sorted(exported)
