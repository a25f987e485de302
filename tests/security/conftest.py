"""Attack replays against a real ``replayscope serve`` (tests/faults' harness): the
collector as an attacker on the same machine, or a web page in its user's browser, meets it."""

from __future__ import annotations

import time

from tests.faults.conftest import Collector, http_json, migrated_sqlite, wait_for  # noqa: F401

RULE = {"threshold": 0.5, "window_s": 60, "min_steps": 20, "for_s": 0, "keep_firing_for_s": 0}


def run_record(run_id: str, started_at: float) -> dict:
    return {"run_id": run_id, "name": run_id, "source": "runner", "started_at": started_at, "backend": "static",
            "model": "tiny", "device": "cpu", "config": {"capture_sizes": [1, 2, 4, 8]}}


def eager_steps(seq0: int, t0: float, n: int, per_s: int = 200) -> list[dict]:
    """``n`` eager decode steps from ``t0``, ``per_s`` a second."""
    return [{"seq": seq0 + i, "ts": t0 + i / per_s, "kind": "step", "stage": "decode", "mode": "eager",
             "raw_bs": 64, "graph_bs": None, "num_tokens": 64, "padded_tokens": 0, "reason": "batch_too_large",
             "duration_s": 0.004} for i in range(n)]


def firing_run(url: str, run_id: str, headers: dict | None = None) -> None:
    """A run whose decode steps all ran eager, stamped now: every eager-ratio rule fires on it."""
    now = time.time() - 1
    status, body, _ = http_json("POST", f"{url}/v1/runs", run_record(run_id, now - 5), headers=headers)
    assert status in (200, 201), body
    status, body, _ = http_json("POST", f"{url}/v1/runs/{run_id}/events",
                                {"events": eager_steps(0, now - 0.5, 100)}, headers=headers)
    assert status == 200, body
