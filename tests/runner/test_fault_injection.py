"""Fault injection for the post-mortem's evaluation runs: a slow weight load, one slow
capture size, a GPU memory cap. Each shows in the events as the cause it simulates, and
the run's config records it."""


import pytest
import torch

from replayscope.app.cli import main
from replayscope.contract.events_file import read_events_file

torch.set_num_threads(1)


def run(tmp_path, capsys, *argv):
    events = tmp_path / "run.jsonl"
    code = main(["run", "--backend", "static", "--preset", "tiny", "--workload", "decode-only", "--steps", "20",
                 "--quiet", "--events", str(events), *argv])
    err = capsys.readouterr().err
    if code != 0:
        return code, err, None, []
    record, lines, _ = read_events_file(events)
    return code, err, record, lines


def test_a_slow_capture_size_takes_the_extra_seconds(tmp_path, capsys):
    code, _, record, events = run(tmp_path, capsys, "--capture-sizes", "1,2,4,8", "--slow-capture", "4:0.4")
    assert code == 0
    times = {e["graph_bs"]: e["duration_s"] for e in events if e["kind"] == "capture"}
    assert times[4] >= 0.4
    assert max(t for bs, t in times.items() if bs != 4) < 0.4
    assert record["config"]["slow_capture"] == {"4": 0.4}


def test_a_slow_load_lasts_as_long_as_the_bytes_at_that_rate(tmp_path, capsys):
    code, _, record, events = run(tmp_path, capsys, "--slow-load-mbps", "1")
    load = next(e for e in events if e["kind"] == "phase" and e["phase"] == "load_weights")
    assert load["duration_s"] >= load["mem_bytes"] / 1e6
    assert record["config"]["slow_load_mbps"] == 1.0
    assert record["config"]["weights"] == "random"


def test_a_memory_cap_needs_a_gpu(tmp_path, capsys):
    code, err, _, _ = run(tmp_path, capsys, "--memory-cap-gib", "2")
    assert code == 2 and "--memory-cap-gib caps GPU memory: it needs a CUDA device" in err


@pytest.mark.parametrize("argv, message", [
    (["--slow-capture", "8"], "--slow-capture takes SIZE:SECONDS[,SIZE:SECONDS...], got '8'"),
    (["--slow-capture", "8:-1"], "--slow-capture takes SIZE:SECONDS with SIZE >= 1 and 0 <= SECONDS < 3600"),
    (["--slow-capture", "0:1"], "--slow-capture takes SIZE:SECONDS with SIZE >= 1 and 0 <= SECONDS < 3600"),
    (["--slow-load-mbps", "0"], "--slow-load-mbps must be positive, got 0.0"),
    (["--memory-cap-gib", "-1"], "--memory-cap-gib must be positive, got -1.0"),
])
def test_bad_fault_injection_values_are_refused_before_anything_runs(tmp_path, capsys, argv, message):
    code, err, _, _ = run(tmp_path, capsys, *argv)
    assert code == 2 and message in err
    assert not (tmp_path / "run.jsonl").exists()


@pytest.mark.gpu
def test_a_memory_cap_makes_the_largest_captures_fail_out_of_memory(tmp_path):
    """In its own process: a per-process memory fraction cannot be lifted, and would starve the
    GPU tests that run after it in this one."""
    import subprocess
    import sys
    from pathlib import Path

    events = tmp_path / "run.jsonl"
    done = subprocess.run([sys.executable, "-m", "replayscope", "run", "--backend", "cuda", "--preset", "1b",
                           "--workload", "decode-only", "--steps", "20", "--quiet", "--events", str(events),
                           "--memory-cap-gib", "2.6", "--capture-sizes", "1,8,32,256,512"],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=240)
    record, recorded, _ = read_events_file(events)
    failed = [e for e in recorded if e["kind"] == "capture" and e["status"] == "failed"]
    assert failed and all("out of memory" in e["error"].lower() for e in failed), done.stderr[-2000:]
    assert {e["graph_bs"] for e in failed} >= {256, 512}          # the largest graphs never fit
    assert record["config"]["memory_cap_bytes"] == int(2.6 * 2**30)
    end = recorded[-1]
    assert end["kind"] == "run_end"
    # Whatever still needs memory after the captures may fail too; the run then says so.
    assert end["status"] == "finished" or "out of memory" in end["error"].lower()
