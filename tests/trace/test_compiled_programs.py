"""The GPU tests' compiled programs on the CPU, traced with nothing to configure, compared with
what each program noted itself (``test_trace_gpu.py`` runs them on CUDA): a transformers
``generate`` compiled by ``CompileConfig(mode="reduce-overhead")`` (its steps from the
transformers recipe, every decode eager with cpu_device) and a bare program calling a compiled
model at 4 batch sizes (no graph-tree call on a CPU, so no step: the run says why there is no
graph, which PyTorch does not)."""

from __future__ import annotations

import json
import sys

from tests.trace.test_trace_gpu import PROGRAMS, of, read_run, trace


def test_transformers_generation_compiled_on_a_cpu_is_traced_step_for_step_and_says_why_no_graph(tmp_path):
    events, own = tmp_path / "hf.jsonl", tmp_path / "hf-own.json"
    result = trace(events, sys.executable, str(PROGRAMS / "hf_generate.py"), "graphs", str(own), "cpu")
    assert result.returncode == 0
    run, recorded = read_run(events)
    expected = json.loads(own.read_text())
    steps = of(recorded, "step")
    assert [(s["stage"], s["raw_bs"], s["mode"], s["reason"]) for s in steps] == \
        [(e["stage"], e["raw_bs"], e["mode"], e["reason"]) for e in expected]
    assert len(steps) == 12 and steps[0]["reason"] == "prefill"
    assert "compile" in [p["phase"] for p in of(recorded, "phase")]
    [why] = [w for w in of(recorded, "warning") if w["code"] == "no_cuda_graphs"]
    assert why["message"].startswith("no CUDA graph was captured in this process: CUDA is not available")
    assert not [w for w in of(recorded, "warning") if w["code"] in ("hook_missing", "hook_failed")]


def test_a_model_compiled_with_reduce_overhead_on_a_cpu_has_no_step_and_the_run_says_why(tmp_path):
    events, own = tmp_path / "sizes.jsonl", tmp_path / "sizes-own.json"
    result = trace(events, sys.executable, str(PROGRAMS / "compiled_sizes.py"), str(own), "cpu")
    assert result.returncode == 0
    run, recorded = read_run(events)
    expected = json.loads(own.read_text())
    assert len(expected) == 24 and {e["reason"] for e in expected} == {"cpu_device"}
    assert of(recorded, "step") == [] and of(recorded, "recording") == []
    assert run["config"]["trace"]["auto_steps"].startswith("each call of a torch.compile")
    assert [p["phase"] for p in of(recorded, "phase")].count("compile") >= 1
    [why] = [w for w in of(recorded, "warning") if w["code"] == "no_cuda_graphs"]
    assert "torch.compile(mode=\"reduce-overhead\") runs without CUDA graphs on the CPU" in why["message"]
    assert "CUDA-graph skip" in why["message"]          # Inductor counted them, and said nothing
    assert recorded[-1]["status"] == "finished"
