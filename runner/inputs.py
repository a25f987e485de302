"""The static-input contract: what a step's inputs must be, checked once per step.

A runner's inputs are ``StaticInput`` specs. A batch keeps the contract when it holds exactly
those names, each tensor of its spec's dtype, with the spec's shape for the batch's size, on
the static buffers' device. Two ways of checking it, never both on one step's inputs:

- ``fits(inputs, route)``, the fast match on the hot path: attribute reads and compares
  against the shapes a route holds (made once per batch size by ``InputContract.expected``);
- ``InputContract.explain(inputs)``, the slow explanation, only for inputs that did not
  match: it says by name what is wrong (``ReplayscopeError``), or allows a verify, prefill or
  mixed stage's other width and returns what dispatch needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from replayscope.contract.errors import ReplayscopeError

Expected = tuple[tuple[str, torch.Size, torch.dtype], ...]   # (name, shape, dtype) of each input
OTHER_WIDTH = -1        # tokens per request of a batch whose row shapes differ from the plan's


@dataclass(frozen=True)
class StaticInput:
    """One input of the step: its shape per batch row, dtype, and the value pad rows hold.

    ``row_shape`` excludes the batch dimension, which sits at ``batch_dim``.
    """

    name: str
    row_shape: tuple[int, ...]
    dtype: torch.dtype
    pad_value: int | float = 0
    batch_dim: int = 0

    def full_shape(self, bs: int) -> tuple[int, ...]:
        shape = list(self.row_shape)
        shape.insert(self.batch_dim, bs)
        return tuple(shape)


def fits(inputs: Mapping[str, Any], expected: Expected, cuda_index: int | None) -> bool:
    """The fast match: exactly the expected inputs, each with its shape and dtype, on the CPU
    (``cuda_index`` None) or on that CUDA device. Attribute reads and compares only; False for
    anything else, which ``InputContract.explain`` then judges."""
    if len(inputs) != len(expected):
        return False
    try:
        if cuda_index is None:
            for name, shape, dtype in expected:
                tensor = inputs[name]
                if tensor.dtype is not dtype or not tensor.is_cpu or tensor.shape != shape:
                    return False
        else:
            for name, shape, dtype in expected:
                tensor = inputs[name]
                if tensor.dtype is not dtype or not tensor.is_cuda or tensor.shape != shape or (
                        tensor.get_device() != cuda_index):
                    return False
    except (KeyError, AttributeError):
        return False
    return True


class InputContract:
    """The specs of a runner's inputs and the device its static buffers are on."""

    def __init__(self, specs: tuple[StaticInput, ...], device: torch.device):
        if not specs:
            raise ReplayscopeError("a graph runner needs at least one StaticInput")
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ReplayscopeError(f"static input names must be unique: {names}")
        self.specs = specs
        self.device = device
        self.first, self.first_dim = specs[0].name, specs[0].batch_dim   # where a batch's size is read
        self._expected: dict[int, Expected] = {}
        # The fast match judges the CPU and a CUDA device whose index is known; plain "cuda" is
        # the current device at allocation (``bind``), anything else (meta, mps) only ``explain``.
        self.cuda_index = device.index if device.type == "cuda" else None
        self.device_known = device.type == "cpu" or self.cuda_index is not None

    def bind(self, buffer: torch.Tensor) -> None:
        """The static buffers were allocated on ``buffer``'s device: the fast match compares with it."""
        self.cuda_index = buffer.get_device() if buffer.is_cuda else None
        self.device_known = buffer.is_cpu or buffer.is_cuda

    def expected(self, raw_bs: int) -> Expected:
        """(name, shape, dtype) of each input of a batch of ``raw_bs``, made once per size."""
        expected = self._expected.get(raw_bs)
        if expected is None:
            expected = self._expected[raw_bs] = tuple(
                (s.name, torch.Size(s.full_shape(raw_bs)), s.dtype) for s in self.specs)
        return expected

    def fast_batch_size(self, inputs: Mapping[str, Any]) -> int | None:
        """The batch's size when ``inputs`` pass the fast match, else None (one match, no explanation)."""
        if not self.device_known:
            return None
        try:
            raw_bs = inputs[self.first].shape[self.first_dim]
        except (KeyError, IndexError, AttributeError, TypeError):
            return None
        return raw_bs if fits(inputs, self.expected(raw_bs), self.cuda_index) else None

    def explain(self, inputs: Mapping[str, Any], *, allow_other_width: bool, query_len: int) -> tuple[int, int]:
        """(batch size, tokens per request) of inputs that did not pass the fast match.

        Raises ``ReplayscopeError`` naming the input that breaks the contract. Row shapes other
        than the specs' are allowed only with ``allow_other_width`` (a verify stage's other
        speculative width, a prefill): then the tokens per request are ``OTHER_WIDTH``, which
        dispatch sends eager; otherwise they are ``query_len``, the plan's.
        """
        unknown = set(inputs) - {s.name for s in self.specs}
        if unknown:
            raise ReplayscopeError(f"unknown inputs {sorted(unknown)}; the step takes {_names(self.specs)}")
        specs, device = self.specs, self.device
        raw_bs = batch_size(inputs, specs)              # the first input refused here if it is unusable
        rows_match = True
        for spec in specs:
            tensor = inputs[spec.name] if spec is specs[0] else _tensor(inputs, spec)
            if tensor.device != device and not (tensor.device.type == device.type == "cuda" and device.index is None):
                raise ReplayscopeError(f"input {spec.name!r} is on {tensor.device}, the runner's "
                                       f"static buffers are on {device}")
            if tensor.dtype != spec.dtype:
                raise ReplayscopeError(f"input {spec.name!r} has dtype {tensor.dtype}, expected {spec.dtype}")
            if tuple(tensor.shape) != spec.full_shape(raw_bs):
                same_rank = tensor.dim() == len(spec.row_shape) + 1 and tensor.shape[spec.batch_dim] == raw_bs
                if not (allow_other_width and same_rank):
                    raise ReplayscopeError(f"input {spec.name!r} has shape {tuple(tensor.shape)}, expected "
                                           f"{spec.full_shape(raw_bs)} for a batch of {raw_bs}")
                rows_match = False
        return raw_bs, query_len if rows_match else OTHER_WIDTH


def batch_size(inputs: Mapping[str, Any], specs: tuple[StaticInput, ...]) -> int:
    """The batch's size, from its first input (refused by name when that input is unusable)."""
    first = specs[0]
    if first.name not in inputs:
        raise ReplayscopeError(f"missing input {first.name!r}; the step takes {_names(specs)}")
    return _tensor(inputs, first).shape[first.batch_dim]


def _names(specs: tuple[StaticInput, ...]) -> str:
    return ", ".join(s.name for s in specs)


def _tensor(inputs: Mapping[str, Any], spec: StaticInput) -> torch.Tensor:
    """``inputs[spec.name]``, refused by name when missing, not a tensor, or without a batch dimension."""
    if spec.name not in inputs:
        raise ReplayscopeError(f"missing input {spec.name!r}")
    tensor = inputs[spec.name]
    if not isinstance(tensor, torch.Tensor):
        raise ReplayscopeError(f"input {spec.name!r} is of type {type(tensor).__name__}, not a tensor")
    if tensor.dim() <= spec.batch_dim:
        expected = [str(n) for n in spec.row_shape]
        expected.insert(spec.batch_dim, "batch")
        raise ReplayscopeError(f"input {spec.name!r} has shape {tuple(tensor.shape)}, with no batch dimension; "
                               f"expected ({', '.join(expected)})")
    return tensor
