"""The SGLang recipe on what a real SGLang 0.5.17 did, call by call.

``fixtures/sglang-0.5.17-offline.jsonl`` was recorded on an H200 by
``benchmarks/sglang_programs/recorder.py`` (an offline ``sglang.Engine.generate`` of 40 requests
of 8 prompt tokens, exact output lengths by ``max_new_tokens`` with ``ignore_eos``; FA3 attention,
decode graphs ``full``, prefill graphs ``breakable``, its overlap scheduler on): every
``capture_one_shape`` of its two graph runners (size, backend, the CUDA graphs captured inside)
and every ``ModelRunner.forward`` (mode, batch size, input tokens, whether it ran a graph). The
same run's own log is ``tests/engines/fixtures/sglang-0.5.17-offline.log`` and what the program
asked for ``...offline.report.json``. Stand-ins named like SGLang's modules replay the sequence
through the recipe's hooks; the run must equal what the engine said about itself.
"""

from __future__ import annotations

import json
import re
import types
from pathlib import Path

from benchmarks.sglang_harness import log_facts
from replayscope.runner.trace import sglang_recipes
from tests.trace.conftest import capture, kinds
from tests.trace.test_engine_recipes import ForwardMode, install, server_args, stand_in

RECORDED = Path(__file__).parent / "fixtures" / "sglang-0.5.17-offline.jsonl"
ENGINE = Path(__file__).parents[1] / "engines" / "fixtures"
RECORDS = [json.loads(line) for line in RECORDED.read_text().splitlines()]
LOG = log_facts((ENGINE / "sglang-0.5.17-offline.log").read_text())
ASKED = json.loads((ENGINE / "sglang-0.5.17-offline.report.json").read_text())["asked"]
MODULES = "sglang.srt.model_executor"
GIB = 1 << 30
STREAMER = "sglang.srt.managers.scheduler_components.output_streamer"


class BreakableCudaGraphBackend:
    def __init__(self):
        self.graphs = {}

    def capture_one(self, size, count):
        self.graphs[size] = [capture(0) for _ in range(count)]

    def replay(self, size):
        for graph in self.graphs[size]:
            graph.replay()


class FullCudaGraphBackend(BreakableCudaGraphBackend):
    pass


class DecodeCudaGraphRunner:
    """Built once (``cuda_graph_setup.py``), capturing every recorded size in its ``__init__``."""

    def __init__(self, captures=()):
        self.backend = FullCudaGraphBackend()
        for record in captures:
            self.capture_one_shape(record["size"], graphs=record["cuda_graphs"])

    def capture_one_shape(self, size, forward=None, stream_idx=None, variant_label=None, *, graphs=1):
        self.backend.capture_one(size, graphs)

    def execute(self, size):
        # SGLang replays the smallest captured size that holds the batch (padding the rest)
        self.backend.replay(min(s for s in self.backend.graphs if s >= size))


class PrefillCudaGraphRunner(DecodeCudaGraphRunner):
    def __init__(self, captures=()):
        self.backend = BreakableCudaGraphBackend()
        for record in captures:
            self.capture_one_shape(record["size"], graphs=record["cuda_graphs"])

    def capture_one_shape(self, size, *, prefix_num_chunks=0, graphs=1):
        self.backend.capture_one(size, graphs)


class ModelRunner:
    def __init__(self):
        self.server_args = server_args(model_path="/root/out/sg/model")
        captures = [r for r in RECORDS if r["event"] == "capture_one_shape"]
        assert [r["runner"] for r in captures] == sorted(r["runner"] for r in captures)[::-1]   # prefill first
        self.prefill = PrefillCudaGraphRunner([r for r in captures if r["runner"] == "prefill"])
        self.decode = DecodeCudaGraphRunner([r for r in captures if r["runner"] == "decode"])

    def forward(self, forward_batch, skip_attn_backend_init=None, pp_proxy_tensors=None,
                reinit_attn_backend=False, split_forward_count=1):
        record = forward_batch.record
        if record["can_run_graph"]:
            if record["forward_mode"] == "DECODE":
                self.decode.execute(record["batch_size"])
            else:
                self.prefill.execute(record["input_tokens"])


class SchedulerOutputStreamer:
    """What left the scheduler when: the events written at the moment each answer went out."""

    def __init__(self, written):
        self.written, self.seen = written, []

    def stream_output(self, reqs, return_logprob, skip_req=None):
        self.seen.append(list(self.written()))


def forward_batch(record):
    import torch
    return types.SimpleNamespace(batch_size=record["batch_size"], forward_mode=ForwardMode(record["forward_mode"]),
                                 input_ids=torch.zeros(record["input_tokens"], dtype=torch.long), record=record)


def replay(traced):
    for name, cls in (("runner.decode_cuda_graph_runner", DecodeCudaGraphRunner),
                      ("runner.prefill_cuda_graph_runner", PrefillCudaGraphRunner), ("model_runner", ModelRunner)):
        install(traced, sglang_recipes, stand_in(f"{MODULES}.{name}", cls))
    streamer_module = stand_in(STREAMER, SchedulerOutputStreamer)
    if STREAMER in sglang_recipes.RECIPES:
        install(traced, sglang_recipes, streamer_module)
    runner = ModelRunner()
    streamer = SchedulerOutputStreamer(lambda: traced.sinks[0].events if traced.sinks else [])
    finished = types.SimpleNamespace(finished=lambda: True)
    for record in RECORDS:
        if record["event"] == "forward":
            assert not record["in_capture"]          # start-up's dummy runs never reach ModelRunner.forward
            runner.forward(forward_batch(record))
    # the last request's answer leaves the scheduler; Engine.shutdown then SIGKILLs it
    streamer.stream_output([finished], False)
    return streamer.seen[-1], traced.finish()


def forwards(mode):
    return [r for r in RECORDS if r["event"] == "forward" and r["forward_mode"] == mode]


def test_every_step_is_written_before_the_last_answer_leaves_the_scheduler(traced):
    written, events = replay(traced)
    recorded = [(r["forward_mode"], r["batch_size"]) for r in RECORDS if r["event"] == "forward"]
    assert [(s["stage"].upper().replace("PREFILL", "EXTEND"), s["raw_bs"] if s["stage"] == "decode" else 40)
            for s in kinds(written, "step")] == recorded
    assert kinds(written, "step") == kinds(events, "step")


def test_prefill_steps_are_the_logs_prefill_batches(traced):
    _written, events = replay(traced)
    prefill = [s for s in kinds(events, "step") if s["stage"] in ("prefill", "mixed")]
    assert len(prefill) == LOG["prefill_batches"] == 1
    assert sum(s["num_tokens"] for s in prefill) == LOG["prefill_new_tokens"] == ASKED["prompt_tokens"]
    assert [(s["mode"], s["graph_bs"]) for s in prefill] == [("graph", 320)]


def test_the_logs_import_sizes_the_prefill_step_as_the_trace_does(traced):
    """SGLang keys its prefill graphs by tokens: the trace records a prefill's batch as its tokens,
    and the import of the same run's log reads its ``#new-token`` the same way (not ``#new-seq``)."""
    from replayscope.collector.importers import parse_sglang_text

    _written, events = replay(traced)
    fields = ("stage", "mode", "raw_bs", "graph_bs", "num_tokens", "padded_tokens", "reason")
    traced_prefill = [tuple(s[f] for f in fields) for s in kinds(events, "step") if s["stage"] == "prefill"]
    [imported] = parse_sglang_text((ENGINE / "sglang-0.5.17-offline.log").read_text()).runs
    imported_prefill = [tuple(e[f] for f in fields) for e in imported.events
                        if e["kind"] == "step" and e["stage"] == "prefill"]
    assert imported_prefill == traced_prefill == [("prefill", "graph", 320, 320, 320, 0, None)]


def test_decode_rows_are_the_asked_tokens_plus_one_overlap_forward_per_request(traced):
    """SGLang's overlap scheduler launches batch N+1 before it reads batch N's tokens: a request
    whose last token came out of batch N is in batch N+1 too. The engine ran 1,248 decode rows
    for 1,208 decode tokens asked (40 requests): one more forward each, as recorded."""
    _written, events = replay(traced)
    decode = [s for s in kinds(events, "step") if s["stage"] == "decode"]
    assert sum(s["raw_bs"] for s in decode) == sum(r["batch_size"] for r in forwards("DECODE")) \
        == ASKED["decode_tokens"] + ASKED["requests"]
    assert {s["mode"] for s in decode} == {"graph", "padded"}
    assert all(s["padded_tokens"] == s["graph_bs"] - s["raw_bs"] for s in decode)
    # the one decode batch the log printed (every 40th): its #running-req is the 40th decode step's rows
    assert (LOG["decode_batches"], LOG["decode_rows"]) == (1, decode[39]["raw_bs"]) == (1, 14)


def test_one_capture_per_size_as_the_logs_capture_passes_say(traced):
    _written, events = replay(traced)
    captures = kinds(events, "capture")
    assert sorted(c["graph_bs"] for c in captures if c["stage"] == "decode") == \
        sorted(LOG["capture_passes"]["target decode"]["sizes"])
    assert sorted(c["graph_bs"] for c in captures if c["stage"] == "prefill") == \
        sorted(LOG["capture_passes"]["target prefill"]["sizes"])
    assert {c["variant"].rsplit(", pool", 1)[0] for c in captures if c["stage"] == "prefill"} == \
        {"sglang breakable, 5 graphs"}
    assert {c["variant"].rsplit(", pool", 1)[0] for c in captures if c["stage"] == "decode"} == {"sglang full"}


AVAIL = re.compile(r"Capture target (?:decode|prefill) CUDA graph (?:begin|end)\..*?avail mem=(?P<gb>[\d.]+) GB")


def test_the_capture_phases_memory_is_measured_as_sglang_measures_each_pass(traced, monkeypatch):
    """SGLang logs each pass's "mem usage": free device memory (cache emptied) before minus after
    building the graph runner. Here the device's free memory is what the log says it was at each
    begin and end line; the trace's capture phase is the sum of the passes (0.19 + 0.06 GB)."""
    from replayscope.runner.trace import device
    free = [int(float(m["gb"]) * GIB) for m in AVAIL.finditer((ENGINE / "sglang-0.5.17-offline.log").read_text())]
    assert len(free) == 4
    monkeypatch.setattr(device, "free_bytes_emptied", lambda: free.pop(0), raising=False)
    _written, events = replay(traced)
    [phase] = [e for e in events if e["kind"] == "phase" and e["phase"] == "capture"]
    logged = sum(p["mem_gb"] for p in LOG["capture_passes"].values())
    assert abs(phase["mem_bytes"] / GIB - logged) <= 0.006 * 2 and not free


def test_the_write_waits_for_the_gpu_only_when_every_request_of_the_output_finished(traced):
    """SGLang's overlap scheduler streams batch N's output while batch N+1 runs on the GPU:
    waiting there for every finished request would cost the overlap. It writes only where an
    answer finishes (not for a request answered already, in batch N+1 for its delayed token), and
    waits where every request of the output is finished (the engine may be stopped on that answer)."""
    calls = []
    traced.tracer.flush_events = lambda wait_for_gpu=True: calls.append(wait_for_gpu)
    install(traced, sglang_recipes, stand_in(STREAMER, SchedulerOutputStreamer))
    streamer = SchedulerOutputStreamer(lambda: [])
    def req(finished, answered=False):
        return types.SimpleNamespace(finished=lambda: finished, finished_output=True if answered else None)
    running, done, answered = req(False), req(True), req(True, answered=True)
    streamer.stream_output([running, running], False)
    streamer.stream_output([running, answered], False)      # the overlap's delayed row: no answer ends
    streamer.stream_output([running, done], False)
    streamer.stream_output([answered, done], False)
    streamer.stream_output([answered], False)
    assert calls == [False, True]
