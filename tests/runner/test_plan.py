"""replayscope.runner.plan: parsing --capture-sizes, the engines' default size lists, CapturePlan invariants."""

import pytest

from replayscope.contract.errors import ReplayscopeError
from replayscope.runner.plan import CapturePlan
from replayscope.contract.capture_sizes import default_capture_sizes, parse_capture_sizes


# --- parse_capture_sizes -------------------------------------------------------------------

def test_parse_accepts_commas_and_spaces_and_returns_sorted_unique_sizes():
    assert parse_capture_sizes("8,1 4,,2  8") == (1, 2, 4, 8)


def test_parse_a_single_size():
    assert parse_capture_sizes("16") == (16,)


@pytest.mark.parametrize("text", ["", "  ", ",", " , ,"])
def test_parse_rejects_an_empty_list(text):
    with pytest.raises(ReplayscopeError, match="needs at least one batch size"):
        parse_capture_sizes(text)


@pytest.mark.parametrize("text, bad", [("1,two,4", "'two'"), ("1.5", "'1.5'"), ("4x", "'4x'")])
def test_parse_names_the_part_that_is_not_an_integer(text, bad):
    with pytest.raises(ReplayscopeError, match=f"{bad} is not an integer"):
        parse_capture_sizes(text)


@pytest.mark.parametrize("text, bad", [("0,1", "0"), ("1,-8", "-8"), ("1,99999999", "99999999"), ("4097", "4097")])
def test_parse_rejects_sizes_outside_one_to_the_ceiling(text, bad):
    with pytest.raises(ReplayscopeError, match=f"go from 1 to 4096, got {bad}"):
        parse_capture_sizes(text)


# --- default sizes -------------------------------------------------------------------------

@pytest.mark.parametrize("max_bs, sizes", [
    (32, (1, 2, 4, 8, 16, 24, 32)),
    (20, (1, 2, 4, 8, 16, 20)),       # max_bs itself is always captured
    (8, (1, 2, 4, 8)),
    (3, (1, 2, 3)),
    (1, (1,)),
    (160, (1, 2, 4, 8) + tuple(range(16, 161, 8))),
])
def test_default_sizes_are_powers_of_two_to_8_then_every_8_up_to_max_bs(max_bs, sizes):
    assert default_capture_sizes(max_bs) == sizes


@pytest.mark.parametrize("max_bs", [0, -4])
def test_default_sizes_reject_a_max_bs_below_one(max_bs):
    with pytest.raises(ReplayscopeError, match=f"--max-bs must be at least 1, got {max_bs}"):
        default_capture_sizes(max_bs)


# --- CapturePlan ---------------------------------------------------------------------------

@pytest.mark.parametrize("sizes", [(), (2, 1), (1, 1, 2), (0, 1), (-1, 4)])
def test_plan_sizes_must_be_ascending_unique_and_positive(sizes):
    with pytest.raises(ReplayscopeError):
        CapturePlan(sizes)


def test_plan_query_len_must_be_positive():
    with pytest.raises(ReplayscopeError, match="query_len must be >= 1"):
        CapturePlan((1, 2), query_len=0)


def test_plan_captured_is_the_sizes_minus_the_failed_ones():
    plan = CapturePlan((1, 2, 4, 8)).with_failed(4).with_failed(1)
    assert plan.captured == (2, 8)
    assert plan.failed == frozenset({1, 4})
    assert plan.max_size == 8          # the plan's largest size, failed or not


def test_plan_with_failed_and_disabled_return_new_plans():
    plan = CapturePlan((1, 2))
    assert plan.with_failed(2) is not plan and plan.failed == frozenset()
    assert plan.disabled().enabled is False and plan.enabled is True
