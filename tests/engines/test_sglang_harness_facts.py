"""The SGLang harness reads SGLang 0.5.17's own statements: its capture and prefill log lines and
its /metrics counters, in the forms its source writes them (model_runner_components/
cuda_graph_setup.py, scheduler_components/metrics_reporter.py, observability/metrics_collector.py)."""

from __future__ import annotations

from benchmarks.sglang_harness import log_facts, metrics_delta, metrics_facts

LOG = """\
[2026-12-03 13:00:01] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2, 4, 8, 16], avail mem=96.20 GB
[2026-12-03 13:00:03] Capture target decode CUDA graph end. elapsed=1.92 s, mem usage=0.07 GB, avail mem=96.13 GB.
[2026-12-03 13:00:03] Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[64, 128, 256], avail mem=96.13 GB
[2026-12-03 13:00:05] Capture target prefill CUDA graph end. elapsed=2.50 s, mem usage=0.11 GB, avail mem=96.02 GB.
[2026-12-03 13:00:09] Prefill batch, #new-seq: 16, #new-token: 128, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 24, #pending-token: 0, input throughput (token/s): 0.00, cuda graph: True
[2026-12-03 13:00:09] Prefill batch [7], #new-seq: 24, #new-token: 184, #cached-token: 8, token usage: 0.00, #running-req: 16, #queue-req: 0, #pending-token: 0, cuda graph: False
[2026-12-03 13:00:10] Decode batch, #running-req: 40, #token: 520, token usage: 0.00, cuda graph: True, gen throughput (token/s): 4321.00, #queue-req: 0
"""


def test_log_facts_reads_each_capture_pass_and_every_prefill_batch():
    facts = log_facts(LOG)
    assert facts["capture_passes"] == {
        "target decode": {"backend": "full", "sizes": [1, 2, 4, 8, 16], "unit": "requests", "elapsed_s": 1.92,
                          "mem_gb": 0.07},
        "target prefill": {"backend": "breakable", "sizes": [64, 128, 256], "unit": "tokens", "elapsed_s": 2.5,
                           "mem_gb": 0.11}}
    assert (facts["prefill_batches"], facts["prefill_new_tokens"], facts["prefill_cached_tokens"],
            facts["prefill_new_requests"]) == (2, 312, 8, 40)
    assert (facts["decode_batches"], facts["decode_rows"]) == (1, 40)


def test_a_pass_whose_end_line_is_missing_has_no_time_or_memory():
    facts = log_facts(LOG.splitlines()[0])
    assert facts["capture_passes"]["target decode"]["elapsed_s"] is None
    assert facts["capture_passes"]["target decode"]["mem_gb"] is None
    assert facts["prefill_batches"] == 0


METRICS = """\
# HELP sglang:cuda_graph_passes_total Number of forward passes by cuda graph mode.
# TYPE sglang:cuda_graph_passes_total counter
sglang:cuda_graph_passes_total{model_name="m",mode="decode_cuda_graph",tp_rank="0"} 100.0
sglang:cuda_graph_passes_total{model_name="m",mode="decode_none",tp_rank="0"} 3.0
sglang:cuda_graph_passes_total{model_name="m",mode="prefill_none",tp_rank="0"} 5.0
sglang:cuda_graph_passes_created{model_name="m",mode="prefill_none",tp_rank="0"} 1.7e9
sglang:realtime_tokens_total{model_name="m",mode="prefill_compute",tp_rank="0"} 384.0
sglang:realtime_tokens_total{model_name="m",mode="decode",tp_rank="0"} 620.0
sglang:prompt_tokens_total{model_name="m"} 392.0
sglang:generation_tokens_total{model_name="m"} 652.0
sglang:num_requests_total{model_name="m"} 33.0
"""


def test_metrics_facts_sums_the_engines_counters_by_mode():
    facts = metrics_facts(METRICS)
    assert facts == {"passes": {"decode_cuda_graph": 100, "decode_none": 3, "prefill_none": 5}, "steps": 108,
                     "tokens": {"prefill_compute": 384, "decode": 620}, "prompt_tokens": 392,
                     "generation_tokens": 652, "requests": 33}


def test_a_counter_the_server_does_not_export_is_unknown_not_zero():
    facts = metrics_facts("sglang:num_requests_total{model_name=\"m\"} 1.0\n")
    assert facts["passes"] is None and facts["steps"] is None and facts["prompt_tokens"] is None
    assert facts["requests"] == 1


def test_the_delta_between_two_scrapes_is_what_the_client_caused():
    before = metrics_facts('sglang:cuda_graph_passes_total{mode="prefill_none"} 1.0\n'
                           'sglang:prompt_tokens_total{model_name="m"} 8.0\n')
    delta = metrics_delta(before, metrics_facts(METRICS))
    assert delta["passes"] == {"decode_cuda_graph": 100, "decode_none": 3, "prefill_none": 4}
    assert delta["steps"] == 107 and delta["prompt_tokens"] == 384
    assert delta["generation_tokens"] is None           # not in the first scrape: unknown


def test_a_server_that_dies_during_start_up_is_reported_with_its_logs_last_line(tmp_path, monkeypatch):
    """On the H200 ``sglang.launch_server`` died importing a module the wheel folder lacked; the
    harness then sent Ctrl-C to a process group already gone and raised ProcessLookupError,
    hiding why. Here the server dies the same way (``-m`` of a module that is not there)."""
    import sys

    import pytest

    from benchmarks import sglang_harness
    monkeypatch.setattr(sglang_harness, "ENV", {**sglang_harness.ENV, "PYTHONPATH": str(tmp_path)})
    monkeypatch.setattr(sglang_harness.sys, "executable", sys.executable)
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (tmp_path / "sglang" / "launch_server.py").write_text("import jsonschema_not_installed_here\n")
    with pytest.raises(RuntimeError, match="did not become healthy.*No module named 'jsonschema_not_installed_here'"):
        sglang_harness.run_serve(tmp_path / "model", tmp_path / "out", "dies", False, ready_timeout=60)
