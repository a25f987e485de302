"""What the tracer reads from the device: memory, step timing, whether CUDA is in use.

Nothing here synchronises the device: memory figures are the caching allocator's host-side
counters, step durations are pairs of CUDA events read by the emitter's thread once the GPU
has passed them. torch is imported on first use, never at import, because the tracer starts
with the process (before the program imports torch, if it ever does).
"""

from __future__ import annotations

import time
from typing import Any


_TORCH = None


def _torch():
    global _TORCH
    if _TORCH is None:
        import torch
        _TORCH = torch
    return _TORCH


def cuda_state() -> str:
    """ok (CUDA initialised here), uninitialized (available, never used), or unavailable."""
    torch = _torch()
    if torch.cuda.is_initialized():
        return "ok"
    try:
        return "uninitialized" if torch.cuda.is_available() else "unavailable"
    except Exception:  # noqa: BLE001 (a broken driver reads as no CUDA)
        return "unavailable"


def cuda_in_use() -> bool:
    torch = _torch()
    return torch.cuda.is_initialized()


def reserved_bytes() -> int | None:
    """Bytes the caching allocator holds on the current device; None without CUDA."""
    try:
        torch = _torch()
        if not torch.cuda.is_initialized():
            return None
        return int(torch.cuda.memory_reserved())
    except Exception:  # noqa: BLE001
        return None


def pool_bytes(pool: Any) -> int | None:
    """Bytes reserved by one graph memory pool, from the allocator's snapshot (capture time only)."""
    if pool is None:
        return None
    try:
        torch = _torch()
        if not torch.cuda.is_initialized():
            return None
        key = tuple(pool)
        return sum(s["total_size"] for s in torch.cuda.memory_snapshot()
                   if tuple(s.get("segment_pool_id", ())) == key)
    except Exception:  # noqa: BLE001
        return None


def device_name() -> str:
    try:
        torch = _torch()
        if torch.cuda.is_initialized():
            return torch.cuda.get_device_name()
    except Exception:  # noqa: BLE001
        pass
    return "cpu"


def torch_version() -> str | None:
    try:
        return _torch().__version__
    except Exception:  # noqa: BLE001
        return None


class CudaTiming:
    """A pair of CUDA events around one step, read by the emitter once the GPU passed them."""

    __slots__ = ("start", "end", "pool")

    def __init__(self, pool: list):
        torch = _torch()
        self.pool = pool
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

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
        self.pool.append(self)


def start_timing(pool: list) -> Any:
    """CUDA events on the current stream when CUDA is in use and not capturing; else host time."""
    torch = _torch()
    if torch.cuda.is_initialized() and not torch.cuda.is_current_stream_capturing():
        timing = pool.pop() if pool else CudaTiming(pool)
        timing.start.record()
        return timing
    return time.perf_counter()


def stop_timing(timing: Any) -> Any:
    if isinstance(timing, float):
        return time.perf_counter() - timing
    timing.end.record()
    return timing


def drop_timing(timing: Any) -> None:
    if isinstance(timing, CudaTiming):
        timing.release()


def allow_synchronisation() -> None:
    """At exit the emitter waits for the last step timings: lift a sync debug mode set to error."""
    try:
        torch = _torch()
        if torch.cuda.is_initialized() and torch.cuda.get_sync_debug_mode() != 0:
            torch.cuda.set_sync_debug_mode(0)
    except Exception:  # noqa: BLE001
        pass
