"""``replayscope trace`` on a real GPU, around programs no one wrote a graph hook for:
transformers generation under torch.compile(mode="reduce-overhead") (graphs, and Inductor
skipping them), a bare program calling a compiled model at 4 batch sizes (no --step: each call
of the compiled function is a step), a hand-written padded decode loop (under sync debug mode
"error": tracing adds no device synchronisation), and replayscope's own runner (traced modes
equal its telemetry). ``test_compiled_programs.py`` runs the first two on the CPU.

Run on the device machine: ``python3 -m pytest -q -m gpu tests/trace`` (skipped without CUDA).
The trace is started as ``python -m replayscope.runner.trace`` (what ``replayscope trace`` runs), so the
device machine needs no installed command.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from replayscope.contract.events_file import read_events_file
from replayscope.runner.trace.causes import inductor_skip_reason
from tests.run_events import sampled

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
       "TOKENIZERS_PARALLELISM": "false"}


def trace(events: Path, *argv: str, step: str | None = None, time_every: int | None = None,
          timeout: int = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "replayscope.runner.trace", "--events", str(events)]
    command += ["--step", step] if step else []
    command += ["--time-every", str(time_every)] if time_every else []
    result = subprocess.run([*command, "--", *argv], cwd=REPO, env={**ENV, **(env or {})}, capture_output=True,
                            text=True, timeout=timeout)
    print(result.stdout[-3000:], result.stderr[-6000:], sep="\n")
    return result


def read_run(path: Path) -> tuple[dict, list[dict]]:
    run, events, _ = read_events_file(path)             # every line checked against the wire contract
    return run, events


def of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["kind"] == kind]


def test_transformers_static_cache_generation_under_reduce_overhead_traced_with_nothing_to_configure(tmp_path):
    """The program notes what each forward did itself; traced with no --step, the trace's steps
    and modes equal its record: prefill eager, the decode's warm-up and recording eager
    (graph_warmup), then every decode step a graph replay at bs 2."""
    events, own = tmp_path / "hf.jsonl", tmp_path / "hf-own.json"
    result = trace(events, sys.executable, str(PROGRAMS / "hf_generate.py"), "graphs", str(own))
    assert result.returncode == 0
    run, recorded = read_run(events)
    assert "transformers generate" in run["config"]["trace"]["recipes"]
    assert not [w for w in of(recorded, "warning") if w["code"] in ("hook_missing", "hook_failed")]
    expected = json.loads(own.read_text())
    steps = of(recorded, "step")
    assert [(s["stage"], s["raw_bs"], s["mode"], s["reason"]) for s in steps] == \
        [(e["stage"], e["raw_bs"], e["mode"], e["reason"]) for e in expected]
    decode = [s for s in steps if s["stage"] == "decode"]
    assert len(decode) == 11 and [s["mode"] for s in decode].count("graph") >= 8
    assert all(s["graph_bs"] == 2 for s in decode if s["mode"] == "graph")
    captures = [c for c in of(recorded, "capture") if c["variant"].startswith("inductor")]
    assert captures and all(c["status"] == "ok" and c["graph_bs"] == 2 for c in captures)
    recordings = of(recorded, "recording")
    assert recordings and recordings[0]["cause"] == "first" and recordings[0]["graph_bs"] == 2
    assert len(recordings) == len(captures)
    assert [p["phase"] for p in of(recorded, "phase")].count("capture") == 1
    assert recorded[-1]["kind"] == "run_end" and recorded[-1]["status"] == "finished"


def test_a_model_compiled_with_reduce_overhead_at_four_batch_sizes_is_traced_step_for_step_with_no_step(tmp_path):
    """A bare program calling a compiled model 6 times at each of 4 batch sizes, traced with
    nothing to configure: each call is a step; mode, reason and batch equal the program's own
    record; one recording per graph Inductor recorded, with its cause."""
    events, own = tmp_path / "sizes.jsonl", tmp_path / "sizes-own.json"
    result = trace(events, sys.executable, str(PROGRAMS / "compiled_sizes.py"), str(own))
    assert result.returncode == 0
    run, recorded = read_run(events)
    assert run["config"]["trace"]["auto_steps"]
    assert not [w for w in of(recorded, "warning") if w["code"] in ("hook_missing", "hook_failed", "no_cuda_graphs")]
    expected = json.loads(own.read_text())
    steps = of(recorded, "step")
    assert [(s["raw_bs"], s["mode"], s["reason"]) for s in steps] == \
        [(e["raw_bs"], e["mode"], e["reason"]) for e in expected]
    assert all(s["graph_bs"] == s["raw_bs"] for s in steps if s["mode"] == "graph")
    assert {s["raw_bs"] for s in steps if s["mode"] == "graph"} == {1, 2, 4, 8}
    recordings = of(recorded, "recording")
    assert len(recordings) == sum(e["state"] == "RECORDING" for e in expected)
    assert recordings[0]["cause"] == "first"
    assert {r["cause"] for r in recordings[1:]} <= {"new_shape", "recompiled"}
    assert sorted(r["graph_bs"] for r in recordings) == [1, 2, 4, 8]
    assert sorted(c["graph_bs"] for c in of(recorded, "capture")) == [1, 2, 4, 8]
    assert recorded[-1]["status"] == "finished"


SKIP_MESSAGE = re.compile(r"Inductor: skipping cudagraphs due to mutated inputs( \(\d+ instances\))?")


def assert_decode_steps_ran_eager_for_mutated_inputs(recorded: list[dict], steps: list[dict]) -> None:
    assert not [w for w in of(recorded, "warning") if w["code"] in ("hook_failed", "hook_missing")]
    skips = [w for w in of(recorded, "warning") if w["code"] == "cudagraph_skipped"]
    assert skips, of(recorded, "warning")
    assert SKIP_MESSAGE.match(skips[0]["message"]), skips
    assert inductor_skip_reason(skips[0]["message"]) == "mutated_inputs"
    assert steps and all((s["mode"], s["reason"]) == ("eager", "mutated_inputs") for s in steps), steps
    assert all(SKIP_MESSAGE.match(s["evidence"]) for s in steps)
    assert all(s["seq"] > skips[0]["seq"] for s in steps)
    assert not [c for c in of(recorded, "capture") if c["variant"].startswith("inductor")]


def test_when_inductor_skips_cudagraphs_for_a_plain_compiled_step_its_reason_is_recorded(tmp_path):
    """A hand-written decode step under reduce-overhead that updates its cache argument in place:
    Inductor's graph trees skip CUDA graphs ("mutated inputs (1 instances)")."""
    events = tmp_path / "mutated.jsonl"
    result = trace(events, sys.executable, "-c", "from tests.trace.programs.mutated_step import main; main()",
                   step="tests.trace.programs.mutated_step:decode_step")
    assert result.returncode == 0
    _run, recorded = read_run(events)
    steps = of(recorded, "step")
    assert len(steps) == 12
    assert_decode_steps_ran_eager_for_mutated_inputs(recorded, steps)
    assert (recorded[-1]["kind"], recorded[-1]["status"]) == ("run_end", "finished")


def test_when_the_program_compiles_generates_forward_itself_inductors_skip_and_the_failure_are_recorded(tmp_path):
    """transformers generation whose ``model.forward`` the program compiles itself under
    reduce-overhead: Inductor skips CUDA graphs for the decode ("mutated inputs") only in its log,
    then generation fails reading a graph output that a later run overwrote. The trace records
    the skip with its reason and the failure with its error; the post-mortem names it.

    Compiled from cold, as a user's first run: with Inductor's caches warm from an earlier
    compile of the same model, torch 2.11 reuses the compiled graph without saying again that it
    skips CUDA graphs (nothing in its log: measured on the H200), and the trace records only
    what Inductor says."""
    events = tmp_path / "hf-user-compiled.jsonl"
    result = trace(events, sys.executable, str(PROGRAMS / "hf_generate.py"), "user_compiled",
                   env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache")})
    assert result.returncode != 0
    _run, recorded = read_run(events)
    skips = [w for w in of(recorded, "warning") if w["code"] == "cudagraph_skipped"]
    assert skips and SKIP_MESSAGE.match(skips[0]["message"]), of(recorded, "warning")
    assert inductor_skip_reason(skips[0]["message"]) == "mutated_inputs"
    assert not [c for c in of(recorded, "capture") if c["status"] == "ok"]
    assert all(s["mode"] == "eager" for s in of(recorded, "step"))
    end = recorded[-1]
    assert (end["kind"], end["status"]) == ("run_end", "failed")
    assert "overwritten by a subsequent run" in end["error"]
    from replayscope.collector.importers.failures import classify
    assert classify(end["error"]).key == "graph_output_overwritten"


def test_a_padded_decode_loop_is_traced_step_for_step_without_any_device_synchronisation(tmp_path):
    events, own = tmp_path / "decode.jsonl", tmp_path / "own.json"
    result = trace(events, sys.executable, "-c",
                   f"from tests.trace.programs.padded_decode import main; main({str(own)!r})",
                   step="tests.trace.programs.padded_decode:Decoder.decode_step", time_every=1)
    assert result.returncode == 0          # the steady state ran under sync debug mode "error",
    run, recorded = read_run(events)       # CUDA events recorded around every step
    assert run["config"]["trace"]["step_timing"] == {"clock": "cuda_events", "every": 1}
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
    result = trace(traced, sys.executable, "-m", "replayscope", "run", "--backend", "cuda", "--preset", "tiny",
                   "--workload", "decode-only", "--steps", "150", "--capture-sizes", "1,2,4,8,16,32", "--quiet",
                   "--events", str(own), step="replayscope.runner.graphs:GraphRunner.run")
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
    # Both time a sample of steps with CUDA events: the runner per stage, mode and batch size; the
    # tracer per stage and batch size (a step's mode is known only at its end).
    assert [s["duration_s"] is not None for s in own_steps] == \
        sampled([(s["stage"], s["mode"], s["raw_bs"]) for s in own_steps])
    assert [s["duration_s"] is not None for s in traced_steps] == \
        sampled([(s["stage"], s["raw_bs"]) for s in traced_steps])
    assert all(s["duration_s"] > 0 for s in traced_steps + own_steps if s["duration_s"] is not None)
    assert sorted(c["graph_bs"] for c in of(recorded, "capture")) == [1, 2, 4, 8, 16, 32]
