"""Capture plans: which batch sizes get a graph (the size lists: replayscope.contract.capture_sizes)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from replayscope.contract.errors import ReplayscopeError

# How a plan's sizes are served: cuda graphs, torch.compile then graphs, the CPU stand-in,
# eager only, or the best the device allows. Here, not in replayscope.runner.graphs, so the command
# line can offer them without importing torch.
BACKENDS = ("auto", "cuda", "compile", "static", "disabled")


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
