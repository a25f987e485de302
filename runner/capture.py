"""Capture: a step warmed up and captured per batch size, degrading instead of failing.

Sizes are captured largest first into one shared pool. Each size runs the degradation ladder:
with the ``compile`` backend torch.compile first (a failed compile falls back to capture
without it), then the capture (CUDA graph, or the static stand-in's dry run on the CPU); a
failed capture drops that size, and when no size is left the runner runs eager and says so.
Every rung is an event (``capture``, ``degrade``, ``phase``); the process never dies of it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from replayscope.runner.buffers import StaticBuffers
from replayscope.contract.errors import ReplayscopeError, describe_error
from replayscope.runner.pools import pool_bytes
from replayscope.runner.plan import CapturePlan
from replayscope.runner.progress import Progress

log = logging.getLogger(__name__)

_capture_state = threading.local()


def capturing_size() -> int | None:
    """The batch size being captured on this thread right now, else None."""
    return getattr(_capture_state, "size", None)


@dataclass
class Captured:
    size: int
    call: Callable[[], Any]          # replays (graph) or runs the step on the static views
    outputs: Any                     # the static outputs that ``call`` fills
    graph: Any = None


@dataclass
class CaptureReport:
    captured: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)
    pool_bytes: int | None = None
    total_s: float = 0.0


def as_tuple(outputs: Any) -> tuple[torch.Tensor, ...]:
    return outputs if isinstance(outputs, tuple) else (outputs,)


class Capturer:
    """Captures ``step_fn`` per size of a plan into the runner's static buffers.

    ``graphs`` holds what each captured size replays; ``report`` the sizes captured and failed
    and their seconds, across every ``capture`` call; ``pool`` the graph memory pool (a fresh one
    after a failed capture). ``emit(kind, **fields)`` records the events.
    """

    def __init__(self, step_fn: Callable[..., Any], *, device: torch.device, backend: str, stage: str,
                 warmup_iters: int, pool: Any, progress: bool, emit: Callable[..., None],
                 raise_recompile_limit: bool = False):
        self.step_fn = step_fn
        self.device = device
        self.backend = backend
        self.stage = stage
        self.warmup_iters = warmup_iters
        self.progress = progress
        self.emit = emit
        self.raise_recompile_limit = raise_recompile_limit
        self.on_cuda = device.type == "cuda" and backend in ("cuda", "compile")
        self.pool = pool if pool is not None else (torch.cuda.graph_pool_handle() if self.on_cuda else None)
        self._capture_stream = torch.cuda.Stream(device) if self.on_cuda else None
        self.graphs: dict[int, Captured] = {}
        self.report = CaptureReport()

    def capture(self, plan: CapturePlan, buffers: StaticBuffers) -> CapturePlan:
        """Capture every size of ``plan``, largest first; returns the plan with the sizes that failed."""
        if self.backend == "compile":
            self._check_recompile_limit(len(plan.sizes))
        report = self.report
        started = time.perf_counter()
        with Progress(self.label(), len(plan.sizes), enabled=self.progress) as bar:
            for size in reversed(plan.sizes):
                if not self._capture_size(size, buffers.views(size), bar):
                    plan = plan.with_failed(size)
                status = "failed" if size in report.failed else f"{report.seconds[size]:.2f}s"
                bar.update(note=f"bs={size} {status}")
        report.total_s = time.perf_counter() - started
        report.pool_bytes = pool_bytes(self.pool) if self.on_cuda else None
        self.emit("phase", phase="capture" if self.stage == "decode" else f"capture_{self.stage}",
                  duration_s=report.total_s, start_ts=time.time() - report.total_s, mem_bytes=report.pool_bytes)
        if not plan.captured:
            self.emit("degrade", **{"from": self.backend, "to": "eager",
                                    "error": f"no batch size captured for {self.stage}; the run goes eager"})
        return plan

    def label(self) -> str:
        if self.backend == "compile":
            what = "Compiling and capturing CUDA graphs" if self.on_cuda else "Compiling"
        else:
            what = "Capturing CUDA graphs" if self.on_cuda else "Capturing static stand-ins"
        return f"{what} ({self.stage})"

    def _capture_size(self, size: int, views: dict[str, torch.Tensor], bar: Progress) -> bool:
        """One size down the ladder; False when it failed (the size is dropped, the run goes on)."""
        report = self.report
        before = pool_bytes(self.pool) if self.on_cuda else None
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
                captured = Captured(size, lambda f=fn, v=views: f(**v), outputs)
            _check_outputs(size, captured.outputs)
        except ReplayscopeError:
            raise
        except Exception as error:  # a capture failure drops this size, never the process
            self._restore_stream()
            message = describe_error(error)
            report.failed[size] = message
            report.seconds[size] = time.perf_counter() - started
            self.emit("capture", graph_bs=size, stage=self.stage, duration_s=report.seconds[size],
                      pool_bytes=before, pool_delta_bytes=0, status="failed", error=message, variant=variant)
            self.emit("degrade", **{"from": variant, "to": "eager", "graph_bs": size, "error": message})
            return False
        finally:
            _capture_state.size = None
        self.graphs[size] = captured
        report.captured.append(size)
        report.seconds[size] = time.perf_counter() - started
        after = pool_bytes(self.pool) if self.on_cuda else None
        self.emit("capture", graph_bs=size, stage=self.stage, duration_s=report.seconds[size],
                  pool_bytes=after, pool_delta_bytes=None if after is None else after - (before or 0),
                  status="ok", variant=variant)
        return True

    def _compiled(self, size: int, views: dict[str, torch.Tensor]) -> tuple[Callable, str]:
        """torch.compile for this size; on failure, degrade to the plain step."""
        started = time.perf_counter()
        try:
            compiled = torch.compile(self.step_fn, dynamic=False)
            compiled(**views)  # compiles now, not inside capture
            self.emit("phase", phase="compile", duration_s=time.perf_counter() - started,
                      start_ts=time.time() - (time.perf_counter() - started))
            return compiled, "compile+cuda" if self.on_cuda else "compile"
        except Exception as error:
            message = describe_error(error)
            to = "cuda" if self.on_cuda else "static"
            self.emit("degrade", **{"from": "compile", "to": to, "graph_bs": size, "error": message})
            return self.step_fn, to

    def _capture_cuda(self, size: int, fn: Callable, views: dict[str, torch.Tensor]) -> Captured:
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
        return Captured(size, graph.replay, outputs, graph)

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

    def _check_recompile_limit(self, sizes: int) -> None:
        """torch.compile(dynamic=False) specialises per shape, and past Dynamo's recompile limit it
        runs the step uncompiled, saying so only in its own log. The limit is a setting of the
        whole process: raised only when the caller asked (``raise_recompile_limit``), and logged."""
        if self.raise_recompile_limit:
            changed = raise_dynamo_limits(sizes)
            if changed:
                log.warning("replayscope raised torch._dynamo.config %s to compile %d batch sizes",
                            ", ".join(changed), sizes)
            return
        limit = dynamo_recompile_limit()
        if limit is not None and limit < sizes:
            log.warning("torch._dynamo.config.recompile_limit is %d, below the %d batch sizes to compile: "
                        "Dynamo runs the sizes past it uncompiled; raise it, or pass raise_recompile_limit=True",
                        limit, sizes)


def dynamo_recompile_limit() -> int | None:
    """Dynamo's recompile limit (``cache_size_limit`` in older torch), None when it has neither."""
    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name):
            return getattr(config, name)
    return None


def raise_dynamo_limits(sizes: int) -> list[str]:
    """Dynamo's limits raised to hold ``sizes`` specialisations and some; returns what changed,
    as ``name old -> new`` (the newer and older names are one setting in recent torch)."""
    config = torch._dynamo.config
    changed = []
    for names, wanted in ((("recompile_limit", "cache_size_limit"), sizes + 8),
                          (("accumulated_recompile_limit", "accumulated_cache_size_limit"), 4 * (sizes + 8))):
        for name in names:
            if hasattr(config, name) and getattr(config, name) < wanted:
                changed.append(f"{name} {getattr(config, name)} -> {wanted}")
                setattr(config, name, wanted)
    return changed


def _check_outputs(size: int, outputs: Any) -> None:
    for i, out in enumerate(as_tuple(outputs)):
        if not isinstance(out, torch.Tensor):
            raise ReplayscopeError(f"step output {i} is {type(out).__name__}, not a tensor")
        if out.dim() == 0 or out.shape[0] != size:
            raise ReplayscopeError(
                f"step output {i} has shape {tuple(out.shape)} for a batch of {size}: the step "
                f"changed the batch dimension (outputs must keep the batch first)")
