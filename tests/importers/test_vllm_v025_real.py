"""Real vLLM 0.25.0 logs (model runner V2, an H200, recorded for this project on 2026-12-03):
an offline ``LLM(...)`` program's complete output and a ``vllm serve`` stopped with Ctrl-C
after serving every request (issue 33). ``vllm_v025_v2_offline_real.log`` is the whole
output; ``vllm_v025_v2_serve_ctrl_c_real.log`` keeps the first three request lines of the
server's access log and leaves out the tracer's own lines after vLLM's last one.

An offline run prints no API-server line: its start-up ends at "init engine (...) took",
and the engine core's SIGTERM at the program's end is a normal stop; a served run that
shuts down after Ctrl-C is finished, even when vLLM prints an EngineDeadError traceback
while it goes down; an EngineDeadError while it serves, with no stop asked for, is a failure.
Both capture passes are in the run: PIECEWISE graphs are ``mixed``, FULL ones ``decode``
under FULL_AND_PIECEWISE (``replayscope.collector.importers.stages``).
"""

from __future__ import annotations

from replayscope.collector.importers import parse_vllm_text
from tests.importers.conftest import MTIME, gib, kind, phases, read_fixture, run_end, vllm

OFFLINE = "vllm_v025_v2_offline_real.log"
SERVED = "vllm_v025_v2_serve_ctrl_c_real.log"
PIECEWISE_OFFLINE = [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128]


def test_an_offline_runs_own_complete_log_is_a_finished_run():
    run = vllm(OFFLINE)
    assert run.status == "finished" and run.error is None
    assert run.run["config"]["offline"] is True
    assert not any("ends before the server was ready" in w for w in run.warnings)
    assert phases(run) == {
        "load_weights": (1.547806, gib(0.02)), "compile.dynamo": (0.91, None),
        "compile.cache_load_range_1_16384": (0.305, None), "compile": (1.26, None), "profile": (0.12, None),
        "kv_cache": (None, gib(34.53)), "capture": (1.0, gib(0.10)), "engine_init": (18.92, None)}
    config = run.run["config"]
    assert (run.run["backend"], config["cudagraph_mode"], config["max_num_seqs"], config["vllm_version"]) == (
        "full_and_piecewise", "FULL_AND_PIECEWISE", 64, "0.25.0")
    assert config["kv_tokens"] == 18_103_136
    assert config["max_concurrency"] == {"tokens_per_request": 1024, "requests": 17678.84}


def test_both_capture_passes_of_the_offline_run_with_their_counts_sizes_and_stages():
    run = vllm(OFFLINE)
    config = run.run["config"]
    assert config["capture_passes"] == [
        {"pass": "PIECEWISE", "graphs_done": 19, "graphs": 19, "stage": "mixed", "sizes": PIECEWISE_OFFLINE},
        {"pass": "FULL", "graphs_done": 11, "graphs": 11, "stage": "decode", "sizes": PIECEWISE_OFFLINE[:11]}]
    captures = [(e["graph_bs"], e["stage"], e["status"], e["duration_s"]) for e in kind(run, "capture")]
    assert captures == ([(bs, "mixed", "ok", None) for bs in PIECEWISE_OFFLINE]
                        + [(bs, "decode", "ok", None) for bs in PIECEWISE_OFFLINE[:11]])
    s = run.summary()
    assert (s["capture_sizes"]["count"], s["capture_sizes"]["max"]) == (19, 128)
    assert s["capture_total_s"] == 1.0 and s["capture_unfinished"] is None


def test_a_served_run_stopped_with_ctrl_c_is_finished_with_both_passes():
    run = vllm(SERVED)
    assert run.status == "finished" and run.error is None
    assert "offline" not in run.run["config"]
    assert run.run["config"]["capture_passes"] == [
        {"pass": "PIECEWISE", "graphs_done": 7, "graphs": 7, "stage": "mixed", "sizes": [1, 2, 4, 8, 16, 24, 32]},
        {"pass": "FULL", "graphs_done": 5, "graphs": 5, "stage": "decode", "sizes": [1, 2, 4, 8, 16]}]
    assert phases(run)["capture"] == (1.0, gib(0.07))
    assert phases(run)["engine_init"] == (29.79, None)
    assert phases(run)["compile"] == (10.72, None)


ENGINE_DEAD = """(APIServer pid=1503) ERROR 12-03 09:38:05 [async_llm.py:704] AsyncLLM output_handler failed.
(APIServer pid=1503) ERROR 12-03 09:38:05 [async_llm.py:704] Traceback (most recent call last):
(APIServer pid=1503) ERROR 12-03 09:38:05 [async_llm.py:704]   File "/tmp/site/vllm/v1/engine/async_llm.py", line 660, in output_handler
(APIServer pid=1503) ERROR 12-03 09:38:05 [async_llm.py:704]     outputs = await engine_core.get_output_async()
(APIServer pid=1503) ERROR 12-03 09:38:05 [async_llm.py:704]               ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
(APIServer pid=1503) ERROR 12-03 09:38:05 [async_llm.py:704]   File "/tmp/site/vllm/v1/engine/core_client.py", line 1061, in get_output_async
(APIServer pid=1503) ERROR 12-03 09:38:05 [async_llm.py:704]     raise self._format_exception(outputs) from None
(APIServer pid=1503) ERROR 12-03 09:38:05 [async_llm.py:704] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""


def served_with(extra: str, *, after: str) -> str:
    """The served log with ``extra`` inserted after its first line that contains ``after``."""
    lines = read_fixture(SERVED).split("\n")
    at = next(i for i, line in enumerate(lines) if after in line) + 1
    return "\n".join(lines[:at] + extra.rstrip("\n").split("\n") + lines[at:])


def test_an_engine_dead_traceback_after_ctrl_c_is_not_a_failure_of_the_run():
    text = served_with(ENGINE_DEAD, after="trigger received signal=SIGINT")
    (run,) = parse_vllm_text(text, path=SERVED, mtime=MTIME).runs
    assert run.status == "finished" and run.error is None
    assert any(e.get("code") == "shutdown_error" for e in kind(run, "warning"))


def test_an_engine_dead_error_while_serving_is_a_failure():
    text = served_with(ENGINE_DEAD, after='"GET /health HTTP/1.1" 200 OK')
    (run,) = parse_vllm_text(text, path=SERVED, mtime=MTIME).runs
    assert run.status == "failed"
    assert run_end(run)["phase"] == "serving"
    assert "EngineDeadError" in run.error or "output_handler failed" in run.error
