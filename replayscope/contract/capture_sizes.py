"""Capture sizes as the runner takes them and the advisor describes them: the runner's default
list, the ``--capture-sizes`` syntax, the largest size (torch-free: both sides use them)."""

from __future__ import annotations

from replayscope.contract.errors import ReplayscopeError


# The largest batch the runner captures or holds static buffers for (--max-bs, --capture-sizes):
# vLLM's largest default capture size is 512, SGLang's 160; beyond this a typo (99999999)
# would allocate gigabytes of buffers before the first step.
MAX_CAPTURE_SIZE = 4096


def default_capture_sizes(max_bs: int) -> tuple[int, ...]:
    """Like the engines: 1, 2, 4, 8, then every 8 up to ``max_bs`` (and ``max_bs`` itself)."""
    if max_bs < 1:
        raise ReplayscopeError(f"--max-bs must be at least 1, got {max_bs}")
    sizes = {s for s in (1, 2, 4, 8) if s <= max_bs}
    sizes.update(range(16, max_bs + 1, 8))
    sizes.add(max_bs)
    return tuple(sorted(sizes))


def parse_capture_sizes(text: str) -> tuple[int, ...]:
    """Parse ``--capture-sizes 1,2,4,8`` (commas or spaces) into sorted unique sizes."""
    parts = [p for p in text.replace(",", " ").split() if p]
    if not parts:
        raise ReplayscopeError("--capture-sizes needs at least one batch size, e.g. 1,2,4,8")
    sizes = []
    for part in parts:
        try:
            size = int(part)
        except ValueError:
            raise ReplayscopeError(f"--capture-sizes: {part!r} is not an integer") from None
        if not 1 <= size <= MAX_CAPTURE_SIZE:
            raise ReplayscopeError(f"--capture-sizes: batch sizes go from 1 to {MAX_CAPTURE_SIZE}, got {size}")
        sizes.append(size)
    return tuple(sorted(set(sizes)))
