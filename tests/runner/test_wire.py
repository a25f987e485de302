"""The wire contract's validation: precise errors, and a fast path that never accepts more."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replayscope.contract import wire
from replayscope.contract.wire import checks

STEP = {"seq": 3, "ts": 1700000000.5, "kind": "step", "stage": "decode", "mode": "padded", "raw_bs": 5,
        "graph_bs": 8, "num_tokens": 5, "padded_tokens": 3, "reason": None, "duration_s": 0.002}
VALID = {
    "step": STEP,
    "phase": {"seq": 0, "ts": 1.0, "kind": "phase", "phase": "load_weights", "duration_s": 2.5, "mem_bytes": 10},
    "capture": {"seq": 1, "ts": 1.0, "kind": "capture", "graph_bs": 8, "stage": "decode", "duration_s": 0.1,
                "pool_bytes": 1024, "pool_delta_bytes": -5, "status": "ok"},
    "step_counts": {"seq": 2, "ts": 1.0, "kind": "step_counts", "stage": "mixed", "mode": "eager",
                    "reason": "unknown", "count": 7, "num_tokens": 70, "padded_tokens": 0},
    "degrade": {"seq": 4, "ts": 1.0, "kind": "degrade", "from": "cuda", "to": "eager", "error": "boom"},
    "parity": {"seq": 5, "ts": 1.0, "kind": "parity", "graph_bs": 8, "max_abs_diff": 0.0, "rel_err": 0.0},
    "run_end": {"seq": 6, "ts": 1.0, "kind": "run_end", "status": "finished"},
    "heartbeat": {"seq": 7, "ts": 1.0, "kind": "heartbeat"},
    "warning": {"seq": 8, "ts": 1.0, "kind": "warning", "message": "a hook was missing", "code": "hook_missing"},
}
ODD_VALUES = [None, True, False, -1, 0, 1, 8, 2**63, -0.5, 1.5, math.nan, math.inf, -math.inf, "", "x" * 5000,
              "decode", "graph", "eager", "padded", "prefill", "ok", "custom:mine", "custom:", [], {}, "Load_Weights",
              # at and just past every bound
              wire.MAX_TIMESTAMP, wire.MAX_TIMESTAMP + 1, 1.7e12, 1.7e15, 1.7e18, 1e19, 1e308, 10**400,
              wire.MAX_DURATION_S, wire.MAX_DURATION_S + 0.5, wire.MAX_BATCH, wire.MAX_BATCH + 1,
              wire.MAX_STEP_TOKENS, wire.MAX_STEP_TOKENS + 1, wire.MAX_COUNT, wire.MAX_COUNT + 1,
              wire.MAX_BYTES, wire.MAX_BYTES + 1, -wire.MAX_BYTES - 1, 2**62, 2**62 + 1]


def precise(event):
    """The slow path alone: the field tables checked one by one."""
    checks._check_fields(event, wire.COMMON_EVENT_FIELDS)
    checks._check_fields(event, wire.EVENT_FIELDS[event["kind"]])


def test_every_valid_example_passes_both_paths():
    for kind, event in VALID.items():
        assert checks._FAST_CHECKS[kind](event), kind
        wire.validate_event(event)


FIELDS = {f for k in VALID.values() for f in k}


def changes_of(fields):
    """Up to three of ``fields`` set to odd values or removed (``checks._MISSING``)."""
    return st.dictionaries(st.sampled_from(sorted(fields)), st.sampled_from(ODD_VALUES) | st.just(checks._MISSING),
                           max_size=3)


def changed(kind, changes):
    """The valid example of ``kind`` with ``changes`` made; None where they change its kind."""
    event = dict(VALID[kind])
    for field, value in changes.items():
        if value is checks._MISSING:
            event.pop(field, None)
        else:
            event[field] = value
    return event if event.get("kind") == kind else None


@settings(max_examples=600, deadline=None)
@given(kind=st.sampled_from(sorted(VALID)), changes=changes_of(FIELDS | {"extra"}))
def test_the_fast_path_never_accepts_what_the_precise_path_rejects(kind, changes):
    event = changed(kind, changes)
    if event is not None and checks._FAST_CHECKS[kind](event):
        precise(event)            # must not raise


@settings(max_examples=600, deadline=None)
@given(kind=st.sampled_from(sorted(VALID)), changes=changes_of(FIELDS))
def test_the_fast_path_accepts_whatever_the_precise_path_accepts(kind, changes):
    event = changed(kind, changes)
    if event is None:
        return
    try:
        precise(event)
    except wire.WireError:
        return
    assert checks._FAST_CHECKS[kind](event), event


@pytest.mark.parametrize("field, value, message", [
    ("seq", -1, "seq: must be >= 0"),
    ("ts", math.nan, "ts: must be finite"),
    ("raw_bs", True, "raw_bs: must be an integer"),
    ("mode", "fast", "mode: 'fast' is not one of graph, padded, eager"),
    ("reason", "sleepy", "reason: 'sleepy' is not a known reason"),
    ("ts", 1.7e12, "ts: 1700000000000 is after 2100-01-01: it looks like milliseconds since the epoch; "
                   "send unix seconds \\(divide by 1000\\)"),
    ("ts", 1.7e18, "ts: .* looks like nanoseconds"),
    ("ts", 1e19, "ts: 1e\\+19 is after 2100-01-01: not a time in unix seconds"),
    ("duration_s", 1e308, "duration_s: must be <= 2.592e\\+06"),
    ("num_tokens", 2**62, "num_tokens: must be <= 1.67772e\\+07"),
    ("raw_bs", 2**31, "raw_bs: must be <= 1.04858e\\+06"),
])
def test_a_bad_field_is_named_in_the_error(field, value, message):
    with pytest.raises(wire.WireError, match=message):
        wire.validate_event(dict(STEP, **{field: value}))


def test_cross_field_rules_hold_on_the_fast_path_too():
    with pytest.raises(wire.WireError, match="graph_bs: a padded step replays a graph larger than raw_bs"):
        wire.validate_event(dict(STEP, graph_bs=5))
    with pytest.raises(wire.WireError, match="reason: an eager step needs a reason"):
        wire.validate_event(dict(STEP, mode="eager", graph_bs=None))
    with pytest.raises(wire.WireError, match="kind: 'teleport' is not one of"):
        wire.validate_event(dict(STEP, kind="teleport"))
    with pytest.raises(wire.WireError, match="must be a JSON object"):
        wire.validate_event([STEP])


@pytest.mark.parametrize("kind", [{}, [], None, 3, "teleport"])
def test_a_kind_that_is_not_a_known_string_is_a_wire_error(kind):
    with pytest.raises(wire.WireError, match="kind: "):
        wire.validate_event({"kind": kind, "seq": 0, "ts": 0.0})


def test_a_phase_or_capture_of_unknown_length_is_null_not_zero():
    wire.validate_event({**VALID["phase"], "duration_s": None, "provenance": "log", "rank": "TP1"})
    wire.validate_event({**VALID["capture"], "duration_s": None, "provenance": "log"})


def test_provenance_is_one_of_the_vocabulary():
    with pytest.raises(wire.WireError) as info:
        wire.validate_event({**VALID["phase"], "provenance": "guessed"})
    assert info.value.field == "provenance"
    assert wire.default_provenance("vllm-log") == "log"
    assert wire.default_provenance("runner") == "measured"


def test_a_failed_run_end_can_say_where_it_failed():
    wire.validate_event({**VALID["run_end"], "status": "failed", "error": "CUDA out of memory",
                         "rank": "TP1", "phase": "capture", "graph_bs": 256})
    with pytest.raises(wire.WireError) as info:
        wire.validate_event({**VALID["run_end"], "phase": "Capture Graphs"})
    assert info.value.field == "phase"


SAMPLED = {"seq": 9, "ts": 1.0, "kind": "step_counts", "stage": "decode", "mode": "graph", "reason": None,
           "count": 5, "num_tokens": 14, "padded_tokens": 0, "duration_s": 0.005,
           "batch_sizes": {"2": {"count": 3, "num_tokens": 6, "padded_tokens": 0, "duration_s": 0.003},
                           "4": {"count": 2, "num_tokens": 8, "padded_tokens": 0, "duration_s": 0.002}}}


def test_step_counts_split_by_batch_size_are_valid():
    wire.validate_event(SAMPLED)


@pytest.mark.parametrize("change, field", [
    ({"count": 6}, "batch_sizes"),                                              # parts add up to 5
    ({"batch_sizes": {"02": SAMPLED["batch_sizes"]["2"]}}, "batch_sizes"),       # not a batch size
    ({"batch_sizes": {}}, "batch_sizes"),
    ({"batch_sizes": {"5": {"count": 5, "num_tokens": 14, "padded_tokens": 0}}}, "batch_sizes.5.duration_s"),
    ({"batch_sizes": {"5": {"count": 0, "num_tokens": 14, "padded_tokens": 0, "duration_s": 0.1}}},
     "batch_sizes.5.count"),
])
def test_batch_sizes_that_do_not_add_up_name_the_field(change, field):
    with pytest.raises(wire.WireError) as info:
        wire.validate_event({**SAMPLED, **change})
    assert info.value.field == field


def test_a_run_may_say_its_version_and_graph_sampling():
    record = {"run_id": "r", "name": "r", "source": "runner", "started_at": 1.0, "backend": "cuda",
              "model": "m", "device": "d", "version": "v2.3.1", "graph_sample": 16}
    wire.validate_run(record)
    with pytest.raises(wire.WireError, match="graph_sample"):
        wire.validate_run({**record, "graph_sample": 0})
