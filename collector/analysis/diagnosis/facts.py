"""The facts a startup diagnosis reads: one run's phases, captures, degrades, failure
and served sizes (``RunFacts``), read from the store through the query layer, and the
figures derived from them (capture summary, startup length, weight bytes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from replayscope.collector.models import queries
from replayscope.contract.wire import default_provenance


LOAD_PHASES = ("load_weights", "weights", "model_load", "model_loading")
COMPILE_PHASES = ("compile", "torch_compile", "dynamo")


@dataclass
class RunFacts:
    """What the diagnosis reads about one run (``facts_for_run`` gathers it from a store)."""
    run_id: str = ""
    source: str = "runner"
    backend: str = ""
    status: str = "finished"
    started_at: float | None = None
    config: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    failure: dict[str, Any] | None = None      # queries.run_summary's: ts, error, rank, phase, graph_bs
    phases: list[dict[str, Any]] = field(default_factory=list)
    captures: list[dict[str, Any]] = field(default_factory=list)
    degrades: list[dict[str, Any]] = field(default_factory=list)
    steps: int = 0
    served: dict[str, set[int]] | None = None  # stage -> captured sizes that served a step


def provenance_of(row: dict[str, Any], source: str) -> str:
    return row.get("provenance") or default_provenance(source)


def top(phases: Iterable[dict[str, Any]], names: Iterable[str]) -> list[dict[str, Any]]:
    names = tuple(names)
    return [p for p in phases if p.get("phase") in names]


def is_capture_phase(name: str) -> bool:
    return name == "capture" or (name.startswith("capture_") and "." not in name)


def known(values: Iterable[Any]) -> list[float]:
    return [float(v) for v in values if v is not None]


def time_span(row: dict[str, Any]) -> tuple[float, float] | None:
    """(start, end) of a phase or capture from its timestamps; None without any."""
    end = row.get("ts")
    duration = row.get("duration_s")
    start = row.get("start_ts")
    if end is None and start is None:
        return None
    if start is None:
        start = float(end) - float(duration or 0.0)
    if end is None:
        end = float(start) + float(duration or 0.0)
    return float(start), float(end)


def weight_bytes(facts: RunFacts) -> tuple[int | None, str | None]:
    """The model's weight bytes and where the figure came from."""
    for p in top(facts.phases, LOAD_PHASES):
        if p.get("mem_bytes"):
            return int(p["mem_bytes"]), provenance_of(p, facts.source)
    for key in ("weights_mem", "weight_bytes"):
        if facts.config.get(key):
            return int(facts.config[key]), "log" if facts.source.endswith("-log") else "measured"
    return None, None


def capture_summary(facts: RunFacts) -> dict[str, Any]:
    """What is known about the capture as a whole: total time, sizes, counts, with provenance.

    The total is the engine's own capture phase (its wall time) when there is one, else the
    sum of timed per-size rows. Sizes come from the capture rows, else from the config the
    log printed; the count of graphs from the rows, else from a progress bar's total.
    """
    source = facts.source
    totals = [p for p in facts.phases if is_capture_phase(p.get("phase", "")) and p.get("duration_s") is not None]
    ok = [c for c in facts.captures if c.get("status", "ok") == "ok"]
    failed = [c for c in facts.captures if c.get("status") == "failed"]
    timed = [c for c in facts.captures if c.get("duration_s") is not None]
    if totals:
        total, total_prov = sum(float(p["duration_s"]) for p in totals), provenance_of(totals[0], source)
    elif timed:
        total, total_prov = sum(float(c["duration_s"]) for c in timed), provenance_of(timed[0], source)
    else:
        total, total_prov = None, None
    sizes = sorted({int(c["graph_bs"]) for c in facts.captures})
    sizes_prov = provenance_of(facts.captures[0], source) if facts.captures else None
    if not sizes and facts.config.get("capture_sizes"):
        sizes = sorted({int(s) for s in facts.config["capture_sizes"]})
        sizes_prov = "log" if source.endswith("-log") else "measured"
    listed = facts.config.get("capture_count")      # the list's length, else a bar's total
    passes = facts.config.get("capture_passes") or []
    bar_total = sum(int(p.get("graphs") or 0) for p in passes)
    bar_done = sum(int(p.get("graphs_done") or 0) for p in passes)
    if facts.captures:
        count, count_prov, planned, done = len(facts.captures), sizes_prov, None, len(ok)
    elif bar_total:
        count, count_prov, planned, done = bar_done, "log", bar_total, bar_done
    elif sizes and total is not None:
        count, count_prov, planned, done = len(sizes), sizes_prov, None, None
    elif listed and total is not None:
        count, count_prov, planned, done = int(listed), "log", None, None
    else:
        count, count_prov, planned, done = 0, None, (len(sizes) or None), None
    return {"total_s": total, "total_provenance": total_prov, "sizes": sizes, "sizes_provenance": sizes_prov,
            "count": count, "count_provenance": count_prov, "planned": planned, "ok": done, "failed": len(failed)}


def startup_seconds(phases: list[dict[str, Any]], captures: list[dict[str, Any]]) -> float:
    """Wall time of the startup: first phase start to last phase end when timestamps are
    known, else the sum of the timed phases (else of the captures)."""
    spans = [s for p in phases if p.get("duration_s") is not None and (s := time_span(p)) is not None]
    if spans and len(spans) == len([p for p in phases if p.get("duration_s") is not None]):
        return max(e for _, e in spans) - min(s for s, _ in spans)
    total = sum(known(p.get("duration_s") for p in phases if "." not in p.get("phase", "")))
    return total or sum(known(c.get("duration_s") for c in captures))


def served_sizes(batch_rows: list[dict[str, Any]], captures: list[dict[str, Any]],
                 listed: list[int] | None = None) -> dict[str, set[int]] | None:
    """Per stage, the captured sizes that served at least one step (padding replays the
    smallest captured size that fits); None when no step recorded a batch size. Without
    capture rows, the capture list the config states (``listed``) stands for every stage
    that replayed a graph."""
    replayed = [r for r in batch_rows if r["mode"] in ("graph", "padded")]
    if not batch_rows:
        return None
    captured: dict[str, list[int]] = {}
    for c in captures:
        if c.get("status", "ok") == "ok":
            captured.setdefault(c.get("stage", "decode"), []).append(int(c["graph_bs"]))
    if not captured and listed:
        captured = {r["stage"]: [int(s) for s in listed] for r in replayed}
    served: dict[str, set[int]] = {stage: set() for stage in captured}
    for r in replayed:
        sizes = sorted(captured.get(r["stage"], []))
        size = r["raw_bs"] if r["mode"] == "graph" else next((s for s in sizes if s >= r["raw_bs"]), None)
        if size is not None and r["stage"] in served:
            served[r["stage"]].add(size)
    return served


def facts_for_run(store: Any, run_id: str) -> RunFacts | None:
    """A stored run's facts, read through the query layer; None for an unknown run."""
    summary = queries.run_summary(store, run_id)
    if summary is None:
        return None
    config = summary.get("config") or {}
    # one rank's figures where several ranks logged the same fact (docs/importing.md, Ranks);
    # every rank's failed captures
    every = queries.captures(store, run_id)
    headline = queries.headline_rows(every, config, "captures")
    captures = [c for c in every if c in headline or c.get("status") == "failed"]
    return RunFacts(
        run_id=run_id, source=summary["source"], backend=summary["backend"], status=summary["status"],
        started_at=summary["started_at"], config=dict(config, partial=summary.get("partial")),
        error=summary.get("error"), failure=summary.get("failure"),
        phases=queries.headline_rows(queries.phases(store, run_id), config),
        captures=captures, degrades=queries.degrades(store, run_id), steps=summary["steps"],
        served=served_sizes(queries.batch_times(store, run_id), captures, config.get("capture_sizes")))
