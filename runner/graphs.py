"""The graph runner: capture a step at a plan of batch sizes, then replay, pad or fall back.

This is the public library (``from runner import GraphRunner, StaticInput, CapturePlan``):
describe the static inputs of your step, give the step callable and a capture plan,
call ``capture()`` once, then ``step()`` per batch. Each batch goes through the pure
``dispatch`` and runs one of three ways:

- ``graph``: the batch size was captured; inputs are copied into the static buffers
  and the graph replays;
- ``padded``: the next larger captured size replays; pad rows hold each input's
  ``pad_value`` and outputs are sliced back to the real rows;
- ``eager``: the step callable runs on the batch as given, with the reason recorded.

With an emitter, every step is an event. On CUDA its duration comes from CUDA events on the
first step of each (stage, mode, batch size) and every ``time_every``-th one after it (default
32; 1 times every step), read later without synchronising; the other steps carry no duration.

Capture never kills the process (``replayscope.runner.capture``): a failed compile falls back to
capture without compile, a failed capture drops that size, and if nothing captures
the runner runs eager and says so; each rung is a ``degrade`` event.

The runner composes small parts, one job each: the input contract (``replayscope.runner.inputs``: the
fast match and the slow explanation), the static buffers (``replayscope.runner.buffers``), capture
(``replayscope.runner.capture``), routes (``replayscope.runner.routes``: what a step of a stage, batch size and
decision runs, made on its first use) and parity (``replayscope.runner.parity``). What it does itself is
the step: find the route, check the inputs once, copy, launch, then record.

That step has two cores (``replayscope.runner.runner_core``): this module's Python, the reference,
and, where it was built, a compiled one (``_runcore*.c``) doing a plain step of a route seen
before; a runner takes the compiled one by default (``step_core``), and it hands every other step
to the Python before doing anything.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch

from replayscope.contract import wire
from replayscope.runner.buffers import StaticBuffers
from replayscope.runner.capture import CaptureReport, Capturer
from replayscope.runner.dispatch import BatchShape, Decision, dispatch
from replayscope.contract.errors import ReplayscopeError
from replayscope.runner.inputs import InputContract, StaticInput, batch_size, fits
from replayscope.runner.parity import divergence
from replayscope.runner.plan import BACKENDS, CapturePlan
from replayscope.runner.routes import Route, Routes, slice_rows
from replayscope.runner.runner_core import COMPILED, RunnerState, chosen
from replayscope.runner.timing import CUDA_TIME_EVERY, CudaClock, HostClock, step_timing

OTHER_WIDTH_STAGES = ("verify", "prefill", "mixed")   # stages whose batches may have other row shapes


def resolve_backend(backend: str, device: torch.device) -> str:
    if backend not in BACKENDS:
        raise ReplayscopeError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "cuda" if device.type == "cuda" else "static"
    if backend == "cuda" and device.type != "cuda":
        raise ReplayscopeError("backend 'cuda' needs a CUDA device; use 'static' or 'auto' on CPU")
    return backend


class GraphRunner(RunnerState):
    """Captures ``step_fn`` per batch size of ``plan`` and runs each batch the best way.

    ``step_fn(**inputs)`` must return a tensor or a tuple of tensors whose first
    dimension is the batch, and must be capturable: static shapes, no host sync.

    ``raise_recompile_limit`` (``compile`` backend): raise Dynamo's recompile limit, a setting
    of the whole process, to hold one specialisation per planned size (logged when it does);
    left off, a limit below the plan's sizes is logged and left as it is.

    ``step_core``: which core runs ``step`` (``replayscope.runner.runner_core``): "compiled" (the
    default where it was built: the runner is then a ``CompiledGraphRunner``) or "python". A
    subclass runs the Python core (or subclass ``CompiledGraphRunner``).
    """

    step_core = "python"

    def __new__(cls, step_fn: Callable[..., Any], inputs: Sequence[StaticInput], plan: CapturePlan, *,
                step_core: str | None = None, **options: Any) -> "GraphRunner":
        """A ``CompiledGraphRunner`` where the compiled core is to run the steps (``__init__`` does the rest)."""
        if cls is GraphRunner and chosen(step_core) == "compiled":
            cls = CompiledGraphRunner
        return super().__new__(cls)

    def __init__(self, step_fn: Callable[..., Any], inputs: Sequence[StaticInput], plan: CapturePlan, *,
                 backend: str = "auto", device: torch.device | str | None = None,
                 emitter: Any = None, stage: str = "decode", max_bs: int | None = None,
                 parity_every: int = 0, parity_tolerance: float | None = None,
                 warmup_iters: int = 2, pool: Any = None, progress: bool = True,
                 time_every: int = CUDA_TIME_EVERY, raise_recompile_limit: bool = False,
                 step_core: str | None = None):
        if step_core is not None and chosen(step_core) != self.step_core:   # a subclass runs its class's core
            raise ReplayscopeError(f"a {type(self).__name__} runs the {self.step_core} core, not {step_core!r}")
        if stage not in wire.RUNNER_CAPTURE_STAGES:
            raise ReplayscopeError(f"stage must be one of {', '.join(wire.RUNNER_CAPTURE_STAGES)}, got {stage!r}")
        if type(time_every) is not int or time_every < 1:
            raise ReplayscopeError(f"time_every must be a whole number >= 1, got {time_every!r}")
        self.device = torch.device(device) if device is not None else (
            torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
        self.inputs = tuple(inputs)
        self._contract = InputContract(self.inputs, self.device)
        self.backend = resolve_backend(backend, self.device)
        self.max_bs = plan.max_size if max_bs is None else max_bs
        if plan.max_size > self.max_bs:
            raise ReplayscopeError(f"capture size {plan.max_size} is larger than the static buffers "
                                   f"(max_bs={self.max_bs}); raise max_bs or drop that size")
        self.step_fn = step_fn
        self.emitter = emitter
        self.stage = stage
        self.parity_every = parity_every
        self.parity_tolerance = parity_tolerance
        self._buffers = StaticBuffers(self.inputs)
        self._capturer = Capturer(step_fn, device=self.device, backend=self.backend, stage=stage,
                                  warmup_iters=warmup_iters, pool=pool, progress=progress, emit=self._emit,
                                  raise_recompile_limit=raise_recompile_limit)
        self.report: CaptureReport = self._capturer.report
        self._routes = Routes(self._contract, self._buffers, self._capturer.graphs)
        self._plain_routes, self._kept_routes = self._routes.plain, self._routes.kept   # read by steps: held here
        self.plan = plan.disabled() if self.backend == "disabled" else plan
        self._first_input, self._first_dim = self._contract.first, self._contract.first_dim
        self._dirty_until = 0     # rows at and above this index hold pad values
        self._replays = 0
        # Steps on CUDA are timed by events on 1 step in ``time_every`` per (stage, mode, batch
        # size); the others carry no duration (replayscope.runner.timing says why). CPU steps: every one.
        self._clock = CudaClock(self.device.index, time_every) if self.device.type == "cuda" else HostClock()

    @property
    def emitter(self) -> Any:
        return self._emitter

    @emitter.setter
    def emitter(self, emitter: Any) -> None:
        """Steps hand it their event's fields made once per route (``Emitter.step_fields``); an
        emitter of another kind, with ``step`` alone, gets them as ``step``'s arguments."""
        self._emitter = emitter
        if emitter is None:
            self._record = None
        else:
            self._record = getattr(emitter, "step_fields", None) or (
                lambda fields, timing: emitter.step(*fields[:7], timing))

    @property
    def plan(self) -> CapturePlan:
        return self._plan

    @plan.setter
    def plan(self, plan: CapturePlan) -> None:
        self._plan = plan
        self._routes.forget()

    @property
    def pool(self) -> Any:
        """The graph memory pool this runner captures into (another runner may share it)."""
        return self._capturer.pool

    @property
    def step_timing(self) -> dict[str, Any]:
        """How steps are timed: every step on the host (CPU), 1 in ``time_every`` with CUDA events."""
        return step_timing(isinstance(self._clock, CudaClock), self._clock.every)

    # -- capture ------------------------------------------------------------
    def capture(self) -> CaptureReport:
        """Capture every planned size, largest first into one shared pool (``replayscope.runner.capture``)."""
        if self.backend == "disabled":
            return self.report
        self._contract.bind(self._buffers.allocate(self.max_bs, self.device))
        self._routes.forget()
        self.plan = self._capturer.capture(self.plan, self._buffers)
        return self.report

    # -- run ----------------------------------------------------------------
    def decide(self, shape: BatchShape) -> Decision:
        return dispatch(shape, self.plan)

    def step(self, inputs: Mapping[str, torch.Tensor], *, stage: str | None = None,
             reason: str | None = None, num_tokens: int | None = None,
             adapters: frozenset[int] = frozenset(), grammar_switched: bool = False) -> Any:
        """Run one batch: decide, then replay, pad or fall back. Returns the real rows' outputs.

        ``reason`` forces eager with a reason only the caller can see: one of
        ``replayscope.contract.wire.REASONS`` or free text, recorded as ``custom:<text>``.

        The inputs are checked once: a plain step seen before takes its route after the fast
        match; any other step goes through the fast match once and, only when that fails, the
        slow explanation (``replayscope.runner.inputs``).
        """
        stage = stage or self.stage
        if reason is None and not adapters and not grammar_switched:
            try:                                  # _plain_route, inlined: one call less per step
                route = self._plain_routes.get((stage, inputs[self._first_input].shape[self._first_dim]))
            except (KeyError, IndexError, AttributeError, TypeError):   # the explanation says what is wrong
                route = None
            if route is not None and fits(inputs, route.expected, route.cuda_index):
                return self._run(route, inputs, num_tokens, None)
            # a known route the inputs did not fit: the explanation alone is left; no route yet: both halves
            raw_bs, query_len = self._explained(inputs, stage) if route is not None else self._checked(inputs, stage)
            route = self._route(stage, raw_bs, self.decide(BatchShape(stage, raw_bs, query_len)))
            if query_len == self._plan.query_len:
                self._routes.remember_plain(stage, raw_bs, route)   # later steps like this one take _plain_route
            return self._run(route, inputs, num_tokens, None)
        if reason is not None and reason not in wire.REASONS:
            try:
                reason = wire.custom_reason(reason)
            except wire.WireError as error:
                raise ReplayscopeError(f"step(reason=...): {error.message}") from None
        raw_bs, query_len = self._checked(inputs, stage)
        route = self._route(stage, raw_bs, self.decide(
            BatchShape(stage, raw_bs, query_len, adapters, grammar_switched, reason)))
        return self._run(route, inputs, num_tokens, None)

    def run(self, decision: Decision, inputs: Mapping[str, torch.Tensor], *, stage: str | None = None,
            num_tokens: int | None = None, eager_fn: Callable[..., Any] | None = None) -> Any:
        """Execute a decision and record the step; ``eager_fn`` replaces the step when eager."""
        return self._run(self._route(stage or self.stage, batch_size(inputs, self.inputs), decision),
                         inputs, num_tokens, eager_fn)

    def check_inputs(self, inputs: Mapping[str, torch.Tensor], *, allow_query_len_change: bool = False) -> int:
        """Explain, by name, how ``inputs`` break the static-input contract.

        Returns the tokens per request for dispatch: the plan's ``query_len`` when the
        row shapes match the static inputs. A verify stage may see other row shapes (a
        different speculative width): then -1, which dispatch sends eager as spec_shape;
        a prefill is eager whatever its shape.
        """
        return self._contract.explain(inputs, allow_other_width=allow_query_len_change,
                                      query_len=self.plan.query_len)[1]

    def _plain_route(self, inputs: Mapping[str, torch.Tensor], stage: str) -> Route | None:
        """The route of plain steps of this stage and the inputs' batch size, if one was made
        (``step`` does the same inline; the benchmarks measure it through this).

        Reads only what the step needs anyway (its first input's shape, one dictionary); the
        caller matches the inputs against it before the launch (a bad input must change nothing)."""
        try:
            return self._plain_routes.get((stage, inputs[self._first_input].shape[self._first_dim]))
        except (KeyError, IndexError, AttributeError, TypeError):   # the explanation says what is wrong
            return None

    def _checked(self, inputs: Mapping[str, torch.Tensor], stage: str) -> tuple[int, int]:
        """(batch size, tokens per request): the fast match once, the explanation only if it fails."""
        raw_bs = self._contract.fast_batch_size(inputs)
        if raw_bs is not None:
            return raw_bs, self._plan.query_len
        return self._explained(inputs, stage)

    def _explained(self, inputs: Mapping[str, torch.Tensor], stage: str) -> tuple[int, int]:
        return self._contract.explain(inputs, allow_other_width=stage in OTHER_WIDTH_STAGES,
                                      query_len=self._plan.query_len)

    def _route(self, stage: str, raw_bs: int, decision: Decision) -> Route:
        if decision.graph_bs is not None:
            route = self._kept_routes.get((stage, raw_bs, decision))
            if route is not None:
                return route
        return self._routes.make(stage, raw_bs, decision, self._plan.query_len, self._clock)

    def _run(self, route: Route, inputs: Mapping[str, torch.Tensor], num_tokens: int | None,
             eager_fn: Callable[..., Any] | None) -> Any:
        record = self._record                    # the emitter's step_fields; None without an emitter
        if record is not None:                   # timed: the first step of its key, then 1 in `every`
            clock = self._clock
            timing = clock.record_start() if route.count[0] % clock.every == 0 else None
        raw_bs, graph_bs = route.raw_bs, route.graph_bs
        if route.call is None:
            outputs = (eager_fn or self.step_fn)(**inputs)
        else:
            for name, rows in route.copies:
                rows.copy_(inputs[name], non_blocking=True)
            if graph_bs > raw_bs and self._dirty_until > raw_bs:   # rows a larger batch left behind
                self._buffers.fill_pad_rows(raw_bs, min(self._dirty_until, graph_bs))
            outputs = route.call()
            # after the launch: rows at and above _dirty_until hold pad values
            if graph_bs > raw_bs:
                if self._dirty_until <= graph_bs:
                    self._dirty_until = raw_bs
            elif raw_bs > self._dirty_until:
                self._dirty_until = raw_bs
            if route.outputs is not None:
                outputs = route.outputs
            elif route.slice_rows:
                outputs = slice_rows(outputs, raw_bs)
        if record is not None:
            route.count[0] += 1
            record(route.event if num_tokens is None else route.event_with(num_tokens),
                   None if timing is None else clock.stop(timing))
        if self.parity_every and route.call is not None:
            self._replays += 1
            if self._replays % self.parity_every == 0:
                self._check_parity(graph_bs, inputs, outputs, eager_fn)
        return outputs

    _python_step, _python_run = step, _run      # the compiled core hands the steps it does not take to these

    def _check_parity(self, graph_bs: int, inputs: Mapping[str, torch.Tensor], outputs: Any,
                      eager_fn: Callable[..., Any] | None) -> None:
        """Run the same inputs eagerly and record how far the graph's outputs are (``replayscope.runner.parity``)."""
        fields = divergence(outputs, lambda: (eager_fn or self.step_fn)(**inputs))
        if fields is not None:
            self._emit("parity", graph_bs=graph_bs, **fields, tolerance=self.parity_tolerance)

    # -- telemetry ------------------------------------------------------------
    def _emit(self, kind: str, **fields: Any) -> None:
        if self.emitter is not None:
            self.emitter.emit(kind, **fields)


if COMPILED is not None:
    class CompiledGraphRunner(GraphRunner):
        """``GraphRunner`` with ``step`` and ``_run`` compiled (``_runcore``): a plain step of a route seen
        before, with inputs that fit and parity checks off, runs in C; any other step, before anything
        is done, goes to ``_python_step`` / ``_python_run``, the same steps in Python."""

        step_core = "compiled"
        step = COMPILED.RunnerState.compiled_step
        _run = COMPILED.RunnerState.compiled_run
else:
    CompiledGraphRunner = None    # type: ignore[assignment,misc]
