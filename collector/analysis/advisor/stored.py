"""The advice for a stored run: its facts read through the query layer, then ``report.advise``.

What the API's ``GET /v1/runs/{id}/advice``, the Advisor page and ``replayscope advise``
show. Earlier runs of the same model, device and backend (started before this one, at
most ``EARLIER_RUNS``) lend their captures and step times where this run has none: a
run with graphs off is priced from them, and marked ``estimated``.
"""

from __future__ import annotations

from typing import Any

from replayscope.collector.models import queries
from replayscope.collector.analysis.advisor.objective import TimingRow
from replayscope.collector.analysis.advisor.pricing import CaptureSet
from replayscope.collector.analysis.advisor.report import RunFacts, advise
from replayscope.collector.analysis.advisor.steps import StepRow
from replayscope.contract.wire import DECODE_STAGES, default_provenance

EARLIER_RUNS = 5


def capture_set(store: Any, summary: dict[str, Any]) -> CaptureSet | None:
    """A run's captures of the decode stages (its headline rank's, for a multi-rank log), or None
    without any. A size captured in two modes (vLLM's PIECEWISE ``mixed`` and FULL ``decode``
    graphs) is one size of the list, its capture time and pool growth the two together."""
    run_id, config = summary["run_id"], summary.get("config") or {}
    rows = queries.headline_rows(queries.captures(store, run_id), config, "captures")
    ok = [r for r in rows if r.get("status") == "ok" and r.get("stage", "decode") in DECODE_STAGES]
    phase = [p for p in queries.headline_rows(queries.phases(store, run_id), config) if p["phase"] == "capture"]
    total_s = sum(p["duration_s"] for p in phase if p["duration_s"] is not None) if phase else None
    total_bytes = next((p["mem_bytes"] for p in phase if p.get("mem_bytes")), None) or config.get("graph_mem_bytes")
    sizes = tuple(sorted({int(r["graph_bs"]) for r in ok})) or tuple(
        sorted({int(s) for s in config.get("capture_sizes") or []}))
    if not ok and not total_s and not total_bytes:
        return None
    seconds: dict[int, float] = {}
    growth: dict[int, int] = {}
    for r in ok:
        size = int(r["graph_bs"])
        if r.get("duration_s") is not None:
            seconds[size] = seconds.get(size, 0.0) + float(r["duration_s"])
        if r.get("pool_delta_bytes") is not None:
            growth[size] = growth.get(size, 0) + max(0, int(r["pool_delta_bytes"]))
    first = int(ok[0]["graph_bs"]) if ok and growth else None
    return CaptureSet(run_id, default_provenance(summary.get("source") or ""), seconds, growth, first,
                      total_s or None, int(total_bytes) if total_bytes else None, sizes)


def _timings(store: Any, run_id: str) -> list[TimingRow]:
    return [TimingRow(r["stage"], r["raw_bs"], r["mode"], r["reason"], r["timed_steps"], r["duration_s"])
            for r in queries.batch_times(store, run_id)]


def run_facts(store: Any, run_id: str, summary: dict[str, Any] | None = None) -> RunFacts | None:
    """What the advisor needs of a stored run (``summary``: its ``run_summary``, when read
    already); None for an unknown run."""
    summary = summary or queries.run_summary(store, run_id)
    if summary is None:
        return None
    sequence = queries.batch_sequence(store, run_id)
    rows = [StepRow(r["t"], r["stage"], r["raw_bs"], r["mode"], r["reason"], r["steps"]) for r in sequence["rows"]]
    notes = []
    if sequence["sampled"]:
        notes.append(f"a long run: the sizes are chosen and scored on {queries.SEQUENCE_WINDOWS} evenly spaced "
                     f"stretches of its steps ({sequence['steps_read']:,} of its {sequence['steps_total']:,})")
    detail = summary.get("step_detail") or {}
    if detail.get("raw_expired_before"):
        notes.append("retention expired this run's raw steps before "
                     f"{detail['raw_expired_before']:.0f}: the split in time uses the steps still stored")
    earlier, earlier_timings = [], []
    for other in queries.earlier_runs(store, run_id, EARLIER_RUNS):
        full = queries.run_summary(store, other)
        found = capture_set(store, full)
        if found is not None:
            earlier.append(found)
        sizes = sorted(found.sizes) if found else sorted((full.get("config") or {}).get("capture_sizes") or [])
        earlier_timings.append((_timings(store, other), sizes))
    return RunFacts(run=summary, rows=rows, timings=_timings(store, run_id), captures=capture_set(store, summary),
                    earlier=earlier, earlier_timings=earlier_timings, notes=notes,
                    weight_bytes=weight_bytes(store, summary))


def weight_bytes(store: Any, summary: dict[str, Any]) -> int | None:
    """The model's weights as loaded (the load phase's memory, its headline rank's), or None."""
    phases = queries.headline_rows(queries.phases(store, summary["run_id"]), summary.get("config") or {})
    return next((int(p["mem_bytes"]) for p in phases if p["phase"] == "load_weights" and p.get("mem_bytes")), None)


def advice_for_run(store: Any, run_id: str, budget: int | None = None,
                   eager_weight: float | None = None) -> dict[str, Any] | None:
    """``report.advise`` for a stored run; None for an unknown run."""
    facts = run_facts(store, run_id)
    return None if facts is None else advise(facts, budget, eager_weight)
