"""Inductor's own words for skipping CUDA graphs map into the reason vocabulary, and a step's
mode and cause follow one order of precedence."""

import pytest

from replayscope.contract import wire
from replayscope.runner.trace.causes import (Cause, StepFacts, decide, inductor_skip_evidence,
                                             inductor_skip_reason)

# Messages as torch's Inductor writes them (torch/_inductor/cudagraph_utils.py, output_code.py,
# compile_fx.py, cudagraph_trees.py), with the stack-trace tails they carry.
MESSAGES = [
    ("skipping cudagraphs due to mutated inputs (6 instances). Found from : \n File \"x.py\", line 3",
     "mutated_inputs"),
    ("skipping cudagraphs due to mutated inputs (1 instances)", "mutated_inputs"),
    ("skipping cudagraphs due to input storage mutation (2 instances)", "mutated_inputs"),
    ("skipping cudagraphs due to cpu device (arg0_1). Found from : \n File \"x.py\"", "cpu_device"),
    ("skipping cudagraphs due to multiple devices: device(type='cuda', index=0), device(type='cpu')",
     "cpu_device"),
    ("skipping cudagraphs due to ['non-Tensor inputs']", "non_tensor_inputs"),
    ("skipping cudagraphs due to ['mutated inputs', 'non-Tensor inputs']", "mutated_inputs"),
    ("skipping cudagraphs due to disabling cudagraphs due to incompatible op aten.nonzero.default "
     "Found from x.py\n", "incompatible_op"),
    ("skipping cudagraphs due to graph with symbolic shapes inputs and "
     "config.triton.cudagraph_skip_dynamic_graphs=True. Found from x.py\n", "dynamic_shapes"),
    ("skipping cudagraph due to function 3 exceeding max re-recording limit (=128) on cudagraph node 2 "
     "due to static input data pointer changed.", "rerecord_limit"),
    ("skipping cudagraphs due to multiple devices: device(type='cuda', index=0), "
     "device(type='cuda', index=1)", "unknown"),
    ("skipping cudagraphs due to cudagraph capture requires the caching allocator; current allocator "
     "is uncached", "unknown"),
    ("skipping cudagraphs due to bisector", "unknown"),
]


@pytest.mark.parametrize("message, reason", MESSAGES)
def test_inductors_skip_message_maps_to_a_reason_of_the_vocabulary(message, reason):
    assert inductor_skip_reason(message) == reason
    assert reason in wire.REASONS


def test_the_evidence_is_inductors_first_line_without_its_stack_trace():
    evidence = inductor_skip_evidence(MESSAGES[0][0])
    assert evidence == "Inductor: skipping cudagraphs due to mutated inputs (6 instances). Found from :"


def test_evidence_is_cut_to_what_the_wire_holds():
    assert len(inductor_skip_evidence("skipping cudagraphs due to " + "x" * 2000)) == 500


def facts(**kw):
    return StepFacts(**{"stage": "decode", "raw_bs": 4, **kw})


def test_an_inductor_call_without_its_graph_outranks_other_replays_in_the_step():
    outcome = decide(facts(replays=3, replayed_bs=4, inductor_eager=Cause("mutated_inputs", "Inductor: m")))
    assert (outcome.mode, outcome.reason) == ("eager", "mutated_inputs")
    assert outcome.evidence == "Inductor: m; 3 replays of other graphs in the step"


def test_a_replay_outranks_the_engines_hint():
    outcome = decide(facts(stage="prefill", replays=1, replayed_bs=4, recipe_hint=Cause("prefill")))
    assert (outcome.mode, outcome.graph_bs, outcome.reason) == ("graph", 4, None)


def test_a_replayed_graph_smaller_than_the_batch_is_graph_with_what_was_seen():
    outcome = decide(facts(raw_bs=16, replays=2, replayed_bs=8))
    assert (outcome.mode, outcome.graph_bs) == ("graph", 16)
    assert outcome.evidence == "largest graph replayed holds 8 rows, the batch 16"


def test_the_engines_hint_outranks_an_inductor_skip_seen_at_compile_time():
    outcome = decide(facts(recipe_hint=Cause("prefill", "prompt"), compile_skip=Cause("cpu_device", "c")))
    assert (outcome.reason, outcome.evidence) == ("prefill", "prompt")


def test_without_any_graph_the_processs_no_graph_cause_is_the_steps():
    outcome = decide(facts(no_graph=Cause("cpu_device", "CUDA is not available in this process")))
    assert (outcome.reason, outcome.evidence) == ("cpu_device", "CUDA is not available in this process")
    assert decide(facts(no_graph=Cause("graphs_disabled", "off"))).reason == "graphs_disabled"


def test_graphs_in_the_process_outrank_the_no_graph_cause():
    outcome = decide(facts(raw_bs=3, captured_sizes=(4,), no_graph=Cause("cpu_device", "c")))
    assert outcome.reason == "unknown"


def test_with_cuda_and_no_graph_at_all_the_cause_is_unknown_and_says_so():
    outcome = decide(facts())
    assert outcome.reason == "unknown" and "no CUDA graph captured" in outcome.evidence


def test_every_outcome_is_a_valid_step_event():
    cases = [facts(replays=1, replayed_bs=8), facts(replays=1, replayed_bs=4), facts(captured_sizes=(1, 2)),
             facts(captured_sizes=(8, 16)), facts(), facts(inductor_eager=Cause("graph_warmup"))]
    for case in cases:
        o = decide(case)
        wire.validate_event({"seq": 0, "ts": 1.0, "kind": "step", "stage": "decode", "mode": o.mode,
                             "raw_bs": case.raw_bs, "graph_bs": o.graph_bs, "num_tokens": 4,
                             "padded_tokens": 0, "reason": o.reason, "duration_s": 0.001,
                             "evidence": o.evidence})
