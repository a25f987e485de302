"""replayscope.runner.workload: the continuous-batching scheduler keeps its caps and never shares a cache slot."""

import dataclasses

import pytest

from replayscope.contract.errors import ReplayscopeError
from replayscope.runner.workload import WORKLOADS, Scheduler, workload_by_name

VOCAB = 512


def drive(spec, seed, iterations):
    """Run the scheduler with dummy tokens; yield (iteration, scheduler) after each."""
    scheduler = Scheduler(spec, seed, VOCAB)
    for _ in range(iterations):
        iteration = scheduler.next_iteration()
        if iteration is None:
            continue
        yield iteration, scheduler
        width = iteration.draft_len + 1 if iteration.stage == "verify" else 1
        scheduler.complete(iteration, [[7] * width for _ in iteration.requests])


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_running_requests_stay_under_max_running_and_never_share_a_slot(name):
    spec = dataclasses.replace(WORKLOADS[name], max_running=6)   # a small cap, so it is hit often
    seen_full = False
    for iteration, scheduler in drive(spec, seed=3, iterations=3000):
        slots = [r.slot for r in scheduler.running]
        assert len(scheduler.running) <= spec.max_running
        assert len(set(slots)) == len(slots), f"two running requests share a slot: {sorted(slots)}"
        assert all(0 <= s < spec.max_running for s in slots)     # never the pad rows' scratch slot, max_running
        assert {r.slot for r in iteration.requests} <= set(slots)
        seen_full = seen_full or len(scheduler.running) == spec.max_running
    assert seen_full, "the workload never filled its running set; the cap was not exercised"


def test_a_prefill_admits_at_most_max_prefill_requests():
    spec = WORKLOADS["mixed"]
    prefills = [len(it.requests) for it, _ in drive(spec, seed=0, iterations=2000) if it.stage == "prefill"]
    assert prefills and max(prefills) <= spec.max_prefill_requests


def test_finished_requests_free_their_slots_for_new_ones():
    spec = WORKLOADS["decode-only"]
    for _, scheduler in drive(spec, seed=1, iterations=3000):
        pass
    assert scheduler.finished > spec.max_running            # slots were reused
    assert len(scheduler.free_slots) + len(scheduler.running) == spec.max_running


def test_verify_iterations_hold_only_speculative_requests_and_decode_only_plain_ones():
    stages = set()
    for iteration, _ in drive(WORKLOADS["mixed"], seed=0, iterations=2000):
        stages.add(iteration.stage)
        if iteration.stage == "verify":
            assert all(r.speculative for r in iteration.requests)
            assert iteration.draft_len in WORKLOADS["mixed"].spec_draft_lens
        elif iteration.stage == "decode":
            assert not any(r.speculative for r in iteration.requests)
    assert stages == {"prefill", "decode", "verify"}


def test_the_same_seed_gives_the_same_batches_and_another_seed_differs():
    def trace(seed):
        return [(it.stage, it.draft_len, tuple(r.id for r in it.requests), tuple(r.slot for r in it.requests))
                for it, _ in drive(WORKLOADS["mixed"], seed, 800)]
    assert trace(5) == trace(5)
    assert trace(5) != trace(6)


def test_an_unknown_workload_lists_the_known_ones():
    with pytest.raises(ReplayscopeError, match="unknown workload 'bursty'; choose one of decode-only, lora"):
        workload_by_name("bursty")
