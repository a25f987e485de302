"""The events file's lines: a step event of plain values is written by a template (issue 37:
the sink's JSON was the largest per-event cost of a run), byte for byte what json.dumps writes;
anything else goes to json.dumps."""

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from runner import events_file
from runner.events_file import STEP_KEYS, event_line, event_lines

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
