"""A route's fit check: whether a step's inputs are like those that last fitted it, in one call.

The graph runner's fast match (``replayscope.runner.inputs.fits``) reads each input's dtype,
device and shape through torch's Python getters: a few hundred instructions per getter, the
largest share of a plain step's host time in the compiled core. Torch's own tensor guards (``TensorGuards``,
the checks ``torch.compile`` runs before each call of a compiled function) compare the same
facts in C++ in one call: the tensor's exact type, its dispatch keys (which include the device
type), dtype, device index, ``requires_grad`` and sizes (strides left unchecked here, as the
fast match leaves them). So the compiled core keeps, per route, a check made from the inputs
that last passed the full fast match: inputs it accepts have that route's dtypes, devices and
shapes, so they fit too. Inputs it refuses are matched in full, as before, and a check is made
anew from them when they fit. Nothing is accepted that the full match would refuse.

No check is made for tensor subclasses (their Python may say other things than their tensor) or
for one tensor given under two names (torch's guards refuse it): such steps are matched in full.

``TensorGuards`` is torch's private API (torch._C._dynamo.guards): ``fit_check_maker`` tries it
once on probe tensors and gives None where it is missing or does not behave as expected; the
core then matches every step in full.
"""

from __future__ import annotations

from typing import Callable

import torch

FitCheck = Callable[..., bool]             # check(*inputs in the route's expected order) -> True: they fit


def make_fit_check(tensor_guards: type, tensors: tuple[torch.Tensor, ...]) -> FitCheck:
    """The check of inputs like ``tensors``: same type, dispatch keys, dtype, device index,
    requires_grad and sizes, one tensor per position; strides free."""
    strides_free = [[None] * tensor.dim() for tensor in tensors]
    return tensor_guards(*tensors, dynamic_dims_sizes=None, dynamic_dims_strides=strides_free).check


def behaves(make: Callable[[tuple[torch.Tensor, ...]], FitCheck | None]) -> bool:
    """Whether checks made by ``make`` accept inputs like the probe and refuse every other kind."""
    probe = (torch.zeros(2, 1, dtype=torch.long), torch.zeros(3))
    check = make(probe)
    if check is None:
        return False
    like = (torch.ones(2, 1, dtype=torch.long), torch.ones(6)[::2])       # other values, other strides
    others = [(torch.zeros(2, 1, dtype=torch.int), probe[1]),                # another dtype
              (torch.zeros(3, 1, dtype=torch.long), probe[1]),               # another size
              (torch.zeros(2, 1, 1, dtype=torch.long), probe[1]),            # another number of dims
              (probe[0], torch.zeros(3, device="meta")),                     # another device
              (probe[0], torch.zeros(3, requires_grad=True)),                # requires grad
              (probe[0], 3)]                                                 # not a tensor
    return check(*like) is True and all(check(*other) is False for other in others)


def torch_tensor_guards() -> type:
    """torch's tensor guards class (ImportError where this torch has none)."""
    from torch._C._dynamo.guards import TensorGuards
    return TensorGuards


def fit_check_maker(tensor_guards: Callable[[], type] = torch_tensor_guards
                    ) -> Callable[[tuple[torch.Tensor, ...]], FitCheck | None] | None:
    """What makes a route's fit check from inputs that fitted, or None where torch's tensor guards
    are missing or do not behave as expected here (every step then matched in full)."""
    try:
        guards = tensor_guards()
    except ImportError:
        return None

    def make(tensors: tuple[torch.Tensor, ...]) -> FitCheck | None:
        if any(type(tensor) is not torch.Tensor for tensor in tensors):
            return None                    # a subclass may say other things than its C++ tensor: matched in full
        if len({id(tensor) for tensor in tensors}) != len(tensors):
            return None                    # one tensor under two names: torch's guards refuse it, matched in full
        return make_fit_check(guards, tensors)

    try:
        return make if behaves(make) else None
    except Exception:                      # a torch whose guards take other arguments: full matches
        return None
