"""The events file (replayscope.contract.events_file): written and read in one place, errors name the line."""

from __future__ import annotations

import json

import pytest

from replayscope.contract.errors import ReplayscopeError
from replayscope.contract.events_file import (EventsFileWriter, append_events, read_events_file,
                                              read_events_from, write_events_file)

RUN = {"run_id": "ev-1", "name": "events", "source": "runner", "started_at": 1.0, "backend": "static",
       "model": "tiny", "device": "cpu", "config": {}}


def step(seq: int) -> dict:
    return {"seq": seq, "ts": 1.0 + seq, "kind": "step", "stage": "decode", "mode": "graph", "raw_bs": 4,
            "graph_bs": 4, "num_tokens": 4, "padded_tokens": 0, "reason": None, "duration_s": 0.01}


def test_what_the_writer_writes_the_reader_reads_back(tmp_path):
    path = tmp_path / "run.jsonl"
    writer = EventsFileWriter(path, RUN)
    writer.write([step(0), step(1)])
    writer.write([step(2)])
    writer.close()
    first = json.loads(path.read_text().splitlines()[0])
    assert first == {"kind": "run", **RUN}
    events_file = read_events_file(path)
    assert events_file.run == RUN and events_file.events == [step(0), step(1), step(2)]
    assert events_file.warnings == []


def test_appending_to_a_new_file_puts_the_run_record_first_once(tmp_path):
    path = tmp_path / "spool.jsonl"
    append_events(path, RUN, [step(0)])
    append_events(path, RUN, [step(1)])
    assert [json.loads(line).get("kind") for line in path.read_text().splitlines()] == ["run", "step", "step"]
    write_events_file(path, RUN, [step(1)])                 # what is left after a partial re-send
    assert read_events_file(path).events == [step(1)]


def test_events_are_read_from_an_offset_a_batch_at_a_time(tmp_path):
    path = tmp_path / "spool.jsonl"
    append_events(path, RUN, [step(0), step(1), step(2)])
    first, offset = read_events_from(path, 0, limit=2)
    assert first == [step(0), step(1)]
    with open(path, "a") as handle:
        handle.write(json.dumps(step(3)) + "\n" + json.dumps(step(4))[:20])   # the last line is still being written
    rest, end = read_events_from(path, offset)
    assert rest == [step(2), step(3)]
    assert read_events_from(path, end) == ([], end)


def test_a_last_line_cut_off_mid_write_is_skipped_with_a_warning(tmp_path):
    path = tmp_path / "died.jsonl"
    write_events_file(path, RUN, [step(0), step(1)])
    path.write_text(path.read_text() + json.dumps(step(2))[:25])
    events_file = read_events_file(path)
    assert events_file.events == [step(0), step(1)]
    assert events_file.warnings == [f"{path}:4: cut off (the writer stopped mid-line); skipped"]


def test_a_bad_line_before_the_last_is_an_error_naming_it(tmp_path):
    path = tmp_path / "bad.jsonl"
    write_events_file(path, RUN, [step(0)])
    path.write_text(path.read_text() + "{not json\n" + json.dumps(step(1)) + "\n")
    with pytest.raises(ReplayscopeError, match=r"bad\.jsonl:3: not JSON"):
        read_events_file(path)


def test_an_event_against_the_wire_contract_names_its_line(tmp_path):
    path = tmp_path / "wrong.jsonl"
    write_events_file(path, RUN, [step(0), {**step(1), "mode": "sideways"}])
    with pytest.raises(ReplayscopeError, match=r"wrong\.jsonl:3: mode"):
        read_events_file(path)
    assert read_events_file(path, validate=False).events[1]["mode"] == "sideways"


@pytest.mark.parametrize("content", ["", json.dumps(step(0)) + "\n", "[1, 2]\n"])
def test_a_file_without_the_run_record_first_is_refused(tmp_path, content):
    path = tmp_path / "norun.jsonl"
    path.write_text(content)
    with pytest.raises(ReplayscopeError, match="the first line must be the run record"):
        read_events_file(path)


def test_a_directory_or_a_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(ReplayscopeError, match="is a directory"):
        read_events_file(tmp_path)
    with pytest.raises(ReplayscopeError, match="cannot read"):
        read_events_file(tmp_path / "missing.jsonl")


def test_step_events_are_written_as_the_json_encoder_writes_them_whatever_their_values():
    """A step event's line is formatted without the encoder's walk (``events_file.event_line``):
    every line is the encoder's own, character for character, and whatever the fast format cannot
    write exactly (a bool, a NaN, an infinite time, evidence, keys in another order) goes to it."""
    import itertools
    import json

    from replayscope.contract.events_file import event_line, event_lines

    def step(**changes):
        event = {"seq": 7, "ts": 1764770000.123456, "kind": "step", "stage": "decode", "mode": "padded",
                 "raw_bs": 5, "graph_bs": 8, "num_tokens": 5, "padded_tokens": 3, "reason": None,
                 "duration_s": 1.5e-05}
        event.update(changes)
        return event

    values = {"seq": [0, 2**70], "ts": [0.0, 1e16, 1.0e-7, float("nan"), float("inf")],
              "stage": ["decode", 'pre"fill\\\n', "dé\u2028c"], "raw_bs": [1, True], "graph_bs": [None, 64, 1.0],
              "reason": [None, "batch_too_large", "é \"q\""], "duration_s": [None, 0.25, 3, float("-inf"), 1e-300]}
    events = [step(**{key: value}) for key, options in values.items() for value in options]
    events += [step(evidence="largest graph replayed holds 4 rows"), step(raw_bs=False),
               {k: v for k, v in reversed(step().items())}, {"seq": 1, "ts": 2.0, "kind": "heartbeat"},
               {**step(), "kind": "step_counts"}]
    events += [step(seq=seq, mode=mode, raw_bs=bs) for seq, mode, bs in
               itertools.product((1, 99), ("graph", "eager"), (1, 512))]
    assert event_lines(events) == "".join(json.dumps(event) + "\n" for event in events)
    assert all(event_line(e) == json.dumps(e) + "\n" for e in events)
