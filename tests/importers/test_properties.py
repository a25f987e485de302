"""No log text crashes a parser, and whatever comes out fits the wire."""

from __future__ import annotations

from pathlib import Path

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replayscope.collector.importers import parse_sglang_text, parse_vllm_text
from replayscope.contract.wire import validate_event, validate_run
from tests.importers.conftest import FIXTURES, MTIME, read_fixture

PARSERS = (parse_vllm_text, parse_sglang_text)
LOGS = sorted(p.name for p in Path(FIXTURES).glob("*.log"))
# pieces of real lines, so garbage often almost matches
WORDS = ["Capture cuda graph", " begin.", " end.", " failed:", " Time elapsed: ", "elapsed=", " s.",
         " mem usage=", " avail mem=", " GB", " GiB", "bs=[1, 2, 4]", "\rCapturing batches (bs=",
         " avail_mem=", "| 3/4 [00:0", "Decode batch. #running-req: ", "cuda graph: True",
         "cuda graph: False", "Graph capturing finished in ", " secs, took ", "Loading weights took ",
         "Model loading took ", "torch.compile takes ", " in total", "**CUDAGraph Stats:**", "| 1 | 4 | 3 | ",
         "FULL", "NONE", " | 2 |", "(EngineCore_DP0 pid=1) ", "INFO 02-30 25:61:99 [x.py:1] ",
         "[2025-13-45 99:99:99 TP7] ", "[rank3]: ", "server_args=ServerArgs(", "vLLM API server version",
         "ready to roll", "Application startup complete", "RuntimeError: ", "-1e309", "1e308", "nan",
         "99999999999999999999999", "\x1b[31m", "\n", "\r", "\x00", "é", "\u2028"]

settings_ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(result) -> None:
    # the safety nets must not have been needed: a bug would hide behind them
    assert not any("importer failed" in w or "could not be read" in w for w in result.warnings), result.warnings
    for run in result.runs:
        validate_run(run.run)
        assert run.status in ("finished", "failed", "interrupted")
        seqs = [e["seq"] for e in run.events]
        assert seqs == list(range(len(seqs)))
        for event in run.events:
            validate_event(event)
        assert run.events[-1]["kind"] == "run_end"
        assert not any(w.endswith(")") and ": skipped (" in w for w in run.warnings), run.warnings
        run.summary()
    result.summary()


@settings_
@given(st.text())
def test_random_text_never_crashes(text):
    for parse in PARSERS:
        check(parse(text, mtime=MTIME))


@settings_
@given(st.lists(st.sampled_from(WORDS) | st.text(max_size=8), max_size=60))
def test_near_miss_lines_never_crash(parts):
    text = "".join(parts)
    for parse in PARSERS:
        check(parse(text, mtime=MTIME))


@settings_
@given(st.sampled_from(LOGS), st.floats(min_value=0, max_value=1))
def test_any_truncation_of_a_real_log_imports_cleanly(name, where):
    text = read_fixture(name)
    cut = text[:int(len(text) * where)]
    for parse in PARSERS:
        check(parse(cut, mtime=MTIME))


@settings_
@given(st.sampled_from(LOGS), st.lists(st.tuples(st.floats(0, 1), st.binary(min_size=1, max_size=6)),
                                       min_size=1, max_size=8))
def test_byte_noise_in_a_real_log_imports_cleanly(name, noise):
    data = bytearray((FIXTURES / name).read_bytes())
    for where, junk in noise:
        i = int(len(data) * where)
        data[i:i] = junk
    text = bytes(data).decode("utf-8", errors="replace")
    for parse in PARSERS:
        check(parse(text, mtime=MTIME))


def _one_pass(engine, text, cut=None):
    """Every event the parser emits for ``text``; with ``cut``, the parser is saved after
    ``cut`` lines (as follow saves it) and a new one goes on from the saved state."""
    from replayscope.collector.importers.parser import LogParser
    from replayscope.collector.importers.follow import dump_parser, load_parser
    from replayscope.collector.importers.lines import split_lines
    from replayscope.collector.importers.years import infer_year

    year = infer_year(text, MTIME)
    lines, ends_mid_line = split_lines(text)
    first = LogParser(engine, year=year, run_id=lambda i, _line: f"run-{i}", fallback_ts=MTIME)
    for raw in lines[:cut]:
        first.feed(raw)
    if cut is None:
        first.finish(ends_mid_line=ends_mid_line)
        return [e for run in first.runs for e in run.events]
    out = []
    for run in first.runs:            # follow sends and drops a run's events as they come
        out += run.events
        run.events.clear()
    saved = load_parser(dump_parser(first), engine)
    assert saved is not None
    before = len(first.runs) - (1 if saved["current"] is not None else 0)
    second = LogParser(engine, year=year, run_id=lambda i, _line: f"run-{before + i}", fallback_ts=MTIME)
    second.resume(saved)
    for raw in lines[cut:]:
        second.feed(raw)
    second.finish(ends_mid_line=ends_mid_line)
    return out + [e for run in second.runs for e in run.events]


@pytest.mark.parametrize("name", LOGS)
def test_a_parser_saved_and_resumed_anywhere_gives_the_events_of_one_pass(name):
    from replayscope.collector.importers.sglang_log import ENGINE as SGLANG
    from replayscope.collector.importers.vllm_log import ENGINE as VLLM

    engine = SGLANG if name.startswith("sglang") else VLLM
    text = read_fixture(name)
    whole = _one_pass(engine, text)
    count = len(text.splitlines())
    for cut in sorted({1, count // 3, count // 2, count - 1}):
        assert _one_pass(engine, text, cut) == whole, f"resumed after line {cut}"
