"""What the tracer reads from the device: memory, step timing, whether CUDA is in use.

Nothing here synchronises the device: memory figures are the caching allocator's host-side
counters (step durations: ``replayscope.runner.timing``, CUDA events read by the emitter's thread once the
GPU has passed them). torch is imported on first use, never at import, because the tracer starts
with the process (before the program imports torch, if it ever does).
"""

from __future__ import annotations

import sys
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


_IS_INITIALIZED: Any = None      # torch.cuda.is_initialized, once torch is imported (every step asks)


def cuda_in_use() -> bool:
    """Whether this process has initialised CUDA (never imports torch to find out)."""
    global _IS_INITIALIZED
    is_initialized = _IS_INITIALIZED
    try:
        if is_initialized is None:
            torch = sys.modules.get("torch")
            if torch is None:
                return False
            is_initialized = _IS_INITIALIZED = torch.cuda.is_initialized
        return is_initialized()
    except Exception:  # noqa: BLE001 (torch half-imported)
        return False


def reserved_bytes() -> int | None:
    """Bytes the caching allocator holds on the current device; None without CUDA."""
    try:
        torch = _torch()
        if not torch.cuda.is_initialized():
            return None
        return int(torch.cuda.memory_reserved())
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


def capturing() -> bool:
    """Whether the current stream is capturing a CUDA graph (no event may be recorded on it then)."""
    try:
        return bool(_torch().cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001 (cannot tell: take it as capturing, and record nothing)
        return True


def allow_synchronisation() -> None:
    """At exit the emitter waits for the last step timings: lift a sync debug mode set to error."""
    try:
        torch = _torch()
        if torch.cuda.is_initialized() and torch.cuda.get_sync_debug_mode() != 0:
            torch.cuda.set_sync_debug_mode(0)
    except Exception:  # noqa: BLE001
        pass


def free_bytes() -> int | None:
    """The device's free memory (``cudaMemGetInfo``, no synchronisation): what vLLM measures its
    capture's memory with. None without CUDA."""
    try:
        torch = _torch()
        if not torch.cuda.is_initialized():
            return None
        return int(torch.cuda.mem_get_info()[0])
    except Exception:  # noqa: BLE001
        return None


def free_bytes_emptied() -> int | None:
    """The device's free memory after handing the caching allocator's unused blocks back
    (``torch.cuda.empty_cache`` then ``cudaMemGetInfo``): what SGLang measures its capture passes
    with (``get_available_gpu_memory``, which empties the cache itself right before and after
    building a graph runner). None without CUDA."""
    try:
        torch = _torch()
        if not torch.cuda.is_initialized():
            return None
        torch.cuda.empty_cache()
        return int(torch.cuda.mem_get_info()[0])
    except Exception:  # noqa: BLE001
        return None
