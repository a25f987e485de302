"""SGLang 0.5.17 captures prefill CUDA graphs too (keyed by tokens; ``breakable`` by default on
CUDA: "Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[...]"). A prefill
batch that ran without a graph is then not eager because it is a prefill: above the largest
token count captured it is ``batch_too_large``; within, the log does not say why. Without
prefill graphs it stays ``prefill``. Formats: ``model_runner_components/cuda_graph_setup.py``,
``scheduler_components/metrics_reporter.py`` of the 0.5.17 wheel."""

from __future__ import annotations

from replayscope.collector.importers import parse_sglang_text
from tests.importers.conftest import kind, utc

DECODE = """\
[2026-12-03 13:00:06] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2, 4, 8], avail mem=96.20 GB
[2026-12-03 13:00:08] Capture target decode CUDA graph end. elapsed=1.92 s, mem usage=0.07 GB, avail mem=96.13 GB.
"""
PREFILL = """\
[2026-12-03 13:00:08] Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[64, 128, 256], avail mem=96.13 GB
[2026-12-03 13:00:10] Capture target prefill CUDA graph end. elapsed=2.50 s, mem usage=0.11 GB, avail mem=96.02 GB.
"""
BATCHES = """\
[2026-12-03 13:00:11] The server is fired up and ready to roll!
[2026-12-03 13:00:12] Prefill batch, #new-seq: 30, #new-token: 300, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False
[2026-12-03 13:00:12] Prefill batch, #new-seq: 10, #new-token: 100, #cached-token: 0, token usage: 0.00, #running-req: 30, #queue-req: 0, #pending-token: 0, cuda graph: False
"""


def eager_prefills(text: str):
    [run] = parse_sglang_text(text, path="sglang.log", mtime=utc("2026-12-03 14:00:00")).runs
    return [(e["num_tokens"], e["reason"], e.get("evidence")) for e in kind(run, "step") if e["stage"] == "prefill"]


def test_with_prefill_graphs_an_eager_prefill_above_the_largest_is_batch_too_large_else_unknown():
    assert eager_prefills(DECODE + PREFILL + BATCHES) == [
        (300, "batch_too_large", "#new-token: 300 is above the largest captured prefill size (256 tokens)"),
        (100, "unknown", None)]


def test_without_prefill_graphs_an_eager_prefill_is_prefill():
    assert [(tokens, reason) for tokens, reason, _ in eager_prefills(DECODE + BATCHES)] == \
        [(300, "prefill"), (100, "prefill")]
