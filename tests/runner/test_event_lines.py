"""The events file's lines: a step event of plain values is written by a template (issue 37:
the sink's JSON was the largest per-event cost of a run), byte for byte what json.dumps writes;
anything else goes to json.dumps. A step queued in the emitter reaches the file as its line made
from its queued values (``step_line``), the same bytes, no event dict."""

import itertools
import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from replayscope.runner import emitter as emitter_module
from replayscope.contract import events_file
from replayscope.runner import event_records
from replayscope.runner.emitter import Emitter
from replayscope.contract.events_file import STEP_KEYS, event_line, event_lines, read_events_file, step_line
from replayscope.contract.sinks import JsonlSink
from tests.runner.test_emitter import FakeTiming, ListSink, run_record
from tests.runner.reference import python_recorder

STEP = {"seq": 7, "ts": 1764760000.123456, "kind": "step", "stage": "decode", "mode": "padded", "raw_bs": 5,
        "graph_bs": 8, "num_tokens": 5, "padded_tokens": 3, "reason": None, "duration_s": 0.00123}

texts = st.text(max_size=12)
ints = st.one_of(st.integers(-2**70, 2**70), st.booleans())
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 5e-324, 1e300]))
values = st.one_of(st.none(), ints, floats, texts)


@st.composite
def step_like(draw):
    """Step events, mostly plain, some with a value of another type, an extra key or another order."""
    event = {"seq": draw(st.integers(0, 2**63)), "ts": draw(floats), "kind": "step", "stage": draw(texts),
             "mode": draw(st.sampled_from(["graph", "padded", "eager"])), "raw_bs": draw(ints),
             "graph_bs": draw(st.one_of(st.none(), ints)), "num_tokens": draw(ints), "padded_tokens": draw(ints),
             "reason": draw(st.one_of(st.none(), texts)), "duration_s": draw(st.one_of(st.none(), floats))}
    if draw(st.booleans()):
        event[draw(st.sampled_from(STEP_KEYS))] = draw(values)
    if draw(st.integers(0, 5)) == 0:
        event["evidence"] = draw(texts)
    if draw(st.integers(0, 5)) == 0:
        event = dict(reversed(list(event.items())))
    return event


@settings(max_examples=400, deadline=None)
@given(step_like())
def test_every_event_line_is_what_json_dumps_writes(event):
    assert event_line(event) == json.dumps(event) + "\n"


def test_a_plain_step_event_is_written_without_json_dumps(monkeypatch):
    plain = [STEP, dict(STEP, reason="custom:warm-up", graph_bs=None, duration_s=None, seq=8)]
    quirky = [dict(STEP, ts=math.nan), dict(STEP, raw_bs=True), dict(STEP, evidence="x"), {"kind": "phase", **STEP}]
    dumps = json.dumps
    expected = "".join(dumps(e) + "\n" for e in plain + quirky)
    through_dumps = []
    monkeypatch.setattr(events_file.json, "dumps", lambda event: through_dumps.append(event) or dumps(event))
    assert event_lines(plain + quirky) == expected
    assert through_dumps == quirky                # the plain steps took the template, the others json.dumps


# -- a step's line from the emitter's queued values (no event dict) -------------------------------

odd = st.one_of(values, st.lists(ints, max_size=2), st.tuples(ints))


@st.composite
def queued_steps(draw):
    """(seq, ts, fields, duration) as a step is queued: mostly plain, some odd values anywhere."""
    fields = [draw(texts), draw(st.sampled_from(["graph", "padded", "eager"])), draw(ints),
              draw(st.one_of(st.none(), ints)), draw(ints), draw(ints), draw(st.one_of(st.none(), texts)),
              draw(st.one_of(st.none(), texts))]
    if draw(st.booleans()):
        fields[draw(st.integers(0, 7))] = draw(odd)
    seq = draw(st.one_of(st.integers(0, 2**63), st.just(True)))
    return seq, draw(floats), tuple(fields), draw(st.one_of(st.none(), floats, ints))


@settings(max_examples=500, deadline=None)
@given(queued_steps())
def test_a_steps_line_from_its_queued_values_is_json_dumps_of_the_event_the_emitter_makes(queued):
    seq, ts, fields, duration = queued
    event = event_records.convert(seq, ts, "step", fields, duration)
    assert step_line(seq, ts, fields, duration) == json.dumps(event) + "\n"
    assert step_line(seq, ts, fields, duration) == json.dumps(event) + "\n"      # its fields' text kept


def test_an_events_file_gets_each_step_as_its_line_and_the_same_events_as_any_other_sink(tmp_path, monkeypatch):
    """The file sink takes a step's line made from its queued values: no event dict per step, and
    the file holds, line for line, json.dumps of the events a dict-taking sink gets."""
    def steps():
        return [(("decode", "graph", 8, 8, 8, 0, None, None), 0.002),
                (("decode", "padded", 5, 8, 5, 3, None, None), None),
                (("prefill", "eager", 3, None, 40, 0, "prefill", None), FakeTiming(0.004)),
                (("decode", "eager", 2, None, 2, 0, "custom:warm-up", "the caller said so"), 3)]
    path = tmp_path / "events.jsonl"
    converted = []
    convert = event_records.convert
    monkeypatch.setattr(event_records, "convert", lambda *item: converted.append(item) or convert(*item))
    to_file, to_list = (python_recorder(Emitter(JsonlSink(str(path)), run_record())),
                        python_recorder(Emitter(ListSink(), run_record())))   # the clock below is theirs
    for emitter in (to_file, to_list):
        clock = (1764760000.0 + i / 7 for i in itertools.count())     # the same ts for both
        monkeypatch.setattr(emitter_module, "_now", lambda: next(clock))
        emitter.sink.open(emitter.run)
        emitter.emit("phase", phase="capture", duration_s=1.5)
        queued = steps()
        for fields, timing in queued:
            emitter.step_fields(fields, timing)
        emitter.step(*queued[1][0][:7], 0.001, queued[1][0][7])
        queued[2][1].is_ready = True
        emitter._flush()
    assert [kind for _, _, kind, _, _ in converted] == ["phase"] * 2 + ["step"] * 5   # steps: the dict-taking sink's only
    lines = path.read_text().splitlines()[1:]
    assert lines == [json.dumps(event) for event in to_list.sink.events]
    assert len(lines) == 6 and read_events_file(path).events == to_list.sink.events
    to_file.step_fields(("decode", "eager", 2, None, 2, 0, "x", object()), None)  # JSON cannot write it: lost, as before
    to_file._flush()
    assert to_file.lost == 1 and len(path.read_text().splitlines()) == 7


def test_a_flush_to_an_events_file_brings_no_garbage_collection(tmp_path):
    """Ready steps are strings until written (no wire dict, no tuple kept per step): writing a
    traced run's steps to its file starts no collection of the heap (issue 37: the flush's wire
    events brought one every ~850 steps)."""
    import gc

    emitter = Emitter(JsonlSink(str(tmp_path / "events.jsonl")), run_record())
    emitter.sink.open(emitter.run)
    for i in range(20000):
        emitter.step("decode", ("graph", "padded", "eager")[i % 3], 8, 8, 8, 0, None, 0.001 * (i % 7), None)
    collections = []

    def count(phase, info):
        if phase == "start":
            collections.append(info["generation"])
    gc.collect()
    gc.callbacks.append(count)
    try:
        emitter._flush()
    finally:
        gc.callbacks.remove(count)
    assert emitter.written == 20000
    assert collections == []
