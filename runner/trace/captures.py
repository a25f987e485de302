"""The CUDA graphs a traced process captures: each capture's size (from a recipe's capture
context, Inductor's call, the frames that led to it, or the step it ran in), stage, time,
pool memory and outcome, as ``capture`` events; the capture phase (first capture to last).
A graph captured without a known size takes the batch of the first step that replays it.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from replayscope.contract.errors import describe_error
from replayscope.runner.pools import pool_bytes
from replayscope.runner.trace import device

# Names under which programs keep the batch size they are capturing (SGLang ``bs``, vLLM
# ``num_tokens``, most hand-written loops ``bs`` or ``batch_size``), looked up in the frames
# that led to a capture when no recipe said which size it was.
SIZE_NAMES = ("bs", "batch_size", "num_tokens", "graph_bs", "padded_bs", "capture_bs", "num_seqs")
# ... and the objects vLLM describes a captured size with: its forward context's batch descriptor,
# the model runner V2's BatchExecutionDescriptor (``desc``) and CudaGraphKey.
SIZE_HOLDERS = (("batch_descriptor", "num_tokens"), ("desc", "num_tokens"), ("cudagraph_key", "total_num_tokens"))
_STACK_DEPTH = 40


def _is_size(value: Any) -> bool:
    return type(value) is int and value >= 1


def capture_size_from_stack(frame: Any) -> int | None:
    """The batch size a program is capturing, read from the frames that led to the capture."""
    for _ in range(_STACK_DEPTH):
        if frame is None:
            break
        module = frame.f_globals.get("__name__", "") or ""
        if not (module == "torch" or module.startswith(("torch.", "replayscope.runner.trace"))):
            names = frame.f_locals
            for name in SIZE_NAMES:
                if _is_size(names.get(name)):
                    return names[name]
            for holder, attribute in SIZE_HOLDERS:
                size = getattr(names.get(holder), attribute, None)
                if _is_size(size):
                    return size
            if "capture" in frame.f_code.co_name and _is_size(names.get("size")):
                return names["size"]
        frame = frame.f_back
    return None


class _Capture:
    """One CUDA-graph capture in progress."""

    __slots__ = ("started", "started_ts", "reserved", "size", "variant", "context", "stage", "body_error")

    def __init__(self):
        self.started = time.perf_counter()
        self.started_ts = time.time()
        self.reserved = device.reserved_bytes()
        self.size: int | None = None
        self.variant = "cudagraph"
        self.context: CaptureContext | None = None
        self.stage = "decode"
        self.body_error: BaseException | None = None


class CaptureContext:
    """A recipe's capture of one size (e.g. SGLang's ``capture_one_batch_size(bs)``, vLLM's
    ``_dummy_run(num_tokens)``): the graphs captured inside are one capture event of that size,
    timed from the context's start (warm-up runs included, as the engines time it)."""

    def __init__(self, tracer: Any, size: int, stage: str, label: str):
        self.tracer = tracer
        self.size = size
        self.stage = stage
        self.label = label
        self.graphs = 0
        self.errors: list[str] = []
        self.pool_delta: int | None = None
        self.pool: Any = None
        self.started = 0.0
        self.started_ts = 0.0

    def __enter__(self) -> "CaptureContext":
        self.started, self.started_ts = time.perf_counter(), time.time()
        self.tracer.capture_contexts.append(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.tracer.capture_contexts.remove(self)
        except ValueError:
            pass
        if self.graphs == 0:
            return          # no graph captured in it: a warm-up or profile run, not a capture
        if exc is not None:
            self.errors.append(describe_error(exc))
        self.tracer.capture_context_done(self, time.perf_counter() - self.started)

    def add(self, delta: int | None, error: str | None, pool: Any) -> None:
        self.graphs += 1
        if delta is not None:
            self.pool_delta = (self.pool_delta or 0) + delta
        if error:
            self.errors.append(error)
        if pool is not None:
            self.pool = pool


class CaptureTracking:
    """The captures of ``Tracer``: hooks call ``capture_begin`` / ``capture_end`` around each
    ``torch.cuda.CUDAGraph`` capture, recipes open a ``capture_context`` per size."""

    def _reset_captures(self) -> None:
        self.ignore_captures = 0
        self.capture_contexts: list[CaptureContext] = []
        self._open: dict[int, _Capture] = {}
        self._pools: dict[tuple, int] = {}
        self.captured_sizes: tuple[int, ...] = ()
        self.captured_by_stage: dict[str, tuple[int, ...]] = {}    # capture stage -> its sizes
        self.captures = 0
        self.failed_captures = 0
        self._capture_first_ts: float | None = None
        self._capture_last_ts: float | None = None
        self._capture_mem: int | None = None
        self.engine_capture_mem: int | None = None   # the device memory an engine's capture took, as it measures it
        self._capture_phase_sent = False
        self._unsized: list[Any] = []          # graphs captured without a known size

    def capture_begin(self, graph: Any) -> None:
        if self.ignore_captures:
            return
        capture = _Capture()
        context = self.capture_contexts[-1] if self.capture_contexts else None
        recording = self.inductor_recording
        if recording is not None:
            capture.variant = "inductor re-record" if recording[1] else "inductor"
            if self.in_step and self.step_bs:
                capture.size = self.step_bs          # Inductor records the shape it is called with
        if capture.size is None and context is not None:
            capture.size, capture.context, capture.stage = context.size, context, context.stage
        if capture.size is None:
            capture.size = capture_size_from_stack(sys._getframe(2))
        if capture.size is None and self.in_step and self.step_bs:
            capture.size = self.step_bs              # the batch of the step it was captured in
        if self._capture_first_ts is None:      # the phase holds each capture as its event times it
            self._capture_first_ts = capture.context.started_ts if capture.context else capture.started_ts
        self._open[id(graph)] = capture

    def capture_body_error(self, graph: Any, error: BaseException) -> None:
        capture = self._open.get(id(graph))
        if capture is not None:
            capture.body_error = error

    def capture_end(self, graph: Any, error: BaseException | None) -> None:
        capture = self._open.pop(id(graph), None)
        if capture is None:
            return
        duration = time.perf_counter() - capture.started
        after = device.reserved_bytes()
        delta = None if after is None or capture.reserved is None else after - capture.reserved
        failure = capture.body_error or error
        message = describe_error(failure) if failure is not None else None
        pool = None
        if failure is None:
            try:
                pool = tuple(graph.pool())
            except Exception:  # noqa: BLE001
                pool = None
        self._capture_last_ts = time.time()
        if delta is not None:
            self._capture_mem = (self._capture_mem or 0) + delta
        if self.in_step:
            self.step_captures += 1
        if recording := self.inductor_recording:
            self._inductor_recorded.add(recording[0])
        if capture.context is not None:
            capture.context.add(delta, message, pool)
            if failure is None:
                graph._replayscope_bs = capture.size
            return
        if capture.size is None:
            graph._replayscope_bs = 0
            if failure is not None:
                self.warn("capture_failed", f"a CUDA graph capture of unknown batch size failed: {message}")
                self.failed_captures += 1
            else:
                graph._replayscope_pending = (capture, duration, delta, pool)
                self._unsized.append(graph)
            return
        if failure is None:
            graph._replayscope_bs = capture.size
        self._emit_capture(capture.size, capture.stage, duration, delta, pool, message,
                           self._variant(capture.variant, pool))

    def capture_context(self, size: int, stage: str = "decode", label: str = "cudagraph") -> CaptureContext:
        return CaptureContext(self, size, stage, label)

    def capture_context_done(self, context: CaptureContext, duration: float) -> None:
        self._capture_last_ts = time.time()      # the size's capture ends with its context, as timed
        error = "; ".join(dict.fromkeys(context.errors)) or None
        graphs = f", {context.graphs} graphs" if context.graphs > 1 else ""
        self._emit_capture(context.size, context.stage, duration, context.pool_delta, context.pool,
                           error, self._variant(f"{context.label}{graphs}", context.pool))

    def _variant(self, capturer: str, pool: Any) -> str:
        if pool is None:
            return capturer[:64]
        number = self._pools.setdefault(pool, len(self._pools) + 1)
        return f"{capturer}, pool {number}"[:64]

    def _emit_capture(self, size: int, stage: str, duration: float, delta: int | None, pool: Any,
                      error: str | None, variant: str) -> None:
        status = "failed" if error else "ok"
        self.captures += 1
        if error:
            self.failed_captures += 1
        else:
            if size not in self.captured_sizes:
                self.captured_sizes = tuple(sorted(self.captured_sizes + (size,)))
            sizes = self.captured_by_stage.get(stage, ())
            if size not in sizes:
                self.captured_by_stage[stage] = tuple(sorted(sizes + (size,)))
        self.emit("capture", graph_bs=size, stage=stage, duration_s=duration,
                  pool_bytes=pool_bytes(pool), pool_delta_bytes=delta, status=status, error=error,
                  variant=variant, rank=self._label())

    def _bind_unsized(self, graph: Any, size: int) -> None:
        """A graph captured without a known size takes the batch of the first step that replays it."""
        pending = graph.__dict__.pop("_replayscope_pending", None)
        if pending is None:
            return
        capture, duration, delta, pool = pending
        graph._replayscope_bs = size
        try:
            self._unsized.remove(graph)
        except ValueError:
            pass
        self._emit_capture(size, capture.stage, duration, delta, pool, None,
                           self._variant(f"{capture.variant}, size from first replay", pool))

    def _maybe_capture_phase(self, final: bool = False) -> None:
        """First capture to last, once: when a step runs without capturing, or at the end."""
        if self._capture_phase_sent or self._capture_first_ts is None or self._capture_last_ts is None:
            return
        if not final and self.step_captures:
            return
        self._capture_phase_sent = True
        self.emit("phase", phase="capture", start_ts=self._capture_first_ts,
                  duration_s=max(0.0, self._capture_last_ts - self._capture_first_ts),
                  mem_bytes=self.engine_capture_mem if self.engine_capture_mem is not None else self._capture_mem,
                  rank=self._label())
