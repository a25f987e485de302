"""The built-in alert on imported engine runs: a vLLM log imported with `replayscope import`
whose --cudagraph-metrics tables show eager batches fires the default rule, which watches
the decode stages (decode and mixed), as the shipped Prometheus rule does."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from replayscope.collector.alerting import alerts
from replayscope.collector.models import queries
from replayscope.collector.store import Store
from tests.stores import without_builtin_rule

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "importers" / "fixtures"


def _import(engine: str, fixture: str, db: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "replayscope", "import", engine, str(FIXTURES / fixture), "--db", db],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_default_rule_fires_on_an_imported_vllm_run_with_eager_batches(tmp_path):
    db = f"sqlite:///{tmp_path / 'rs.db'}"
    store = without_builtin_rule(Store.open(db, upgrade=True))
    default = alerts.create_rule(store, {"name": "eager-ratio", "threshold": 0.2}, now=time.time() - 1)
    decode_only = alerts.create_rule(store, {"name": "decode-only", "threshold": 0.2, "stage": "decode"},
                                     now=time.time() - 1)
    assert default.stage == "decode+mixed"
    _import("vllm", "vllm_v013_cudagraph_metrics_serving.log", db)
    [run] = queries.list_runs(store)
    assert run["source"] == "vllm-log" and run["stage_steps"].keys() == {"decode", "mixed"}

    transitions = alerts.evaluate_alerts(store)
    assert [(t.status, t.rule.name) for t in transitions] == [("firing", "eager-ratio"),
                                                                ("resolved", "eager-ratio")]   # the log ended
    [event] = queries.alert_events(store, run_id=run["run_id"])
    # From the sixth table on, 210 of 627 batches a table (2048 and 1100 tokens > 512) ran eager; the
    # 3-minute log fits one 5-minute window, whose share is highest at the end: the whole run's.
    assert event["rule_name"] == "eager-ratio" and event["reason"] == "batch_too_large"
    assert event["peak"] == run["modes"]["eager"] / run["steps"] == 2785 / 10291
    assert event["steps"] == run["steps"] >= default.min_steps
    burst = min(p["t"] for p in queries.mode_timeline(store, run["run_id"], bucket_s=1) if p["eager"] > 100)
    assert burst < event["started_at"] <= event["ended_at"] <= run["ended_at"]
    # The FULL rows (decode) never ran eager: a rule on decode alone cannot see the fallback.
    assert all(e["rule_id"] != decode_only.id for e in queries.alert_events(store))
    store.dispose()

