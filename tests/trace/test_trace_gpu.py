"""``replayscope trace`` on a real GPU, around three programs no one wrote a graph hook for:
transformers generation under torch.compile(mode="reduce-overhead") (graphs, and Inductor
skipping them), a hand-written padded decode loop (under sync debug mode "error": tracing adds
no device synchronisation), and replayscope's own runner (traced modes equal its telemetry).

Run on the device machine: ``python3 -m pytest -q -m gpu tests/trace`` (skipped without CUDA).
The trace is started as ``python -m runner.trace`` (what ``replayscope trace`` runs), so the
device machine needs no installed command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner import wire
from runner.trace.causes import inductor_skip_reason

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
       "TOKENIZERS_PARALLELISM": "false"}
INDUCTOR_REASONS = {"mutated_inputs", "cpu_device", "dynamic_shapes", "incompatible_op", "non_tensor_inputs",
                    "rerecord_limit"}


def trace(events: Path, *argv: str, step: str | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "runner.trace", "--events", str(events)]
    command += ["--step", step] if step else []
    result = subprocess.run([*command, "--", *argv], cwd=REPO, env=ENV, capture_output=True, text=True,
                            timeout=timeout)
    print(result.stdout[-3000:], result.stderr[-6000:], sep="\n")
    return result


def read_run(path: Path) -> tuple[dict, list[dict]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    run, events = lines[0], lines[1:]
    assert run.pop("kind") == "run"
    wire.validate_run(run)
    for event in events:
        wire.validate_event(event)
    return run, events


def of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["kind"] == kind]


def test_transformers_static_cache_generation_under_reduce_overhead_captures_and_replays(tmp_path):
    events = tmp_path / "hf.jsonl"
    result = trace(events, sys.executable, str(PROGRAMS / "hf_generate.py"), "graphs")
    assert result.returncode == 0
    run, recorded = read_run(events)
    assert "transformers generate" in run["config"]["trace"]["recipes"]
    captures = [c for c in of(recorded, "capture") if c["variant"].startswith("inductor")]
    assert captures and all(c["status"] == "ok" and c["graph_bs"] == 2 for c in captures)
    steps = of(recorded, "step")
    assert (steps[0]["stage"], steps[0]["mode"], steps[0]["reason"]) == ("prefill", "eager", "prefill")
    decode = [s for s in steps if s["stage"] == "decode"]
    assert len(decode) >= 8
    graphed = [s for s in decode if s["mode"] == "graph"]
    assert len(graphed) >= len(decode) - 3, [(s["mode"], s["reason"], s.get("evidence")) for s in decode]
    assert all(s["graph_bs"] == s["raw_bs"] == 2 for s in graphed)
    assert {s["reason"] for s in decode if s["mode"] == "eager"} <= {"graph_warmup"}
    assert [p["phase"] for p in of(recorded, "phase")].count("capture") == 1
    assert "compile" in [p["phase"] for p in of(recorded, "phase")]
    assert recorded[-1]["kind"] == "run_end" and recorded[-1]["status"] == "finished"


def test_when_inductor_skips_cudagraphs_its_reason_is_recorded(tmp_path):
    events = tmp_path / "hf.jsonl"
    result = trace(events, sys.executable, str(PROGRAMS / "hf_generate.py"), "mutated")
    run, recorded = read_run(events)
    skips = [w for w in of(recorded, "warning") if w["code"] == "cudagraph_skipped"]
    assert skips, of(recorded, "warning")
    assert any(inductor_skip_reason(w["message"]) == "mutated_inputs" for w in skips)
    assert all(w["message"].startswith("Inductor: ") for w in skips)
    end = recorded[-1]
    assert end["kind"] == "run_end"
    eager = [s for s in of(recorded, "step") if s["mode"] == "eager" and s["stage"] == "decode"]
    later = [s for s in eager if s["seq"] > skips[0]["seq"]]
    assert all(s["reason"] in INDUCTOR_REASONS | {"graph_warmup"} for s in later), later
    assert all(s["evidence"].startswith("Inductor") for s in later if s["reason"] in INDUCTOR_REASONS), later
    if end["status"] == "failed":
        # e.g. "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run"
        assert result.returncode != 0 and end["error"]
    else:
        assert result.returncode == 0
        assert any(s["reason"] == "mutated_inputs" for s in later), later


def test_a_padded_decode_loop_is_traced_step_for_step_without_any_device_synchronisation(tmp_path):
    events, own = tmp_path / "decode.jsonl", tmp_path / "own.json"
    result = trace(events, sys.executable, "-c",
                   f"from tests.trace.programs.padded_decode import main; main({str(own)!r})",
                   step="tests.trace.programs.padded_decode:Decoder.decode_step")
    assert result.returncode == 0          # the steady state ran under sync debug mode "error"
    _run, recorded = read_run(events)
    captures = of(recorded, "capture")
    assert sorted(c["graph_bs"] for c in captures) == [1, 2, 4, 8]
    assert all(c["status"] == "ok" and c["duration_s"] > 0 and c["pool_delta_bytes"] is not None
               for c in captures)
    assert len({c["variant"] for c in captures}) == 1          # one shared pool
    assert sum(c["pool_delta_bytes"] for c in captures) > 0
    assert [p["phase"] for p in of(recorded, "phase")] == ["capture"]
    steps = of(recorded, "step")
    expected = json.loads(own.read_text())
    assert [(s["raw_bs"], s["mode"], s["graph_bs"]) for s in steps] == \
        [(e["raw_bs"], e["mode"], e["graph_bs"]) for e in expected]
    for s in steps:
        assert s["duration_s"] is not None and s["duration_s"] > 0
        if s["mode"] == "eager":
            assert (s["reason"], s["evidence"]) == ("batch_too_large",
                                                    f"batch of {s['raw_bs']}; largest captured graph holds 8")
        if s["mode"] == "padded":
            assert s["padded_tokens"] == s["graph_bs"] - s["raw_bs"]
    assert recorded[-1]["status"] == "finished"


def test_the_runners_own_modes_per_step_equal_what_the_trace_saw(tmp_path):
    traced, own = tmp_path / "trace.jsonl", tmp_path / "runner.jsonl"
    result = trace(traced, sys.executable, "-m", "app.cli", "run", "--backend", "cuda", "--preset", "tiny",
                   "--workload", "decode-only", "--steps", "150", "--capture-sizes", "1,2,4,8,16,32", "--quiet",
                   "--events", str(own), step="runner.graphs:GraphRunner.run")
    assert result.returncode == 0
    _run, recorded = read_run(traced)
    _own_run, own_events = read_run(own)
    traced_steps, own_steps = of(recorded, "step"), of(own_events, "step")
    assert len(traced_steps) == len(own_steps) == 150
    assert [(s["mode"], s["graph_bs"], s["raw_bs"]) for s in traced_steps] == \
        [(s["mode"], s["graph_bs"], s["raw_bs"]) for s in own_steps]
    assert {s["mode"] for s in own_steps} == {"graph", "padded", "eager"}
    for mine, theirs in zip(traced_steps, own_steps):
        if theirs["reason"] == "batch_too_large":
            assert mine["reason"] == "batch_too_large"
    assert sorted(c["graph_bs"] for c in of(recorded, "capture")) == [1, 2, 4, 8, 16, 32]
