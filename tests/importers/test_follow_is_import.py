"""``follow`` ≡ ``import``: the same text gives the same run facts whether it is imported whole
or followed as it grows, in any chunks (a chunk may end in the middle of a line) with any
pauses between them, pauses longer than every timeout follow has (the early post of a slow
start, heartbeats).

The follow side is the real loop (``follow``: LogTail on a file that grows, LiveImport,
its flushes and re-posts) with a clock and a sleep that are the test's: each sleep appends
the next chunk and lets the chosen silence pass. What is compared is what a store would
keep: each run's record (its description, as last sent) and its events, minus what names
the run (run_id, name) and what only says the follower was alive (heartbeats, and so seq).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replayscope.collector.importers.parser import parse_text
from replayscope.collector.importers.follow import HEARTBEAT_S, POST_AFTER_S, follow
from replayscope.collector.importers.sglang_log import ENGINE as SGLANG
from replayscope.collector.importers.vllm_log import ENGINE as VLLM
from tests.importers.conftest import FIXTURES, MTIME, read_fixture

# Every fixture but those whose year only a vLLM version printed after the first stamp decides:
# import reads the head first, follow decides at the first stamp with what it has read
# (docs/importing.md says so).
LATE_VERSION_YEAR = {"vllm_v025_v2_offline_real.log", "vllm_v025_v2_serve_ctrl_c_real.log"}
LOGS = sorted(p.name for p in FIXTURES.glob("*.log") if p.name not in LATE_VERSION_YEAR)
IDLE_EXIT = 10**7                      # longer than any silence below: follow ends at the end of the text
SILENCES = st.sampled_from([0.0, 1.0, HEARTBEAT_S + 1, POST_AFTER_S + 10, 3600.0, 10**5])

# The TP=2 case of issue 22: no device in the banner, 130 s of silence before the capture lines.
# Posted early, the run had device "unknown" and both ranks' capture added up (12.0 s for 6.00 s).
TP2 = (
    "(APIServer pid=1) INFO 06-15 12:00:00 [api_server.py:1805] vLLM API server version 0.10.1\n"
    "(EngineCore_DP0 pid=10) INFO 06-15 12:00:02 [core.py:77] Initializing a V1 LLM engine (v0.10.1) with config: "
    "model='meta-llama/Llama-3.1-70B-Instruct', enforce_eager=False, tensor_parallel_size=2\n"
    "(Worker_TP1 pid=21) INFO 06-15 12:00:31 [gpu_model_runner.py:2007] Model loading took 65.60 GiB memory and "
    "28.900000 seconds\n"
    "(Worker_TP0 pid=20) INFO 06-15 12:00:32 [gpu_model_runner.py:2007] Model loading took 65.50 GiB memory and "
    "29.200000 seconds\n"
    "(Worker_TP1 pid=21) INFO 06-15 12:02:46 [gpu_model_runner.py:2708] Graph capturing finished in 6 secs, "
    "took 0.52 GiB\n"
    "(Worker_TP0 pid=20) INFO 06-15 12:02:46 [gpu_model_runner.py:2708] Graph capturing finished in 6 secs, "
    "took 0.50 GiB\n"
    "(APIServer pid=1) INFO:     Application startup complete.\n")


def engine_of(name: str):
    return SGLANG if name.startswith("sglang") else VLLM


def comparable(record: dict, events: list[dict]) -> tuple:
    description = {k: v for k, v in record.items() if k not in ("run_id", "name")}
    return description, [{k: v for k, v in e.items() if k != "seq"} for e in events if e["kind"] != "heartbeat"]


def imported(engine, text: str, name: str) -> list[tuple]:
    result = parse_text(engine, text, path=name, mtime=MTIME, digest=None)
    return [comparable(run.run, run.events) for run in result.runs]


class Collected:
    """The sinks follow opens: each run's last record and every event it was sent."""

    def __init__(self):
        self.runs: list[dict] = []

    def __call__(self, record):
        run = {"record": record, "events": []}
        self.runs.append(run)

        class Sink:
            def write(self, events):
                run["events"].extend(events)

            def update_run(self, newer):
                run["record"] = newer

            def close(self):
                pass
        return Sink()


def followed(engine, text: str, name: str, cuts: list[float], silences: list[float], folder) -> list[tuple]:
    data = text.encode("utf-8")
    points = sorted({int(len(data) * c) for c in cuts} | {len(data)})
    pieces = [data[a:b] for a, b in zip([0] + points, points) if b > a]
    path = folder / name
    path.write_bytes(pieces[0] if pieces else b"")
    os.utime(path, (MTIME, MTIME))                     # the file's date import reads the year against
    rest = list(pieces[1:])
    now = [MTIME]

    def sleep(_interval):
        if rest:
            with open(path, "ab") as handle:
                handle.write(rest.pop(0))
            now[0] += silences[len(rest) % len(silences)]
        else:
            now[0] += 2 * IDLE_EXIT                     # the text is over: let follow see it idle

    sinks = Collected()
    follow(engine, str(path), sinks, state_path=None, interval=1.0, idle_exit=IDLE_EXIT,
           clock=lambda: now[0], sleep=sleep)
    return [comparable(run["record"], run["events"]) for run in sinks.runs]


settings_ = settings(max_examples=40, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@settings_
@given(name=st.sampled_from(LOGS), cuts=st.lists(st.floats(0, 1), max_size=6),
       silences=st.lists(SILENCES, min_size=1, max_size=6))
def test_a_fixture_followed_in_any_chunks_with_any_silences_gives_the_runs_import_gives(
        name, cuts, silences, tmp_path_factory):
    text = read_fixture(name)
    engine = engine_of(name)
    assert followed(engine, text, name, cuts, silences, tmp_path_factory.mktemp("f")) == imported(engine, text, name)


@settings_
@given(cuts=st.lists(st.floats(0, 1), max_size=6), silences=st.lists(SILENCES, min_size=1, max_size=6))
def test_the_tp2_log_with_a_long_silence_before_capture_follows_as_it_imports(cuts, silences, tmp_path_factory):
    folder = tmp_path_factory.mktemp("f")
    assert followed(VLLM, TP2, "tp2.log", cuts, silences, folder) == imported(VLLM, TP2, "tp2.log")


def test_the_tp2_log_silent_for_130_s_before_capture_has_its_device_and_rank_0s_capture(tmp_path):
    """The issue's case exactly: everything up to the weights, 130 s of silence, then the rest."""
    cut = TP2.index("(Worker_TP1 pid=21) INFO 06-15 12:02:46") / len(TP2)
    (record, events), = followed(VLLM, TP2, "tp2.log", [cut], [130.0], tmp_path)
    assert record["device"] == "cuda"
    assert record["config"]["rank_headline"]["capture"] == "TP0"
    captures = [(e["rank"], e["duration_s"]) for e in events if e["kind"] == "phase" and e["phase"] == "capture"]
    assert sorted(captures) == [("TP0", 6.0), ("TP1", 6.0)]
    assert [(record, events)] == imported(VLLM, TP2, "tp2.log")
