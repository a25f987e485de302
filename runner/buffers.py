"""The static buffers a runner's graphs read their inputs from: one tensor per input, sized for
the largest batch, with views of a batch's rows and of the pad rows between two sizes."""

from __future__ import annotations

import torch

from replayscope.runner.inputs import StaticInput


class StaticBuffers:
    def __init__(self, specs: tuple[StaticInput, ...]):
        self.specs = specs
        self.tensors: dict[str, torch.Tensor] = {}
        self._pad_views: dict[tuple[int, int], tuple[tuple[torch.Tensor, int | float], ...]] = {}

    def allocate(self, max_bs: int, device: torch.device) -> torch.Tensor:
        """Every buffer anew, filled with its pad value; returns the first (its device is the buffers')."""
        for spec in self.specs:
            self.tensors[spec.name] = torch.full(spec.full_shape(max_bs), spec.pad_value,
                                                 dtype=spec.dtype, device=device)
        self._pad_views.clear()
        return self.tensors[self.specs[0].name]

    def __bool__(self) -> bool:
        return bool(self.tensors)

    def views(self, size: int) -> dict[str, torch.Tensor]:
        """The first ``size`` rows of every buffer, by input name (what a capture of ``size`` reads)."""
        return {s.name: self.tensors[s.name].narrow(s.batch_dim, 0, size) for s in self.specs}

    def rows(self, size: int) -> tuple[tuple[str, torch.Tensor], ...]:
        """(input, its first ``size`` rows) of every buffer: what a batch of ``size`` is copied into."""
        return tuple((s.name, self.tensors[s.name].narrow(s.batch_dim, 0, size)) for s in self.specs)

    def fill_pad_rows(self, start: int, end: int) -> None:
        """Rows ``start`` to ``end`` of every buffer back to their pad value (views made once per range)."""
        views = self._pad_views.get((start, end))
        if views is None:
            views = self._pad_views[(start, end)] = tuple(
                (self.tensors[s.name].narrow(s.batch_dim, start, end - start), s.pad_value) for s in self.specs)
        for view, value in views:
            view.fill_(value)
