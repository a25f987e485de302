"""Capture plans: which batch sizes get a graph, and the engines' default size lists."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from runner.errors import ReplayscopeError

# How a plan's sizes are served: cuda graphs, torch.compile then graphs, the CPU stand-in,
# eager only, or the best the device allows. Here, not in runner.graphs, so the command
# line can offer them without importing torch.
BACKENDS = ("auto", "cuda", "compile", "static", "disabled")
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


def vllm_default_sizes(max_size: int = 512) -> tuple[int, ...]:
    """vLLM V1: [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)."""
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, max_size + 1, 16))
    return tuple(s for s in sizes if s <= max_size)


def sglang_default_sizes(max_bs: int = 160) -> tuple[int, ...]:
    """SGLang (older cuda_graph_runner): [1, 2, 4, 8] + range(16, 161, 8), capped at max_bs."""
    return tuple(s for s in [1, 2, 4, 8] + list(range(16, 161, 8)) if s <= max_bs)


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


@dataclass(frozen=True)
class CapturePlan:
    """What a graph runner intends to capture and, after capture, what it holds.

    ``sizes`` are the planned batch sizes; ``failed`` those whose capture failed, so
    ``captured`` is the rest. ``query_len`` is the tokens per row the graphs were
    captured with (k+1 for a speculative verify stage). ``lora_adapters`` are the
    adapters the captured graphs can serve (adapter 0, no adapter, always).
    """

    sizes: tuple[int, ...]
    padding: bool = True
    enabled: bool = True
    query_len: int = 1
    lora_adapters: frozenset[int] = field(default_factory=frozenset)
    failed: frozenset[int] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not self.sizes:
            raise ReplayscopeError("a capture plan needs at least one batch size")
        if list(self.sizes) != sorted(set(self.sizes)) or self.sizes[0] < 1:
            raise ReplayscopeError(f"capture sizes must be ascending, unique and >= 1: {self.sizes}")
        if self.query_len < 1:
            raise ReplayscopeError(f"query_len must be >= 1, got {self.query_len}")

    @property
    def captured(self) -> tuple[int, ...]:
        return tuple(s for s in self.sizes if s not in self.failed)

    @property
    def max_size(self) -> int:
        return self.sizes[-1]

    def with_failed(self, size: int) -> "CapturePlan":
        return replace(self, failed=self.failed | {size})

    def disabled(self) -> "CapturePlan":
        return replace(self, enabled=False)
