"""The advisor benchmark's recorded run as the advisor's facts, from its events in memory.

What ``replayscope.collector.analysis.advisor.stored`` reads from a store, built from the events
themselves: each step a row of its own (its time its own), step times per (stage, batch
size, mode, reason), the decode captures. The benchmark replays the held-back steps one by
one, so it needs every step as its own row, not a store's time buckets.
"""

from __future__ import annotations

from typing import Any, Iterable

from replayscope.collector.analysis.advisor.objective import TimingRow
from replayscope.collector.analysis.advisor.pricing import CaptureSet
from replayscope.collector.analysis.advisor.report import RunFacts
from replayscope.collector.analysis.advisor.steps import StepRow
from replayscope.contract.wire import DECODE_STAGES, default_provenance


def facts_from_events(run: dict[str, Any], events: Iterable[dict[str, Any]]) -> RunFacts:
    rows: list[StepRow] = []
    timed: dict[tuple, list] = {}
    captures: list[dict[str, Any]] = []
    capture_phases: list[dict[str, Any]] = []
    weights = None
    for e in sorted(events, key=lambda e: (e["ts"], e["seq"])):
        kind = e["kind"]
        if kind == "step":
            rows.append(StepRow(e["ts"], e["stage"], e["raw_bs"], e["mode"], e.get("reason"), 1))
            if e.get("duration_s") is not None:
                acc = timed.setdefault((e["stage"], e["raw_bs"], e["mode"], e.get("reason")), [0, 0.0])
                acc[0] += 1
                acc[1] += float(e["duration_s"])
        elif kind == "capture" and e.get("stage", "decode") in DECODE_STAGES and e.get("status") == "ok":
            captures.append(e)
        elif kind == "phase" and e.get("phase") == "capture":
            capture_phases.append(e)
        elif kind == "phase" and e.get("phase") == "load_weights" and e.get("mem_bytes") and weights is None:
            weights = int(e["mem_bytes"])
    timings = [TimingRow(stage, bs, mode, reason, n, total) for (stage, bs, mode, reason), (n, total) in timed.items()]
    found = None
    if captures or capture_phases:
        growth = {e["graph_bs"]: max(0, int(e["pool_delta_bytes"])) for e in captures
                  if e.get("pool_delta_bytes") is not None}
        found = CaptureSet(
            run.get("run_id", ""), default_provenance(run.get("source") or ""),
            seconds={e["graph_bs"]: float(e["duration_s"]) for e in captures if e.get("duration_s") is not None},
            pool_growth=growth, first=captures[0]["graph_bs"] if captures and growth else None,
            total_s=sum(p["duration_s"] for p in capture_phases if p.get("duration_s") is not None) or None,
            total_bytes=next((p["mem_bytes"] for p in capture_phases if p.get("mem_bytes")), None),
            sizes=tuple(sorted({e["graph_bs"] for e in captures})))
    return RunFacts(run=run, rows=rows, timings=timings, captures=found, weight_bytes=weights)
