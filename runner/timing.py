"""Step timing without device synchronisation, for the runner and the tracer.

On the CPU a step is timed on the host (``perf_counter``, every step). On CUDA a step is timed
by a pair of CUDA events recorded on the stream the step starts on and read by the emitter's
thread once the GPU has passed them (``ready``, ``seconds``, ``release``): nothing waits.

Recording events costs host time on the step's path (two driver calls, and the record after
a graph launch waits for the launch to be handed to the GPU), so on CUDA a deterministic sample
of steps is timed: the first step of each key (the runner keys by stage, mode and batch size;
the tracer by stage and batch size, since a step's mode is known only at its end) and then every
``every``-th step of that key. The other steps carry no duration (null on the wire: "not
measured"); step-time figures are means over the timed steps. ``every=1`` times every step.

torch is imported on first use: the tracer loads this module before the program imports torch.
"""

from __future__ import annotations

import time
from typing import Any, Hashable

# Default: on CUDA, time 1 step in 32 of each key (the first one included). In a host-bound loop on
# an H200's host (docs/gpu-results.md, seventh and eighth sessions) a timed step costs the host 8-10 µs
# more than an untimed one, its two event records 3.0-3.7 µs each (a record is dearer when it runs
# 1 step in N than on every step: its driver path is cold): ~0.25-0.3 µs a step at 1 in 32.
CUDA_TIME_EVERY = 32

_TORCH: Any = None


def _torch() -> Any:
    global _TORCH
    if _TORCH is None:
        import torch
        _TORCH = torch
    return _TORCH


def step_timing(cuda: bool, every: int) -> dict[str, Any]:
    """How a run's steps are timed, for its config: the clock, and 1 step in how many per key."""
    return {"clock": "cuda_events", "every": every} if cuda else {"clock": "host", "every": 1}


class CudaTiming:
    """A pair of CUDA events around one step; the emitter reads it once the GPU passed the end."""

    __slots__ = ("start", "end", "stream", "pool")

    def __init__(self, pool: list):
        torch = _torch()
        self.pool = pool
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.stream: Any = None

    def ready(self) -> bool:
        try:
            return self.end.query()
        except Exception:  # noqa: BLE001 (a CUDA error after the step: report no duration)
            return True

    def wait(self) -> None:
        try:
            self.end.synchronize()
        except Exception:  # noqa: BLE001
            pass

    def seconds(self) -> float | None:
        try:
            return self.start.elapsed_time(self.end) / 1000.0
        except Exception:  # noqa: BLE001
            return None

    def release(self) -> None:
        self.stream = None
        self.pool.append(self)


class HostClock:
    """Every step timed on the host: what a CPU step costs."""

    name = "host"
    every = 1

    @staticmethod
    def counter(key: Hashable) -> list[int]:
        return [0]                   # every step is timed: nothing is kept per key

    @staticmethod
    def record_start() -> float:
        return time.perf_counter()

    @staticmethod
    def stop(started: Any) -> float | None:
        return None if started is None else time.perf_counter() - started


class CudaClock:
    """Pooled CUDA event pairs on a sample of steps (see the module docstring).

    ``due(key)`` counts a step of ``key`` and says whether to time it (or a caller keeps the
    ``counter(key)`` cell and counts in it); ``record_start()`` records a timed step's start and
    ``stop(timing)`` its end, on the same stream, returning what the emitter takes. The
    stream is looked up by its raw handle (one C call); the Python Stream object that
    ``Event.record`` takes is made again only when the current stream changed.
    """

    name = "cuda_events"
    __slots__ = ("index", "every", "pool", "_seen", "_raw_stream", "_stream", "_raw_stream_of")

    def __init__(self, device_index: int | None = None, every: int = CUDA_TIME_EVERY):
        self.index = device_index
        self.every = every
        self.pool: list[CudaTiming] = []
        self._seen: dict[Hashable, list[int]] = {}
        self._raw_stream: int | None = None
        self._stream: Any = None
        self._raw_stream_of: Any = None

    def counter(self, key: Hashable) -> list[int]:
        """``[steps of key counted so far]``: a cell a caller may keep and count in itself (the
        runner's routes do, so that a step reads no dictionary of the clock before its launch);
        the step is one to time when the count before it is a multiple of ``every``."""
        count = self._seen.get(key)
        if count is None:
            count = self._seen[key] = [0]
        return count

    def due(self, key: Hashable) -> bool:
        """Counts the step; True when it is one to time."""
        count = self.counter(key)
        seen = count[0]
        count[0] = seen + 1
        return seen % self.every == 0

    def record_start(self) -> CudaTiming:
        stream = self.current_stream()
        timing = self.pool.pop() if self.pool else CudaTiming(self.pool)
        timing.stream = stream
        timing.start.record(stream)
        return timing

    @staticmethod
    def stop(timing: CudaTiming | None) -> CudaTiming | None:
        if timing is not None:
            timing.end.record(timing.stream)
        return timing

    @staticmethod
    def drop(timing: Any) -> None:
        """A step that did not end (it raised): its events go back to the pool."""
        if isinstance(timing, CudaTiming):
            timing.release()

    def current_stream(self) -> Any:
        if self._raw_stream_of is None:
            torch = _torch()
            self._raw_stream_of = torch._C._cuda_getCurrentRawStream
            if self.index is None:
                self.index = torch.cuda.current_device()
        raw = self._raw_stream_of(self.index)
        if raw != self._raw_stream:
            self._stream = _torch().cuda.current_stream(self.index)
            self._raw_stream = raw
        return self._stream
