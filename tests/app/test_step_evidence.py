"""What a traced engine's steps say about themselves reaches the run page: each eager reason's
evidence in its card, and the notes graph steps carry (vLLM's PIECEWISE steps: why not FULL)."""

from __future__ import annotations

import time

from replayscope.collector.ingest import ingest_events, ingest_run


def _step(seq, mode, raw_bs, graph_bs, reason, evidence, stage="mixed"):
    return {"seq": seq, "ts": time.time() - 100 + seq * 0.01, "kind": "step", "stage": stage, "mode": mode,
            "raw_bs": raw_bs, "graph_bs": graph_bs, "num_tokens": raw_bs,
            "padded_tokens": (graph_bs - raw_bs) if mode == "padded" else 0, "reason": reason,
            "duration_s": None, "evidence": evidence}


def test_the_run_page_shows_eager_evidence_and_piecewise_notes(store):
    from replayscope.app.server import create_server
    from replayscope.collector.models import queries
    from replayscope.collector.settings import Settings

    ingest_run(store, {"run_id": "vllm-traced", "name": "vllm serve [rank 0]", "source": "trace",
                       "started_at": time.time() - 100, "backend": "trace", "model": "m", "device": "NVIDIA H200"})
    note = ("PIECEWISE, not FULL (prefill): 3 requests, 40 tokens, a mixed prefill-decode batch; vLLM's FULL graphs "
            "serve uniform decode batches only")
    too_large = "3 requests, 313 tokens (mixed prefill-decode); the largest graph for it holds 128 tokens"
    events = [_step(0, "eager", 313, None, "batch_too_large", too_large)]
    events += [_step(i, "padded", 40, 48, None, note) for i in range(1, 4)]
    events += [_step(i, "graph", 16, 16, None, None, stage="decode") for i in range(4, 9)]
    ingest_events(store, "vllm-traced", events)

    evidence = queries.step_evidence(store, "vllm-traced")
    assert evidence["complete"] and evidence["read_steps"] == 4
    assert [(r["mode"], r["reason"], r["head"], r["steps"]) for r in evidence["rows"]] == [
        ("padded", None, "PIECEWISE, not FULL (prefill)", 3),
        ("eager", "batch_too_large", too_large, 1)]

    create_server(store, Settings(run_services=False))
    from replayscope.app.pages import run
    shown = run.page_data(store, "vllm-traced")
    cards = run.reason_cards(shown["reasons"], shown["evidence"])
    text = str(cards)
    assert too_large + " (1 step)" in text
    assert "PIECEWISE, not FULL (prefill): 3 steps (padded); e.g. " + note in text
