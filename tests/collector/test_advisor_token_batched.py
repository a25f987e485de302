"""The advisor for token-batched engines (vLLM): a run that timed no steps is priced by an
estimate of what a graph saves (launch overhead against compute that grows with tokens),
FULL and PIECEWISE graphs apart, within max_num_batched_tokens and the current graph pool,
and every figure of it says it is estimated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from replayscope.collector.analysis.advisor import launch
from replayscope.collector.analysis.advisor.choice import paying_sizes, score
from replayscope.collector.analysis.advisor.pricing import CaptureSet
from replayscope.collector.analysis.advisor.report import RunFacts, advise, plan
from replayscope.collector.analysis.advisor.steps import StepRow
from tests.live_server import LOOPBACK_BASE

REPO = Path(__file__).resolve().parents[2]
SERVING_LOG = REPO / "tests" / "importers" / "fixtures" / "vllm_v013_cudagraph_metrics_serving.log"
WEIGHTS_8B = 16_094_208_826          # "Model loading took 14.9889 GiB" (the fixture's Llama-3.1-8B)
CURRENT = [1, 2, 4] + list(range(8, 257, 8)) + list(range(272, 513, 16))      # vLLM's default list to 512


def vllm_facts(rows, config=None, weights=WEIGHTS_8B, captures=None):
    config = {"engine": "vllm", "vllm_version": "0.13.0", "cudagraph_mode": "FULL_AND_PIECEWISE",
              "capture_sizes": CURRENT, **(config or {})}
    run = {"run_id": "v", "source": "vllm-log", "backend": "cuda", "model": "meta-llama/Llama-3.1-8B",
           "device": "cuda", "config": config}
    return RunFacts(run=run, rows=rows, captures=captures, weight_bytes=weights)


def rows_of(sizes, stage, current=CURRENT, t0=1000.0):
    out = []
    for i, bs in enumerate(sizes):
        graph = next((s for s in current if s >= bs), None)
        mode = "eager" if graph is None else ("graph" if graph == bs else "padded")
        out.append(StepRow(t0 + i, stage, bs, mode, "batch_too_large" if graph is None else None, 1))
    return out


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The vLLM 0.13 serving fixture imported into a store, and the API over it."""
    from replayscope.collector.api import create_api
    from replayscope.collector.models import queries
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    url = f"sqlite:///{tmp_path_factory.mktemp('vllm') / 'rs.db'}"
    subprocess.run([sys.executable, "-m", "replayscope", "import", "vllm", str(SERVING_LOG), "--db", url],
                   cwd=REPO, check=True, timeout=120, capture_output=True)
    store = Store.open(url)
    (run_id,) = [r["run_id"] for r in queries.list_runs(store)]
    yield store, run_id, TestClient(create_api(store, Settings(run_services=False)), base_url=LOOPBACK_BASE)
    store.dispose()


def test_the_serving_log_no_longer_gets_the_2048_list_nor_a_74_percent_claim(imported):
    store, run_id, client = imported
    response = client.get(f"/v1/runs/{run_id}/advice")
    assert response.status_code == 200
    advice = response.json()
    # the old advice: 8 16 32 144 504 1104 2048, pool 696 MiB -> 2.72 GiB, "-74.2%"
    assert 2048 not in advice["sizes"] and 1104 not in advice["sizes"]
    assert advice["sizes"] and max(advice["sizes"]) <= 256          # graphs where launches matter: small batches
    change = advice["verdict"]["change"]
    assert abs(change) < 0.01                                        # a gain within the estimate's noise
    current, proposed = plan(advice, "current"), plan(advice, "proposed")
    assert proposed["pool_bytes"]["value"] <= current["pool_bytes"]["value"]
    dropped = {d["size"]: d for d in advice["dropped"]}
    assert 2048 in dropped and dropped[2048]["share"] < launch.MIN_GAIN_SHARE


def test_an_estimated_gain_is_labelled_estimated_on_the_api(imported):
    store, run_id, client = imported
    advice = client.get(f"/v1/runs/{run_id}/advice").json()
    assert advice["objective"]["provenance"] == "estimated" and advice["objective"]["kind"] == "time"
    assert advice["objective"]["basis"].startswith("estimated (the run timed no steps)")
    assert advice["verdict"]["estimated"] is True and advice["verdict"]["text"].startswith("Estimated")
    assert advice["verdict"]["text"].endswith(f"It needs {len(advice['sizes'])} graphs instead of 51.")


def test_full_and_piecewise_graphs_are_priced_apart():
    # 140-token batches: as decode batches a FULL graph of 144 saves the whole launch overhead; as
    # mixed batches a PIECEWISE one saves half of it, less than padding 4 tokens costs an 8B model
    decode = advise(vllm_facts(rows_of([140] * 200, "decode")))
    mixed = advise(vllm_facts(rows_of([140] * 200, "mixed")))
    assert decode["sizes"] == [144]
    assert mixed["sizes"] == [] and mixed["dropped"][0]["size"] == 144
    obj = launch.launch_objective({"cudagraph_mode": "FULL_AND_PIECEWISE", "max_num_seqs": 256}, "", WEIGHTS_8B, [])
    on_full, on_piecewise = obj.graph_cost(144), obj.graph_cost(144, mixed=True)
    assert on_full < on_piecewise < obj.eager_cost(144)
    assert obj.graph_cost(512) == pytest.approx(on_piecewise + obj.graph_b * (512 - 144))   # above max_num_seqs
    both = score({144: 10}, [144], obj, mixed={144: 4})
    assert both.cost == pytest.approx(6 * on_full + 4 * on_piecewise)


def test_piecewise_only_mode_prices_decode_batches_as_piecewise_too():
    obj = launch.launch_objective({"cudagraph_mode": "PIECEWISE"}, "", WEIGHTS_8B, [])
    assert obj.graph_cost(8) == obj.graph_cost(8, mixed=True) > obj.graph_cost(8, mixed=False) - 1e-12
    assert obj.piecewise(8) and obj.full_max == 0


def test_sizes_above_max_num_batched_tokens_are_never_proposed():
    rows = rows_of([2045] * 300, "mixed")
    # given the engine's limit: nothing above it, though 2045 rounds up to 2048
    limited = advise(vllm_facts(rows, {"max_num_batched_tokens": 2046}), eager_weight=3.0)
    assert limited["sizes"] and max(limited["sizes"]) <= 2046
    # not in the log: never above the largest batch the engine made or size it captured
    unknown = advise(vllm_facts(rows), eager_weight=3.0)
    assert unknown["sizes"] == [2045] and unknown["cap"] == 2045


def test_the_importer_reads_max_num_batched_tokens():
    from replayscope.collector.importers import parse_vllm_text
    from tests.importers.conftest import MTIME, parsed, read_fixture, the_only_run

    text = read_fixture(SERVING_LOG.name).replace(
        "Starting to load model meta-llama/Llama-3.1-8B...",
        "Starting to load model meta-llama/Llama-3.1-8B...\n(EngineCore_DP0 pid=3606512) INFO 12-02 16:49:46 "
        "[scheduler.py:230] Chunked prefill is enabled with max_num_batched_tokens=2048.", 1)
    run = the_only_run(parse_vllm_text(text, path=SERVING_LOG.name, mtime=MTIME))
    assert run.run["config"]["max_num_batched_tokens"] == 2048
    banner = the_only_run(parsed(parse_vllm_text, SERVING_LOG.name)).run["config"]
    assert "max_num_batched_tokens" not in banner                  # not in the log: not made up


def test_a_proposal_never_needs_a_larger_pool_than_the_current_list():
    # the current list 8, 16 (pool 110 MiB); the traffic's 60-token batches ran eager: a graph of 60
    # would serve them, but its pool (scaled from 16's footprint) is over the current one
    captures = CaptureSet("v", "measured", seconds={16: 0.1, 8: 0.1}, pool_growth={16: 100 * 2**20, 8: 10 * 2**20},
                          first=16, sizes=(8, 16))
    rows = rows_of([60] * 200 + [8] * 200, "decode", current=[8, 16])
    advice = advise(vllm_facts(rows, {"capture_sizes": [8, 16]}, captures=captures), eager_weight=3.0)
    assert advice["sizes"] == [8] and [d["size"] for d in advice["dropped"]] == [60]
    assert plan(advice, "proposed")["pool_bytes"]["value"] <= plan(advice, "current")["pool_bytes"]["value"]


def test_a_size_the_gain_does_not_pay_for_is_dropped():
    obj = launch.launch_objective({"cudagraph_mode": "FULL_AND_PIECEWISE"}, "", WEIGHTS_8B, [])
    kept, dropped = paying_sizes({8: 100, 2048: 100}, [8, 2048], obj, mixed={2048: 100},
                                 min_share=launch.MIN_GAIN_SHARE)
    assert kept == [8] and [d["size"] for d in dropped] == [2048]


def test_the_model_size_comes_from_the_log_else_the_models_name():
    assert launch.params_in_name("meta-llama/Llama-3.1-8B") == 8e9
    assert launch.params_in_name("Qwen/Qwen2.5-0.5B-Instruct") == 5e8
    assert launch.params_in_name("facebook/opt-125m") is None
    assert launch.weight_bytes(None, "gpt2")[0] is None
    assert launch.launch_objective({}, "gpt2", None, []) is None


def test_under_full_decode_only_a_mixed_batch_gains_nothing_from_any_size():
    obj = launch.launch_objective({"cudagraph_mode": "FULL_DECODE_ONLY"}, "", WEIGHTS_8B, [])
    assert obj.graph_cost(144, mixed=True) == pytest.approx(obj.eager_cost(144))
    assert obj.graph_cost(144, mixed=True) > obj.eager_cost(140)
    advice = advise(vllm_facts(rows_of([140] * 200, "mixed"), {"cudagraph_mode": "FULL_DECODE_ONLY"}))
    assert advice["sizes"] == [] and "FULL_DECODE_ONLY runs them eager" in advice["objective"]["basis"]
