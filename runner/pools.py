"""A CUDA graph memory pool's size, as the runner's capture and the tracer's read it.

Read from the caching allocator's snapshot (host-side, never synchronising the device), and
only where torch is imported and CUDA initialised: this module imports no torch, because the
tracer loads it with the process, before the program imports torch if it ever does.
"""

from __future__ import annotations

import sys
from typing import Any


def pool_bytes(pool: Any) -> int | None:
    """Bytes reserved by one graph memory pool (its segments in the allocator's snapshot);
    None, never 0, when it cannot be known: no pool, no CUDA, or a snapshot that fails."""
    torch = sys.modules.get("torch")
    if pool is None or torch is None:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None
        key = tuple(pool)
        return sum(s["total_size"] for s in torch.cuda.memory_snapshot()
                   if tuple(s.get("segment_pool_id", ())) == key)
    except Exception:  # noqa: BLE001 (an allocator that cannot say: unknown, not a failed capture)
        return None
