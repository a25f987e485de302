"""An offline ``sglang.Engine`` (a program, no HTTP server) prints no "fired up" line: its
start-up ends at "Engine startup timings (s)" and it then runs its batches. Its complete log is a
finished run, ready there; a server's log that stops after that line, before any batch or HTTP
line, is still one that ends before the server was ready. The lines are SGLang 0.5.17's formats
(``entrypoints/engine.py``, ``model_runner_components/cuda_graph_setup.py``,
``scheduler_components/metrics_reporter.py``)."""

from __future__ import annotations

from replayscope.collector.importers import parse_sglang_text
from tests.importers.conftest import kind, utc

START = """\
[2026-12-03 13:00:00] server_args=ServerArgs(model_path='/tmp/sgmodel', tokenizer_path='/tmp/sgmodel', skip_tokenizer_init=True, attention_backend='fa3', sampling_backend='pytorch', mem_fraction_static=0.3, random_seed=0)
[2026-12-03 13:00:06] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2, 4, 8], avail mem=96.20 GB
[2026-12-03 13:00:08] Capture target decode CUDA graph end. elapsed=1.92 s, mem usage=0.07 GB, avail mem=96.13 GB.
[2026-12-03 13:00:10] Engine startup timings (s): load_weight=0.62, kv_cache_allocation=0.40, scheduler_e2e=9.50, cuda_graph={decode=1.92}, tokenizer_e2e=0.10
"""
BATCHES = """\
[2026-12-03 13:00:11] Prefill batch, #new-seq: 8, #new-token: 64, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False
[2026-12-03 13:00:12] Decode batch, #running-req: 8, #token: 100, token usage: 0.00, cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0
"""
SERVER = """\
[2026-12-03 13:00:10] INFO:     Started server process [4242]
[2026-12-03 13:00:10] INFO:     Waiting for application startup.
"""


def only_run(text: str):
    result = parse_sglang_text(text, path="sglang.log", mtime=utc("2026-12-03 14:00:00"))
    assert len(result.runs) == 1
    return result.runs[0]


def test_an_offline_engines_complete_log_is_finished_and_ready_at_its_startup_timings():
    run = only_run(START + BATCHES)
    assert run.status == "finished"
    assert run.run["config"]["offline"] is True
    assert run.run["config"]["ready_at"] == utc("2026-12-03 13:00:10")
    assert not any("ends before the server was ready" in w for w in run.warnings)
    assert [(e["stage"], e["mode"]) for e in kind(run, "step")] == [("prefill", "eager"), ("decode", "graph")]


def test_a_log_that_stops_at_the_startup_timings_line_is_not_ready():
    run = only_run(START)
    assert run.status == "interrupted" and "offline" not in run.run["config"]


def test_a_server_that_printed_http_lines_is_not_offline_its_ready_line_is_its_own():
    run = only_run(START + SERVER + BATCHES)
    assert run.status == "interrupted" and "offline" not in run.run["config"]
    served = only_run(START + SERVER + BATCHES + "[2026-12-03 13:00:13] The server is fired up and ready to roll!\n")
    assert served.status == "finished" and served.run["config"]["ready_at"] == utc("2026-12-03 13:00:13")
