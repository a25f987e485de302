"""The vLLM recipe on what a real vLLM 0.25.0 (model runner V2) did, call by call.

``fixtures/vllm-0.25.0-v2-offline.jsonl`` was recorded on an H200 by
``benchmarks/vllm_programs/recorder.py`` (an offline ``LLM.generate`` of 40 requests of 8 prompt
tokens, exact output lengths): the worker's start-up calls, every ``execute_model`` with its
scheduler output's shape, every decision of the dispatcher (its inputs and the descriptor it chose),
and every ``create_forward_fn(desc, warmup)`` and CUDA-graph capture of ``CudaGraphManager.capture``.
Here stand-ins named like vLLM's modules replay that sequence through the recipe's hooks, fake
graphs captured and replayed where vLLM captured and replayed real ones; the run must equal what
the engine said about itself (its ``vllm:iteration_tokens_total``: steps, and tokens) and what the
program asked for.
"""

from __future__ import annotations

import json
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from replayscope.runner.trace import vllm_recipes
from replayscope.runner.trace.vllm_dispatch import Graphs, explain
from tests.trace.conftest import capture, kinds
from tests.trace.test_engine_recipes import install, stand_in

RECORDED = Path(__file__).parent / "fixtures" / "vllm-0.25.0-v2-offline.jsonl"


@dataclass(frozen=True)
class Mode:
    name: str

    def __bool__(self):
        return self.name != "NONE"


@dataclass(frozen=True)
class BatchExecutionDescriptor:
    cg_mode: Mode
    num_tokens: int
    num_reqs: int | None
    uniform_token_count: int | None = None
    num_active_loras: int = 0


def desc(record: dict | None) -> BatchExecutionDescriptor | None:
    if record is None:
        return None
    return BatchExecutionDescriptor(Mode(record["cg_mode"]), record["num_tokens"], record["num_reqs"],
                                    record["uniform_token_count"], record["num_active_loras"])


def scheduler_output(shape: dict):
    per = shape["num_scheduled_tokens"]
    counts = [per["each"]] * per["requests"] if isinstance(per, dict) else per
    return types.SimpleNamespace(total_num_scheduled_tokens=shape["total_num_scheduled_tokens"],
                                 num_scheduled_tokens={f"r{i}": n for i, n in enumerate(counts)},
                                 scheduled_spec_decode_tokens={})


class Replay:
    """The recorded calls, consumed in order by the stand-ins."""

    def __init__(self, records: list[dict]):
        self.records, self.at = records, 0

    def peek(self) -> dict | None:
        return self.records[self.at] if self.at < len(self.records) else None

    def take(self, event: str) -> dict:
        record = self.records[self.at]
        assert record["event"] == event, (self.at, record)
        self.at += 1
        return record


def layout(replay: Replay):
    """``gpu/cudagraph_utils.py``, ``gpu/model_runner.py`` and ``gpu_worker.py`` as vLLM 0.25.0 has
    them, each method doing what the recording says the real one did."""

    class CudaGraphManager:
        def __init__(self):
            self.cudagraph_mode = Mode("NONE")
            self._capture_descs: dict = {}
            self._graphs_captured = False
            self.decode_query_len = 1
            self.graphs: dict = {}

        def capture(self, create_forward_fn, progress_bar_desc="Capturing CUDA graphs"):
            while (record := replay.peek())["event"] in ("create_forward_fn", "forward_fn", "cudagraph_capture_begin"):
                replay.take(record["event"])
                if record["event"] == "create_forward_fn":
                    create_forward_fn(desc(record["desc"]), record["warmup"])
                elif record["event"] == "cudagraph_capture_begin":
                    self.graphs.setdefault(desc(record["desc"]), []).append(capture(0))
            self._graphs_captured = True

        def dispatch(self, num_reqs, num_tokens, uniform_token_count, num_active_loras=0):
            record = replay.take("dispatch")
            assert record["args"] == {"num_reqs": num_reqs, "num_tokens": num_tokens,
                                      "uniform_token_count": uniform_token_count, "num_active_loras": num_active_loras}
            return desc(record["desc"])

    class GPUModelRunner:
        def __init__(self):
            self.model_config = types.SimpleNamespace(model="/models/random-llama", enforce_eager=False)
            self.cudagraph_manager = CudaGraphManager()

        def capture_model(self):
            record = replay.take("capture_descs")
            manager = self.cudagraph_manager
            manager.cudagraph_mode = Mode(record["mode"])
            manager.decode_query_len = record["decode_query_len"]
            manager._capture_descs = {Mode(m): [desc(d) for d in ds] for m, ds in record["descs"].items()}
            manager.capture(lambda d, warmup: ((lambda mode: None), None))
            replay.take("capture_model_memory")

        def execute_model(self, scheduler_output, intermediate_tensors=None, dummy_run=False,
                          skip_attn_for_dummy_run=False, is_profile=False):
            per = scheduler_output.num_scheduled_tokens
            if not per or (nxt := replay.peek()) is None or nxt["event"] != "dispatch":
                return None                      # nothing scheduled, or the profile run (need_eager)
            tokens = scheduler_output.total_num_scheduled_tokens
            most = max(per.values())
            uniform = most if most * len(per) == tokens else None
            chosen = self.cudagraph_manager.dispatch(len(per), tokens, uniform, num_active_loras=0)
            for graph in self.cudagraph_manager.graphs.get(chosen, []):
                graph.replay()

    class Worker:
        def __init__(self):
            self.model_runner = GPUModelRunner()

        def _until_end(self):
            while (record := replay.peek())["event"] != "startup_end":
                if record["event"] == "capture_descs":
                    self.model_runner.capture_model()
                else:
                    run(self.model_runner, replay.take("execute_model"))
            replay.take("startup_end")

        def determine_available_memory(self):
            self._until_end()

        def compile_or_warm_up_model(self):
            self._until_end()

    return (stand_in("vllm.v1.worker.gpu.cudagraph_utils", CudaGraphManager),
            stand_in("vllm.v1.worker.gpu.model_runner", GPUModelRunner),
            stand_in("vllm.v1.worker.gpu_worker", Worker), Worker)


def run(runner, record: dict) -> None:
    runner.execute_model(scheduler_output(record["scheduled"]), dummy_run=record["dummy_run"],
                         is_profile=record["is_profile"])


@pytest.fixture()
def recorded():
    lines = [json.loads(line) for line in RECORDED.read_text().splitlines()]
    return lines[0], lines[1:]


def test_a_real_offline_run_traced_equals_what_the_engine_counted(traced, recorded):
    report, records = recorded
    replay = Replay(records)
    *modules, Worker = layout(replay)
    for module in modules:
        install(traced, vllm_recipes, module)
    worker = Worker()
    while (record := replay.peek()) is not None:
        if record["event"] == "startup_begin":
            replay.take("startup_begin")
            getattr(worker, record["call"])()
        else:
            run(worker.model_runner, replay.take("execute_model"))
    events = traced.finish()

    steps = kinds(events, "step")
    # warm-up, profile and capture forwards are start-up, not steps: the engine's own count
    assert len(steps) == report["engine"]["iteration_steps"] == 58
    assert sum(s["num_tokens"] for s in steps) == report["asked"]["forward_tokens"] == 1528
    # one capture per (mode, size), its pieces counted in it; PIECEWISE serves mixed batches
    captures = kinds(events, "capture")
    by_mode = {}
    for c in captures:
        by_mode.setdefault(c["variant"].split(",")[0], []).append((c["stage"], c["graph_bs"]))
    assert len(by_mode["vllm PIECEWISE"]) == 19 and {s for s, _ in by_mode["vllm PIECEWISE"]} == {"mixed"}
    assert len(by_mode["vllm FULL"]) == 11 and {s for s, _ in by_mode["vllm FULL"]} == {"decode"}
    assert all(", 5 graphs" in c["variant"] for c in captures if c["variant"].startswith("vllm PIECEWISE"))
    # the 320-token prefill is above the largest PIECEWISE graph (128): eager, batch_too_large
    first = steps[0]
    assert (first["stage"], first["mode"], first["raw_bs"], first["reason"]) == ("mixed", "eager", 320,
                                                                                 "batch_too_large")
    assert "largest graph for it holds 128 tokens" in first["evidence"]
    # then uniform decode on FULL graphs, padded up to the captured size where it is not one
    decode = steps[1:]
    assert {s["stage"] for s in decode} == {"decode"} and {s["mode"] for s in decode} <= {"graph", "padded"}
    padded = [s for s in decode if s["mode"] == "padded"]
    assert padded and all(s["graph_bs"] > s["raw_bs"] and s["padded_tokens"] == s["graph_bs"] - s["raw_bs"]
                          for s in padded)


GRAPHS = Graphs("FULL_AND_PIECEWISE", True, 1, decode=tuple((n, 1, 0) for n in (1, 2, 4, 8, 16)),
                mixed=tuple((n, 0) for n in (1, 2, 4, 8, 16, 24, 32)))


@pytest.mark.parametrize("args, chosen, stage, reason, note", [
    ((4, 4, 1, 0), "FULL", "decode", None, None),
    ((3, 12, None, 0), "PIECEWISE", "mixed", None, "PIECEWISE, not FULL (prefill)"),
    ((20, 20, 1, 0), "PIECEWISE", "mixed", None, "PIECEWISE, not FULL (batch_too_large)"),
    ((3, 58, None, 0), "NONE", "mixed", "batch_too_large", None),
    ((40, 40, 1, 0), "NONE", "decode", "batch_too_large", None),
    ((2, 2, 1, 1), "NONE", "decode", "lora_not_captured", None),
])
def test_the_dispatchers_decision_explained(args, chosen, stage, reason, note):
    decision = explain(GRAPHS, *args, chosen)
    assert decision.stage == stage
    assert (decision.hint.reason if decision.hint else None) == reason
    assert (decision.note or "").startswith(note or "") and bool(decision.note) == bool(note)


def test_graphs_off_and_decode_only_modes_explained():
    off = explain(Graphs("NONE", False), 2, 2, 1, 0, "NONE")
    assert off.hint.reason == "graphs_disabled"
    decode_only = Graphs("FULL_DECODE_ONLY", True, 1, decode=((8, 1, 0),))
    assert explain(decode_only, 3, 12, None, 0, "NONE").hint.reason == "prefill"
    spec = Graphs("FULL_DECODE_ONLY", True, 2, decode=((8, 2, 0),))
    assert explain(spec, 2, 6, 3, 0, "NONE").hint.reason == "spec_shape"
    assert explain(Graphs("FULL_AND_PIECEWISE", False, 1, ((8, 1, 0),), ((8, 0),)), 2, 2, 1, 0,
                   "NONE").hint.reason == "not_captured"


def test_a_worker_without_its_start_up_method_is_a_warning_naming_it(traced):
    class Worker:
        def determine_available_memory(self):
            return None
    install(traced, vllm_recipes, stand_in("vllm.v1.worker.gpu_worker", Worker))
    capture(4)                                   # something to report: the run opens, its warnings with it
    warnings = [w["message"] for w in kinds(traced.finish(), "warning") if w["code"] == "recipe_incomplete"]
    assert warnings == ["the vLLM recipe found no Worker.compile_or_warm_up_model in vllm.v1.worker.gpu_worker: the "
                        "engine's warm-up forwards may be counted as steps"]


def test_the_workers_start_up_is_timed_as_the_phases_vllm_logs(traced, recorded):
    """vLLM 0.25's Worker (gpu_worker.py): load_model, then the EngineCore's init — the profile
    (determine_available_memory), the KV cache (initialize_from_config), the warm-up and capture
    (compile_or_warm_up_model) — each a phase as the log importer names vLLM's own lines, and
    ``engine_init`` from the profile's start to the warm-up's end, as "init engine (profile,
    create kv cache, warmup model) took" measures it."""
    _, records = recorded
    replay = Replay(records)
    *modules, Worker = layout(replay)
    calls = []
    Worker.load_model = lambda self, **kw: calls.append("load_model")
    Worker.initialize_from_config = lambda self, kv_cache_config: calls.append("initialize_from_config")
    for module in modules:
        install(traced, vllm_recipes, module)
    worker = Worker()
    worker.load_model()
    while (record := replay.peek()) is not None:
        if record["event"] == "startup_begin":
            replay.take("startup_begin")
            if record["call"] == "compile_or_warm_up_model":
                worker.initialize_from_config({})
            getattr(worker, record["call"])()
        else:
            run(worker.model_runner, replay.take("execute_model"))
    phases = {p["phase"]: p for p in kinds(traced.finish(), "phase")}

    assert calls == ["load_model", "initialize_from_config"]       # the originals still ran
    assert {"load_weights", "profile", "kv_cache", "warmup", "engine_init", "capture"} <= set(phases)
    init, profile, warmup = phases["engine_init"], phases["profile"], phases["warmup"]
    assert init["start_ts"] == profile["start_ts"]
    assert init["start_ts"] + init["duration_s"] == pytest.approx(warmup["start_ts"] + warmup["duration_s"], abs=1e-3)
    assert phases["load_weights"]["start_ts"] <= profile["start_ts"]
    assert all(p["mem_bytes"] is None for p in phases.values() if p["phase"] != "capture")   # no CUDA here: not measured
