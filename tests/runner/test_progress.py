"""replayscope.runner.progress: tqdm's lines on stderr, a tqdm bar redrawn in place on a terminal, plain
and periodic lines elsewhere, silent when disabled; cheap enough to call on every step."""

import io
import re

import pytest

from replayscope.runner.progress import PLAIN_INTERVAL_S, TTY_INTERVAL_S, Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_terminal_gets_one_line_redrawn_in_place_and_ended_at_close():
    stream, clock = Terminal(), FakeClock()
    bar = Progress("Capturing CUDA graphs (decode)", 4, stream=stream, clock=clock)
    for size in (8, 4, 2, 1):
        bar.describe(f"bs={size} capturing")
        clock.now += 0.5
        bar.update(note=f"bs={size} 0.50s")
    bar.close()
    text = stream.getvalue()
    assert "\n" not in text[:-1] and text.endswith("\n")
    frames = text[:-1].split("\r")[1:]
    assert frames[0].rstrip() == "Capturing CUDA graphs (decode):   0%|          | 0/4 [00:00<?, ?it/s, bs=8 capturing]"
    assert frames[-1].rstrip() == ("Capturing CUDA graphs (decode): 100%|##########| 4/4 "
                                   "[00:02<00:00,  2.00it/s, bs=1 0.50s]")


def test_a_shorter_redraw_blanks_the_rest_of_the_longer_line_before_it():
    stream, clock = Terminal(), FakeClock()
    bar = Progress("Loading", 2, stream=stream, clock=clock)
    bar.describe("a rather long note about the first item")
    clock.now += 1
    bar.update(note="ok")
    first, second = stream.getvalue().split("\r")[1:]
    assert len(second) == len(first) and second.endswith(" ")


def test_elsewhere_plain_lines_come_at_most_once_per_interval_plus_the_first_and_the_last():
    stream, clock = io.StringIO(), FakeClock()
    bar = Progress("Running mixed workload", 1000, unit="steps", stream=stream, clock=clock)
    for step in range(1, 1001):
        clock.now += 0.012                                 # 12 s in all
        bar.update_to(step, lambda: "graph 50% padded 30% eager 20%")
    bar.close()
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert len(lines) == 4                                 # at 0.012 s, ~5 s, ~10 s, and the end
    assert lines[0].startswith("Running mixed workload:   0%|          | 1/1000 [00:00<")
    assert lines[-1] == ("Running mixed workload: 100%|##########| 1000/1000 [00:12<00:00, 83.33steps/s, "
                         "graph 50% padded 30% eager 20%]")
    assert PLAIN_INTERVAL_S > TTY_INTERVAL_S


def test_the_note_of_a_step_loop_is_built_only_when_a_line_is_drawn():
    clock = FakeClock()
    calls = []
    bar = Progress("Steps", None, unit="steps", stream=io.StringIO(), clock=clock)
    for step in range(10_000):
        clock.now += 0.0001
        bar.update_to(step, lambda: calls.append(step) or "note")
    assert len(calls) == 1


def test_without_a_total_the_line_counts_and_gives_the_rate():
    stream, clock = io.StringIO(), FakeClock()
    bar = Progress("Running mixed workload for 60s", None, unit="steps", stream=stream, clock=clock)
    clock.now += 4
    bar.update_to(400)
    bar.close()
    assert stream.getvalue().splitlines()[-1] == "Running mixed workload for 60s: 400 [00:04, 100.00steps/s]"


def test_a_slow_item_shows_seconds_per_item():
    stream, clock = io.StringIO(), FakeClock()
    bar = Progress("Compiling and capturing CUDA graphs (decode)", 3, stream=stream, clock=clock)
    clock.now += 18
    bar.update(note="bs=32 18.00s")
    assert "1/3 [00:18<00:36, 18.00s/it, bs=32 18.00s]" in stream.getvalue().splitlines()[-1]


def test_reset_sets_a_total_learnt_late_and_shows_zero_of_it():
    stream, clock = io.StringIO(), FakeClock()
    bar = Progress("Building random weights (3b)", unit="tensors", stream=stream, clock=clock)
    assert stream.getvalue() == ""                          # nothing to say yet
    bar.reset(255)
    assert stream.getvalue().startswith("Building random weights (3b):   0%|          | 0/255 [00:00<?, ?tensors/s]")


@pytest.mark.parametrize("stream", [io.StringIO(), Terminal()])
def test_a_disabled_progress_writes_nothing(stream):
    bar = Progress("Capturing CUDA graphs (decode)", 2, enabled=False, stream=stream)
    bar.describe("bs=2 capturing")
    bar.update(note="bs=2 ok")
    bar.update_to(2, lambda: "x")
    bar.close()
    assert stream.getvalue() == ""


def test_nothing_is_drawn_after_close():
    stream = io.StringIO()
    bar = Progress("Steps", 2, stream=stream)
    bar.update()
    bar.close()
    before = stream.getvalue()
    bar.update()
    bar.close()
    assert stream.getvalue() == before and len(before.splitlines()) == 1


@pytest.mark.parametrize("seconds, text", [(0, "00:00"), (59.9, "00:59"), (61, "01:01"), (3725, "1:02:05")])
def test_the_elapsed_time_is_written_as_tqdm_writes_it(seconds, text):
    clock = FakeClock()
    bar = Progress("Steps", None, unit="steps", stream=io.StringIO(), clock=clock)
    clock.now += seconds
    assert f": 0 [{text}, " in bar.line()


def test_the_default_stream_is_stderr_at_the_time_the_line_is_made(capsys):
    Progress("Loading", 1).update()
    err = capsys.readouterr().err
    assert re.match(r"Loading: 100%\|##########\| 1/1 \[00:00<00:00, +[\d.]+it/s\]\n$", err)
