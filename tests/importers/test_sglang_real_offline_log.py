"""``replayscope import sglang`` of a real SGLang 0.5.17 offline run's complete log (the H200 run
recorded by ``benchmarks/sglang_programs/recorder.py``: 40 requests, FA3, decode graphs ``full``,
prefill graphs ``breakable``): a finished offline run with both capture passes the log states."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.sglang_harness import log_facts
from tests.importers.test_cli import run

LOG = Path(__file__).parents[1] / "engines" / "fixtures" / "sglang-0.5.17-offline.log"


def test_the_real_offline_log_is_a_finished_run_with_the_logs_captures():
    facts = log_facts(LOG.read_text())
    [imported] = json.loads(run(["import", "sglang", str(LOG), "--json", "--dry-run"]))["runs"]
    assert imported["status"] == "finished" and imported["error"] is None
    by_stage = {stage: sorted(c["graph_bs"] for c in imported["captures"] if c["stage"] == stage)
                for stage in ("decode", "prefill")}
    assert by_stage == {"decode": sorted(facts["capture_passes"]["target decode"]["sizes"]),
                        "prefill": sorted(facts["capture_passes"]["target prefill"]["sizes"])}
    assert len(imported["captures"]) == 36 + 58
    # the two passes' "mem usage" (0.19 + 0.06 GB), as SGLang rounds them
    logged = sum(p["mem_gb"] for p in facts["capture_passes"].values())
    assert abs(imported["graph_mem_bytes"] / (1 << 30) - logged) < 0.005
    assert imported["model"] == "/root/out/sg/model"
