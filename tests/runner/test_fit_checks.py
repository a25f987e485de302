"""A route's fit check (``replayscope.runner.fit_checks``): made from inputs that fitted, it accepts
inputs like them and refuses every other kind the fast match would refuse; where torch's tensor
guards are missing or behave otherwise, no maker (every step matched in full)."""

from __future__ import annotations

import pytest
import torch

from replayscope.runner.fit_checks import fit_check_maker

MAKE = fit_check_maker()
needs_guards = pytest.mark.skipif(MAKE is None, reason="this torch has no usable tensor guards")


def fitted() -> tuple[torch.Tensor, ...]:
    return torch.zeros(4, 1, dtype=torch.long), torch.zeros(4, 8), torch.arange(4)


@needs_guards
def test_a_check_accepts_inputs_like_those_it_was_made_from_whatever_their_values_and_strides():
    check = MAKE(fitted())
    assert check(torch.ones(4, 1, dtype=torch.long), torch.randn(4, 8), torch.arange(4) + 9) is True
    assert check(torch.ones(1, 4, dtype=torch.long).t(), torch.randn(8, 4).t(), torch.arange(8)[::2]) is True


def others() -> dict[str, tuple]:
    a, b, c = fitted()
    with torch.inference_mode():
        inference = torch.zeros(4, 8)
    return {"dtype": (a, b.double(), c), "row shape": (a, torch.zeros(4, 9), c), "batch": (a[:3], b[:3], c[:3]),
            "a dimension more": (a, b[None], c), "no dimension": (a, b, torch.tensor(0)),
            "another device": (a, torch.zeros(4, 8, device="meta"), c), "requires grad": (a, torch.zeros(4, 8, requires_grad=True), c),
            "an inference tensor": (a, inference, c), "not a tensor": (a, b, 3), "a list": (a, b.tolist(), c),
            "a subclass": (a, b.as_subclass(torch.nn.Parameter), c)}


@needs_guards
@pytest.mark.parametrize("name", sorted(others()))
def test_a_check_refuses_every_other_kind_of_input(name):
    assert MAKE(fitted())(*others()[name]) is False


@needs_guards
def test_no_check_is_made_from_a_subclass_whose_python_may_say_other_things_than_its_tensor():
    class SaysCuda(torch.Tensor):
        @property
        def is_cuda(self):
            return True
    a, b, c = fitted()
    assert MAKE((a, b.as_subclass(SaysCuda), c)) is None


@needs_guards
def test_no_check_is_made_from_one_tensor_under_two_names_which_torchs_guards_refuse():
    a, b, c = fitted()
    assert MAKE((a, b, a.clone().flatten())) is not None
    assert MAKE((a, b, b)) is None


@needs_guards
def test_a_check_keeps_no_reference_to_the_inputs_it_was_made_from():
    import weakref
    tensors = fitted()
    refs = [weakref.ref(t) for t in tensors]
    check = MAKE(tensors)
    del tensors
    assert all(ref() is None for ref in refs)
    assert check(*fitted()) is True


class AcceptsAll:
    """Guards that accept anything: the probe finds they do not behave."""

    def __init__(self, *tensors, **options):
        pass

    def check(self, *tensors):
        return True


class OtherArguments:
    def __init__(self, *tensors, **options):
        raise TypeError("missing tensor_check_names=...")


def missing():
    raise ImportError("no torch._C._dynamo.guards")


@pytest.mark.parametrize("guards", [missing, lambda: AcceptsAll, lambda: OtherArguments],
                         ids=["missing", "accepts all", "other arguments"])
def test_no_maker_where_torchs_guards_are_missing_or_behave_otherwise(guards):
    assert fit_check_maker(guards) is None


@needs_guards
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run with -m gpu on the device machine)")
def test_a_check_made_from_cuda_inputs_accepts_cuda_inputs_like_them_and_refuses_cpu_ones():
    on_gpu = tuple(t.cuda() for t in fitted())
    check = MAKE(on_gpu)
    assert check(*(t.cuda() + 1 for t in fitted())) is True
    assert check(*fitted()) is False
    assert check(on_gpu[0], on_gpu[1].cpu(), on_gpu[2]) is False
    assert check(on_gpu[0], on_gpu[1].half(), on_gpu[2]) is False
