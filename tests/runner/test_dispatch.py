"""replayscope.runner.dispatch: every eager reason, the padding boundaries, and the dispatch invariants."""

import bisect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replayscope.runner.dispatch import BatchShape, Decision, dispatch
from replayscope.runner.plan import CapturePlan
from replayscope.contract.wire import REASONS

SIZES = (1, 2, 4, 8, 16)
PLAN = CapturePlan(SIZES)
NO_PADDING = CapturePlan(SIZES, padding=False)


def decode(bs, **kw) -> BatchShape:
    return BatchShape("decode", bs, **kw)


def eager(reason) -> Decision:
    return Decision("eager", None, reason)


# --- one test per reason (all of REASONS but 'unknown', which only importers produce) ---------

@pytest.mark.parametrize("stage", ["prefill", "mixed"])
def test_prefill_and_mixed_batches_run_eager_as_prefill(stage):
    assert dispatch(BatchShape(stage, 4, query_len=37), PLAN) == eager("prefill")
    assert dispatch(BatchShape(stage, 4, query_len=1), PLAN) == eager("prefill")  # even one token each


@pytest.mark.parametrize("plan", [PLAN, NO_PADDING])
def test_a_batch_above_the_largest_size_is_batch_too_large(plan):
    assert dispatch(decode(17), plan) == eager("batch_too_large")


def test_without_padding_an_uncaptured_size_is_not_captured():
    assert dispatch(decode(3), NO_PADDING) == eager("not_captured")
    assert dispatch(decode(9), NO_PADDING) == eager("not_captured")


def test_a_decode_with_tokens_per_row_other_than_the_plan_is_not_captured():
    assert dispatch(decode(4, query_len=2), PLAN) == eager("not_captured")


def test_an_adapter_outside_the_graphs_bank_is_lora_not_captured():
    plan = CapturePlan(SIZES, lora_adapters=frozenset({1, 2}))
    assert dispatch(decode(4, adapters=frozenset({0, 1, 2})), plan) == Decision("graph", 4, None)
    assert dispatch(decode(4, adapters=frozenset({0, 3})), plan) == eager("lora_not_captured")
    assert dispatch(decode(4, adapters=frozenset({1})), PLAN) == eager("lora_not_captured")


def test_adapter_zero_means_no_adapter_and_needs_no_graph_variant():
    assert dispatch(decode(4, adapters=frozenset({0})), PLAN) == Decision("graph", 4, None)


def test_a_grammar_switch_runs_eager():
    assert dispatch(decode(4, grammar_switched=True), PLAN) == eager("grammar_switch")


def test_a_verify_width_other_than_the_captured_one_is_spec_shape():
    plan = CapturePlan(SIZES, query_len=4)
    assert dispatch(BatchShape("verify", 4, query_len=4), plan) == Decision("graph", 4, None)
    assert dispatch(BatchShape("verify", 4, query_len=6), plan) == eager("spec_shape")


def test_capture_failed_with_padding_when_every_size_at_or_above_bs_failed():
    plan = PLAN.with_failed(8).with_failed(16)
    assert dispatch(decode(5), plan) == eager("capture_failed")
    assert dispatch(decode(4), plan) == Decision("graph", 4, None)  # smaller sizes still serve


def test_capture_failed_with_padding_pads_past_a_failed_size():
    assert dispatch(decode(3), PLAN.with_failed(4)) == Decision("padded", 8, None)
    assert dispatch(decode(4), PLAN.with_failed(4)) == Decision("padded", 8, None)


def test_capture_failed_without_padding_when_the_exact_size_failed():
    plan = NO_PADDING.with_failed(4)
    assert dispatch(decode(4), plan) == eager("capture_failed")
    assert dispatch(decode(3), plan) == eager("not_captured")   # 3 was never planned


def test_capture_failed_when_nothing_captured_at_all():
    plan = CapturePlan((1, 2, 4))
    for size in plan.sizes:
        plan = plan.with_failed(size)
    for bs in (1, 3, 4, 9):
        assert dispatch(decode(bs), plan) == eager("capture_failed")


def test_a_disabled_plan_is_graphs_disabled_for_every_stage():
    plan = PLAN.disabled()
    for shape in (decode(4), decode(3), decode(99), BatchShape("prefill", 2, query_len=9),
                  BatchShape("verify", 2, query_len=4), decode(2, grammar_switched=True)):
        assert dispatch(shape, plan) == eager("graphs_disabled")


def test_the_callers_reason_overrides_every_other_check():
    for plan in (PLAN, PLAN.disabled()):
        assert dispatch(decode(4, caller_reason="custom:warming up"), plan) == eager("custom:warming up")
    assert dispatch(BatchShape("prefill", 4, caller_reason="grammar_switch"), PLAN) == eager("grammar_switch")


def test_checks_run_in_order_of_preference():
    # prefill before adapters and grammar; adapters before grammar
    plan = CapturePlan(SIZES, lora_adapters=frozenset({1}))
    assert dispatch(BatchShape("prefill", 4, adapters=frozenset({5}), grammar_switched=True), plan) \
        == eager("prefill")
    assert dispatch(decode(4, adapters=frozenset({5}), grammar_switched=True), plan) == eager("lora_not_captured")
    assert dispatch(decode(64, grammar_switched=True), plan) == eager("grammar_switch")


# --- padding boundaries --------------------------------------------------------------------

@pytest.mark.parametrize("bs", SIZES)
def test_a_captured_size_replays_its_own_graph(bs):
    assert dispatch(decode(bs), PLAN) == Decision("graph", bs, None)


@pytest.mark.parametrize("bs, graph_bs", [(3, 4), (5, 8), (7, 8), (9, 16), (15, 16)])
def test_a_size_between_captured_sizes_pads_to_the_next(bs, graph_bs):
    assert dispatch(decode(bs), PLAN) == Decision("padded", graph_bs, None)


def test_the_largest_size_is_a_graph_and_one_more_is_too_large():
    assert dispatch(decode(16), PLAN) == Decision("graph", 16, None)
    assert dispatch(decode(17), PLAN) == eager("batch_too_large")


def test_bs_1_pads_to_the_smallest_size_when_1_is_not_captured():
    assert dispatch(decode(1), CapturePlan((4, 8))) == Decision("padded", 4, None)
    assert dispatch(decode(1), CapturePlan((1, 4)).with_failed(1)) == Decision("padded", 4, None)


# --- properties ------------------------------------------------------------------------------

@st.composite
def plans(draw):
    sizes = tuple(sorted(draw(st.sets(st.integers(1, 64), min_size=1, max_size=10))))
    failed = draw(st.sets(st.sampled_from(sizes)))
    return CapturePlan(sizes, padding=draw(st.booleans()), enabled=draw(st.booleans()),
                       query_len=draw(st.integers(1, 3)), lora_adapters=frozenset(draw(st.sets(st.integers(1, 4)))),
                       failed=frozenset(failed))


@st.composite
def batches(draw):
    return BatchShape(draw(st.sampled_from(["decode", "prefill", "verify", "mixed"])), draw(st.integers(1, 80)),
                      query_len=draw(st.integers(1, 3)), adapters=frozenset(draw(st.sets(st.integers(0, 5)))),
                      grammar_switched=draw(st.booleans()))


@settings(max_examples=400, deadline=None)
@given(plans(), batches())
def test_every_decision_keeps_the_dispatch_invariants(plan, batch):
    decision = dispatch(batch, plan)
    captured = plan.captured
    if decision.mode == "graph":
        assert decision.reason is None
        assert decision.graph_bs == batch.raw_bs and batch.raw_bs in captured
    elif decision.mode == "padded":
        assert decision.reason is None and plan.padding
        assert decision.graph_bs == captured[bisect.bisect_left(captured, batch.raw_bs)]
        assert decision.graph_bs > batch.raw_bs
    else:
        assert decision.mode == "eager" and decision.graph_bs is None
        assert decision.reason in REASONS and decision.reason != "unknown"


@settings(max_examples=300, deadline=None)
@given(plans(), st.integers(1, 80))
def test_a_plain_decode_runs_on_a_graph_whenever_one_can_serve_it(plan, bs):
    decision = dispatch(BatchShape("decode", bs, query_len=plan.query_len), plan)
    larger = [s for s in plan.captured if s >= bs]
    if not plan.enabled:
        assert decision == eager("graphs_disabled")
    elif bs in plan.captured:
        assert decision == Decision("graph", bs, None)
    elif plan.padding and larger:
        assert decision == Decision("padded", larger[0], None)
    else:
        assert decision.mode == "eager"
        assert decision.reason in ("batch_too_large", "not_captured", "capture_failed")
