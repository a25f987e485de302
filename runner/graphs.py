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
8; 1 times every step), read later without synchronising; the other steps carry no duration.

Capture never kills the process: a failed compile falls back to
capture without compile, a failed capture drops that size, and if nothing captures
the runner runs eager and says so; each rung is a ``degrade`` event.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch

from runner import wire
from runner.dispatch import BatchShape, Decision, dispatch
from runner.errors import ReplayscopeError
from runner.plan import BACKENDS, CapturePlan
from runner.progress import Progress
from runner.timing import CUDA_TIME_EVERY, CudaClock, HostClock, step_timing

_HUGE = 3.0e38   # divergence past float32's range is reported as this, keeping the wire finite

_capture_state = threading.local()


def capturing_size() -> int | None:
    """The batch size being captured on this thread right now, else None."""
    return getattr(_capture_state, "size", None)


@dataclass(frozen=True)
class StaticInput:
    """One input of the step: its shape per batch row, dtype, and the value pad rows hold.

    ``row_shape`` excludes the batch dimension, which sits at ``batch_dim``.
    """

    name: str
    row_shape: tuple[int, ...]
    dtype: torch.dtype
    pad_value: int | float = 0
    batch_dim: int = 0

    def full_shape(self, bs: int) -> tuple[int, ...]:
        shape = list(self.row_shape)
        shape.insert(self.batch_dim, bs)
        return tuple(shape)


def resolve_backend(backend: str, device: torch.device) -> str:
    if backend not in BACKENDS:
        raise ReplayscopeError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "cuda" if device.type == "cuda" else "static"
    if backend == "cuda" and device.type != "cuda":
        raise ReplayscopeError("backend 'cuda' needs a CUDA device; use 'static' or 'auto' on CPU")
    return backend


@dataclass
class _Captured:
    size: int
    call: Callable[[], Any]          # replays (graph) or runs the step on the static views
    outputs: Any                     # the static outputs that ``call`` fills
    graph: Any = None


@dataclass(eq=False, slots=True)
class _Route:
    """How steps of one stage and batch size run under one decision, worked out on the first
    such step. After a synchronise the host's caches are cold, and every object a step touches
    before its launch delays the launch (docs/gpu-results.md): a step reads this one object,
    its inputs and the static rows before the launch, and does its bookkeeping after it."""

    stage: str
    raw_bs: int
    decision: Decision
    expected: tuple[tuple[str, torch.Size, torch.dtype], ...]   # the inputs that keep the contract
    graph_bs: int | None                            # the captured size replayed; None when eager
    count: list[int]                                # steps of (stage, mode, batch size) so far: the clock's counter
    num_tokens: int                                 # tokens in the batch when the caller gives none
    padded_tokens: int
    copies: tuple[tuple[str, torch.Tensor], ...] = ()   # (input, the static rows it is copied into)
    call: Callable[[], Any] | None = None           # the replay or static stand-in; None when eager
    outputs: Any = None                             # what a graph's replay returns (its static rows)
    slice_rows: bool = False                        # a stand-in's fresh outputs are cut to raw_bs rows


@dataclass
class CaptureReport:
    captured: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)
    pool_bytes: int | None = None
    total_s: float = 0.0


def _as_tuple(outputs: Any) -> tuple[torch.Tensor, ...]:
    return outputs if isinstance(outputs, tuple) else (outputs,)


def _slice_rows(outputs: Any, rows: int) -> Any:
    if isinstance(outputs, tuple):
        return tuple(o[:rows] for o in outputs)
    return outputs[:rows]


def graph_pool_bytes(pool: Any) -> int | None:
    """Bytes reserved by one graph memory pool, from the allocator's snapshot."""
    try:
        segments = torch.cuda.memory_snapshot()
    except Exception:
        return None
    key = tuple(pool) if pool is not None else None
    return sum(s["total_size"] for s in segments if tuple(s.get("segment_pool_id", ())) == key)


class GraphRunner:
    """Captures ``step_fn`` per batch size of ``plan`` and runs each batch the best way.

    ``step_fn(**inputs)`` must return a tensor or a tuple of tensors whose first
    dimension is the batch, and must be capturable: static shapes, no host sync.
    """

    def __init__(self, step_fn: Callable[..., Any], inputs: Sequence[StaticInput], plan: CapturePlan, *,
                 backend: str = "auto", device: torch.device | str | None = None,
                 emitter: Any = None, stage: str = "decode", max_bs: int | None = None,
                 parity_every: int = 0, parity_tolerance: float | None = None,
                 warmup_iters: int = 2, pool: Any = None, progress: bool = True,
                 time_every: int = CUDA_TIME_EVERY):
        if stage not in wire.CAPTURE_STAGES:
            raise ReplayscopeError(f"stage must be one of {', '.join(wire.CAPTURE_STAGES)}, got {stage!r}")
        if not inputs:
            raise ReplayscopeError("a graph runner needs at least one StaticInput")
        if type(time_every) is not int or time_every < 1:
            raise ReplayscopeError(f"time_every must be a whole number >= 1, got {time_every!r}")
        names = [i.name for i in inputs]
        if len(set(names)) != len(names):
            raise ReplayscopeError(f"static input names must be unique: {names}")
        self.device = torch.device(device) if device is not None else (
            torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
        self.backend = resolve_backend(backend, self.device)
        self.max_bs = plan.max_size if max_bs is None else max_bs
        if plan.max_size > self.max_bs:
            raise ReplayscopeError(f"capture size {plan.max_size} is larger than the static buffers "
                                   f"(max_bs={self.max_bs}); raise max_bs or drop that size")
        self.step_fn = step_fn
        self.inputs = tuple(inputs)
        self.plan = plan.disabled() if self.backend == "disabled" else plan
        self.emitter = emitter
        self.stage = stage
        self.parity_every = parity_every
        self.parity_tolerance = parity_tolerance
        self.warmup_iters = warmup_iters
        self.progress = progress
        self.on_cuda = self.device.type == "cuda" and self.backend in ("cuda", "compile")
        self.pool = pool if pool is not None else (torch.cuda.graph_pool_handle() if self.on_cuda else None)
        self._capture_stream = torch.cuda.Stream(self.device) if self.on_cuda else None
        self._graphs: dict[int, _Captured] = {}
        self._buffers: dict[str, torch.Tensor] = {}
        self._dirty_until = 0     # rows at and above this index hold pad values
        self._replays = 0
        # Steps on CUDA are timed by events on 1 step in ``time_every`` per (stage, mode, batch
        # size); the others carry no duration (runner.timing says why). CPU steps: every one.
        self._clock = CudaClock(self.device.index, time_every) if self.device.type == "cuda" else HostClock()
        # Per-size views and (name, shape, dtype) of the inputs, made once: the step path only
        # looks them up. The device inputs must be on is known up front, except plain "cuda"
        # (the current device at capture).
        self._expected: dict[int, tuple[tuple[str, torch.Size, torch.dtype], ...]] = {}
        self._cuda_index = self.device.index if self.device.type == "cuda" else None
        self._device_known = self.device.type == "cpu" or self._cuda_index is not None
        self._first_input, self._first_dim = self.inputs[0].name, self.inputs[0].batch_dim
        self._pad_views: dict[tuple[int, int], tuple[tuple[torch.Tensor, int | float], ...]] = {}
        self.report = CaptureReport()

    @property
    def plan(self) -> CapturePlan:
        return self._plan

    @plan.setter
    def plan(self, plan: CapturePlan) -> None:
        self._plan = plan
        self._forget_routes()

    def _forget_routes(self) -> None:
        """Routes hold decisions (made under the plan) and views (of the buffers): made again after either changes."""
        self._routes: dict[tuple[str, int, Decision], _Route] = {}
        self._plain_routes: dict[tuple[str, int], _Route] = {}   # steps with no reason, adapters or grammar switch

    @property
    def step_timing(self) -> dict[str, Any]:
        """How steps are timed: every step on the host (CPU), 1 in ``time_every`` with CUDA events."""
        return step_timing(isinstance(self._clock, CudaClock), self._clock.every)

    # -- capture ------------------------------------------------------------
    def capture(self) -> CaptureReport:
        """Capture every planned size, largest first into one shared pool."""
        if self.backend == "disabled":
            return self.report
        self._allocate_buffers()
        started = time.perf_counter()
        with Progress(self._capture_label(), len(self.plan.sizes), enabled=self.progress) as bar:
            for size in reversed(self.plan.sizes):
                self._capture_size(size, bar)
                status = "failed" if size in self.report.failed else f"{self.report.seconds[size]:.2f}s"
                bar.update(note=f"bs={size} {status}")
        self.report.total_s = time.perf_counter() - started
        self.report.pool_bytes = graph_pool_bytes(self.pool) if self.on_cuda else None
        self._emit("phase", phase="capture" if self.stage == "decode" else f"capture_{self.stage}",
                   duration_s=self.report.total_s, start_ts=time.time() - self.report.total_s,
                   mem_bytes=self.report.pool_bytes)
        if not self.plan.captured:
            self._emit("degrade", **{"from": self.backend, "to": "eager",
                                     "error": f"no batch size captured for {self.stage}; the run goes eager"})
        return self.report

    def _allocate_buffers(self) -> None:
        for spec in self.inputs:
            self._buffers[spec.name] = torch.full(spec.full_shape(self.max_bs), spec.pad_value,
                                                  dtype=spec.dtype, device=self.device)
        first = self._buffers[self.inputs[0].name]
        self._cuda_index = first.get_device() if first.is_cuda else None
        self._device_known = first.is_cpu or first.is_cuda
        self._pad_views.clear()
        self._forget_routes()

    def _views(self, size: int) -> dict[str, torch.Tensor]:
        return {s.name: self._buffers[s.name].narrow(s.batch_dim, 0, size) for s in self.inputs}

    def _capture_label(self) -> str:
        if self.backend == "compile":
            what = "Compiling and capturing CUDA graphs" if self.on_cuda else "Compiling"
        else:
            what = "Capturing CUDA graphs" if self.on_cuda else "Capturing static stand-ins"
        return f"{what} ({self.stage})"

    def _capture_size(self, size: int, bar: Progress) -> None:
        views = self._views(size)
        before = graph_pool_bytes(self.pool) if self.on_cuda else None
        started = time.perf_counter()
        fn = self.step_fn
        variant = "static" if not self.on_cuda else "cuda"
        _capture_state.size = size
        try:
            if self.backend == "compile":
                bar.describe(f"bs={size} compiling")
                fn, variant = self._compiled(size, views)
            bar.describe(f"bs={size} capturing")
            if self.on_cuda:
                captured = self._capture_cuda(size, fn, views)
            else:
                outputs = fn(**views)          # a dry run proves the static-buffer contract
                captured = _Captured(size, lambda f=fn, v=views: f(**v), outputs)
            self._check_outputs(size, captured.outputs)
        except ReplayscopeError:
            raise
        except Exception as error:  # a capture failure drops this size, never the process
            self._restore_stream()
            self.plan = self.plan.with_failed(size)
            message = _describe(error)
            self.report.failed[size] = message
            self.report.seconds[size] = time.perf_counter() - started
            self._emit("capture", graph_bs=size, stage=self.stage, duration_s=self.report.seconds[size],
                       pool_bytes=before, pool_delta_bytes=0, status="failed", error=message, variant=variant)
            self._emit("degrade", **{"from": variant, "to": "eager", "graph_bs": size, "error": message})
            return
        finally:
            _capture_state.size = None
        self._graphs[size] = captured
        self.report.captured.append(size)
        self.report.seconds[size] = time.perf_counter() - started
        after = graph_pool_bytes(self.pool) if self.on_cuda else None
        self._emit("capture", graph_bs=size, stage=self.stage, duration_s=self.report.seconds[size],
                   pool_bytes=after, pool_delta_bytes=None if after is None else after - (before or 0),
                   status="ok", variant=variant)

    def _compiled(self, size: int, views: dict[str, torch.Tensor]) -> tuple[Callable, str]:
        """torch.compile for this size; on failure, degrade to the plain step."""
        _raise_recompile_limit(len(self.plan.sizes))
        started = time.perf_counter()
        try:
            compiled = torch.compile(self.step_fn, dynamic=False)
            compiled(**views)  # compiles now, not inside capture
            self._emit("phase", phase="compile", duration_s=time.perf_counter() - started,
                       start_ts=time.time() - (time.perf_counter() - started))
            return compiled, "compile+cuda" if self.on_cuda else "compile"
        except Exception as error:
            message = _describe(error)
            to = "cuda" if self.on_cuda else "static"
            self._emit("degrade", **{"from": "compile", "to": to, "graph_bs": size, "error": message})
            return self.step_fn, to

    def _capture_cuda(self, size: int, fn: Callable, views: dict[str, torch.Tensor]) -> _Captured:
        current = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(current)
        with torch.cuda.stream(side):          # warm up off the default stream, as the docs say
            for _ in range(self.warmup_iters):
                fn(**views)
        current.wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, stream=self._capture_stream):
            outputs = fn(**views)
        torch.cuda.synchronize()
        return _Captured(size, graph.replay, outputs, graph)

    def _restore_stream(self) -> None:
        # A failed capture leaves the side stream current (torch/cuda/graphs.py); the
        # aborted capture may also leave its stream and pool half-registered with the
        # allocator, so later captures get a fresh stream and pool.
        if self.on_cuda:
            torch.cuda.set_stream(torch.cuda.default_stream(self.device))
            with contextlib.suppress(Exception):
                torch.cuda.synchronize()
            self._capture_stream = torch.cuda.Stream(self.device)
            self.pool = torch.cuda.graph_pool_handle()

    def _check_outputs(self, size: int, outputs: Any) -> None:
        for i, out in enumerate(_as_tuple(outputs)):
            if not isinstance(out, torch.Tensor):
                raise ReplayscopeError(f"step output {i} is {type(out).__name__}, not a tensor")
            if out.dim() == 0 or out.shape[0] != size:
                raise ReplayscopeError(
                    f"step output {i} has shape {tuple(out.shape)} for a batch of {size}: the step "
                    f"changed the batch dimension (outputs must keep the batch first)")

    # -- run ----------------------------------------------------------------
    def decide(self, shape: BatchShape) -> Decision:
        return dispatch(shape, self.plan)

    def step(self, inputs: Mapping[str, torch.Tensor], *, stage: str | None = None,
             reason: str | None = None, num_tokens: int | None = None,
             adapters: frozenset[int] = frozenset(), grammar_switched: bool = False) -> Any:
        """Run one batch: decide, then replay, pad or fall back. Returns the real rows' outputs.

        ``reason`` forces eager with a reason only the caller can see: one of
        ``runner.wire.REASONS`` or free text, recorded as ``custom:<text>``.
        """
        stage = stage or self.stage
        plain = reason is None and not adapters and not grammar_switched
        if plain:
            route = self._plain_route(inputs, stage)
            if route is not None:
                return self._run(route, inputs, num_tokens, None)
        elif reason is not None and reason not in wire.REASONS:
            try:
                reason = wire.custom_reason(reason)
            except wire.WireError as error:
                raise ReplayscopeError(f"step(reason=...): {error.message}") from None
        raw_bs, query_len = self._checked(inputs, stage)
        route = self._route(stage, raw_bs, self.decide(
            BatchShape(stage, raw_bs, query_len, adapters, grammar_switched, reason)))
        if plain and query_len == self._plan.query_len:
            self._plain_routes[(stage, raw_bs)] = route   # later steps like this one take _plain_route
        return self._run(route, inputs, num_tokens, None)

    def run(self, decision: Decision, inputs: Mapping[str, torch.Tensor], *, stage: str | None = None,
            num_tokens: int | None = None, eager_fn: Callable[..., Any] | None = None) -> Any:
        """Execute a decision and record the step; ``eager_fn`` replaces the step when eager."""
        return self._run(self._route(stage or self.stage, self._batch_size(inputs), decision),
                         inputs, num_tokens, eager_fn)

    def _plain_route(self, inputs: Mapping[str, torch.Tensor], stage: str) -> _Route | None:
        """The route of a step seen before whose inputs keep the contract exactly, else None.

        Attribute reads and compares only, on objects the step needs anyway (the check is
        before the launch: a bad input must change nothing)."""
        try:
            route = self._plain_routes.get((stage, inputs[self._first_input].shape[self._first_dim]))
        except (KeyError, IndexError, AttributeError, TypeError):   # check_inputs says what is wrong
            return None
        if route is None or len(inputs) != len(route.expected) or not self._match(inputs, route.expected):
            return None
        return route

    def _route(self, stage: str, raw_bs: int, decision: Decision) -> _Route:
        """Replays' routes are kept (a few per stage and size); an eager one is made each time,
        since a caller's reasons are free text (plain eager steps keep theirs in ``_plain_routes``)."""
        if decision.graph_bs is None:
            return self._make_route(stage, raw_bs, decision)
        route = self._routes.get((stage, raw_bs, decision))
        if route is None:
            route = self._routes[(stage, raw_bs, decision)] = self._make_route(stage, raw_bs, decision)
        return route

    def _make_route(self, stage: str, raw_bs: int, decision: Decision) -> _Route:
        query_len, graph_bs = self._plan.query_len, decision.graph_bs
        route = _Route(stage, raw_bs, decision, self._expected_inputs(raw_bs), graph_bs,
                       self._clock.counter((stage, decision.mode, raw_bs)),
                       raw_bs * query_len, 0 if graph_bs is None else (graph_bs - raw_bs) * query_len)
        if graph_bs is not None:
            if not self._buffers:
                raise ReplayscopeError("call capture() before the first step")
            captured = self._graphs[graph_bs]
            route.copies = tuple((s.name, self._buffers[s.name].narrow(s.batch_dim, 0, raw_bs)) for s in self.inputs)
            route.call = captured.call
            if captured.graph is None:           # the static stand-in returns fresh outputs
                route.slice_rows = raw_bs != graph_bs
            else:                                # a graph fills its static outputs
                route.outputs = captured.outputs if raw_bs == graph_bs else _slice_rows(captured.outputs, raw_bs)
        return route

    def _run(self, route: _Route, inputs: Mapping[str, torch.Tensor], num_tokens: int | None,
             eager_fn: Callable[..., Any] | None) -> Any:
        emitter = self.emitter
        if emitter is not None:                  # timed: the first step of its key, then 1 in `every`
            clock = self._clock
            timing = clock.record_start() if route.count[0] % clock.every == 0 else None
        raw_bs, graph_bs = route.raw_bs, route.graph_bs
        if route.call is None:
            outputs = (eager_fn or self.step_fn)(**inputs)
        else:
            for name, rows in route.copies:
                rows.copy_(inputs[name], non_blocking=True)
            if graph_bs > raw_bs and self._dirty_until > raw_bs:   # rows a larger batch left behind
                self._fill_pad_rows(raw_bs, min(self._dirty_until, graph_bs))
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
                outputs = _slice_rows(outputs, raw_bs)
        if emitter is not None:
            route.count[0] += 1
            decision = route.decision
            emitter.step(route.stage, decision.mode, raw_bs, graph_bs,
                         route.num_tokens if num_tokens is None else num_tokens, route.padded_tokens,
                         decision.reason, self._clock.stop(timing))
        if self.parity_every and route.call is not None:
            self._replays += 1
            if self._replays % self.parity_every == 0:
                self._check_parity(graph_bs, inputs, outputs, eager_fn)
        return outputs

    def _fill_pad_rows(self, start: int, end: int) -> None:
        for view, value in self._pad_views.get((start, end)) or self._make_pad_views(start, end):
            view.fill_(value)

    def _make_pad_views(self, start: int, end: int) -> tuple[tuple[torch.Tensor, int | float], ...]:
        views = tuple((self._buffers[s.name].narrow(s.batch_dim, start, end - start), s.pad_value)
                      for s in self.inputs)
        self._pad_views[(start, end)] = views
        return views

    def _checked(self, inputs: Mapping[str, torch.Tensor], stage: str) -> tuple[int, int]:
        """(batch size, tokens per request) of inputs that keep the static-input contract.

        The common case (exactly the static inputs' names, dtypes, device and shapes) is
        compared with shapes made once per batch size; anything else goes through
        ``check_inputs``, which says what is wrong or allows a verify stage's other width.
        """
        raw_bs = self._exact_batch_size(inputs)
        if raw_bs is not None:
            return raw_bs, self._plan.query_len
        query_len = self.check_inputs(inputs, allow_query_len_change=stage in ("verify", "prefill", "mixed"))
        return self._batch_size(inputs), query_len

    def _exact_batch_size(self, inputs: Mapping[str, torch.Tensor]) -> int | None:
        """The batch size when ``inputs`` match the static inputs exactly (names, shapes, dtypes,
        the buffers' device), else None. On every step: attribute reads and compares only."""
        if len(inputs) != len(self.inputs):
            return None
        first = self.inputs[0]
        try:
            raw_bs = inputs[first.name].shape[first.batch_dim]
        except (KeyError, IndexError, AttributeError):   # check_inputs says what is wrong
            return None
        return raw_bs if self._match(inputs, self._expected_inputs(raw_bs)) else None

    def _match(self, inputs: Mapping[str, torch.Tensor],
               expected: tuple[tuple[str, torch.Size, torch.dtype], ...]) -> bool:
        """Each expected input is there with that shape and dtype, on the buffers' device (False on a
        device other than the CPU or a known CUDA device: ``check_inputs`` judges those)."""
        if not self._device_known:
            return False
        cuda_index = self._cuda_index
        try:
            for name, shape, dtype in expected:
                tensor = inputs[name]
                if tensor.shape != shape or tensor.dtype is not dtype or (
                        not tensor.is_cpu if cuda_index is None
                        else not tensor.is_cuda or tensor.get_device() != cuda_index):
                    return False
        except (KeyError, AttributeError):
            return False
        return True

    def _expected_inputs(self, raw_bs: int) -> tuple[tuple[str, torch.Size, torch.dtype], ...]:
        """(name, shape, dtype) of each input of a batch of ``raw_bs``, made once per size."""
        expected = self._expected.get(raw_bs)
        if expected is None:
            expected = self._expected[raw_bs] = tuple(
                (s.name, torch.Size(s.full_shape(raw_bs)), s.dtype) for s in self.inputs)
        return expected

    def _batch_size(self, inputs: Mapping[str, torch.Tensor]) -> int:
        first = self.inputs[0]
        if first.name not in inputs:
            raise ReplayscopeError(f"missing input {first.name!r}; the step takes "
                                   f"{', '.join(s.name for s in self.inputs)}")
        return _input_tensor(inputs, first).shape[first.batch_dim]

    def check_inputs(self, inputs: Mapping[str, torch.Tensor], *, allow_query_len_change: bool = False) -> int:
        """Explain, by name, how ``inputs`` break the static-input contract.

        Returns the tokens per request for dispatch: the plan's ``query_len`` when the
        row shapes match the static inputs. A verify stage may see other row shapes (a
        different speculative width): then -1, which dispatch sends eager as spec_shape;
        a prefill is eager whatever its shape.
        """
        unknown = set(inputs) - {s.name for s in self.inputs}
        if unknown:
            raise ReplayscopeError(f"unknown inputs {sorted(unknown)}; the step takes "
                                   f"{', '.join(s.name for s in self.inputs)}")
        raw_bs = self._batch_size(inputs)
        rows_match = True
        for spec in self.inputs:
            tensor = _input_tensor(inputs, spec)
            if tensor.device != self.device and not (tensor.device.type == self.device.type == "cuda"
                                                     and self.device.index is None):
                raise ReplayscopeError(f"input {spec.name!r} is on {tensor.device}, the runner's "
                                       f"static buffers are on {self.device}")
            if tensor.dtype != spec.dtype:
                raise ReplayscopeError(f"input {spec.name!r} has dtype {tensor.dtype}, expected {spec.dtype}")
            if tuple(tensor.shape) != spec.full_shape(raw_bs):
                same_rank = tensor.dim() == len(spec.row_shape) + 1 and tensor.shape[spec.batch_dim] == raw_bs
                if not (allow_query_len_change and same_rank):
                    raise ReplayscopeError(f"input {spec.name!r} has shape {tuple(tensor.shape)}, expected "
                                           f"{spec.full_shape(raw_bs)} for a batch of {raw_bs}")
                rows_match = False
        return self.plan.query_len if rows_match else -1

    # -- parity -------------------------------------------------------------
    def _check_parity(self, graph_bs: int, inputs: Mapping[str, torch.Tensor], outputs: Any,
                      eager_fn: Callable[..., Any] | None) -> None:
        """Run the same inputs eagerly and record how far the graph's outputs are."""
        graph_out = [o.detach().float().clone() for o in _as_tuple(outputs) if o.is_floating_point()]
        eager_out = [o.detach().float() for o in _as_tuple((eager_fn or self.step_fn)(**inputs))
                     if o.is_floating_point()]
        if not graph_out:
            return
        max_abs, diff_sq, norm_sq = 0.0, 0.0, 0.0
        for g, e in zip(graph_out, eager_out):
            # Masked logits are -inf on both sides: equal entries differ by 0, not NaN.
            diff = torch.where(g == e, torch.zeros_like(g), g - e).nan_to_num(posinf=_HUGE, neginf=-_HUGE)
            max_abs = max(max_abs, diff.abs().max().item())
            diff_sq += diff.norm().item() ** 2
            norm_sq += e[e.isfinite()].norm().item() ** 2
        rel = min((diff_sq / norm_sq) ** 0.5 if norm_sq > 0 else diff_sq ** 0.5, _HUGE)
        max_abs = min(max_abs, _HUGE)
        self._emit("parity", graph_bs=graph_bs, max_abs_diff=max_abs, rel_err=rel,
                   tolerance=self.parity_tolerance)

    # -- telemetry ------------------------------------------------------------
    def _emit(self, kind: str, **fields: Any) -> None:
        if self.emitter is not None:
            self.emitter.emit(kind, **fields)


def _input_tensor(inputs: Mapping[str, Any], spec: StaticInput) -> torch.Tensor:
    """``inputs[spec.name]``, refused by name when missing, not a tensor, or without a batch dimension."""
    if spec.name not in inputs:
        raise ReplayscopeError(f"missing input {spec.name!r}")
    tensor = inputs[spec.name]
    if not isinstance(tensor, torch.Tensor):
        raise ReplayscopeError(f"input {spec.name!r} is of type {type(tensor).__name__}, not a tensor")
    if tensor.dim() <= spec.batch_dim:
        expected = [str(n) for n in spec.row_shape]
        expected.insert(spec.batch_dim, "batch")
        raise ReplayscopeError(f"input {spec.name!r} has shape {tuple(tensor.shape)}, with no batch dimension; "
                               f"expected ({', '.join(expected)})")
    return tensor


def _describe(error: BaseException) -> str:
    """The error and, for CUDA's 'previous error during capture', the original cause."""
    text = f"{type(error).__name__}: {error}".strip()
    cause = error.__cause__ or error.__context__
    if cause is not None and str(cause) not in text:
        text += f" (caused by {type(cause).__name__}: {cause})"
    return text[:4000]


def _raise_recompile_limit(sizes: int) -> None:
    """torch.compile(dynamic=False) specialises per shape; past its limit it silently runs eager."""
    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name) and getattr(config, name) < sizes + 8:
            setattr(config, name, sizes + 8)
    for name in ("accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(config, name) and getattr(config, name) < 4 * (sizes + 8):
            setattr(config, name, 4 * (sizes + 8))
