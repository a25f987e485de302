"""Regressions: a run against the earlier runs of the same model and configuration.

The baseline of a run is the ``BASELINE_RUNS`` finished runs that started before it with
the same ``config_key`` (model, backend, device and configuration settings: see
``replayscope.collector.models.fleet.config_key``); the version may differ, which is the point. A metric
regressed when the run's value is beyond the baseline's spread, on the worse side: above
the largest baseline value by more than a margin (the larger of an absolute floor and a
share of the baseline median), so run-to-run noise inside the spread never flags. Below
the smallest by the same margin is an improvement, reported but never alerted. Fewer than
``MIN_BASELINE`` baseline values: not judged (said so).

A ``regression`` alert rule (``replayscope.collector.alerting.regression``) alerts on what this judges.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass
from typing import Any

from replayscope.collector.models import fleet
from replayscope.collector.store import Store

BASELINE_RUNS = 10
MIN_BASELINE = 3


@dataclass(frozen=True)
class Metric:
    label: str
    unit: str                  # ratio | seconds | bytes
    abs_margin: float          # never flag a change smaller than this
    rel_margin: float          # ... or than this share of the baseline median


METRICS: dict[str, Metric] = {
    "eager_ratio": Metric("eager share", "ratio", 0.01, 0.0),
    "graph_step_s": Metric("graph step time", "seconds", 0.0, 0.05),
    "capture_total_s": Metric("capture time", "seconds", 0.5, 0.10),
    "startup_s": Metric("startup time", "seconds", 1.0, 0.10),
    "pool_bytes": Metric("graph pool memory", "bytes", 64 * 2**20, 0.05),
}


def change_of(metric: str, value: float, median: float) -> float | None:
    """Share points for eager share; relative to the median for the rest (None at 0)."""
    if metric == "eager_ratio":
        return value - median
    return (value - median) / median if median else None


def compare(metric: str, value: float | None, baseline: list[float]) -> dict[str, Any] | None:
    """A finding when ``value`` is beyond the spread of ``baseline`` values, else None."""
    if value is None or len(baseline) < MIN_BASELINE:
        return None
    spec = METRICS[metric]
    low, high = min(baseline), max(baseline)
    if low - spec.abs_margin <= value <= high + spec.abs_margin:
        return None                  # inside the spread even by the smallest margin: most runs
    median = statistics.median(baseline)
    margin = max(spec.abs_margin, spec.rel_margin * abs(median))
    if value > high + margin:
        direction = "worse"
    elif value < low - margin:
        direction = "better"
    else:
        return None
    return {"metric": metric, "label": spec.label, "unit": spec.unit, "direction": direction, "value": value,
            "median": median, "low": low, "high": high, "margin": margin,
            "change": change_of(metric, value, median)}


def describe_baseline(members: list[dict[str, Any]]) -> dict[str, Any]:
    """Who the baseline is, for a reader: its runs, dates and versions."""
    first, last = members[0], members[-1]
    versions = sorted({m["version"] for m in members if m["version"]})
    return {"runs": [m["run_id"] for m in members], "names": [m["name"] for m in members], "n": len(members),
            "first_started_at": first["started_at"], "last_started_at": last["started_at"],
            "versions": versions, "config_key": first["config_key"],
            "text": (f"{len(members)} earlier finished run{'s' if len(members) != 1 else ''} of "
                     f"{first['model']} ({first['backend']} on {first['device']}, same configuration): "
                     f"{first['name']} … {last['name']}"
                     + (f"; version{'s' if len(versions) > 1 else ''} {', '.join(versions)}" if versions else ""))}


def findings(row: dict[str, Any], baseline: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """(regressions, improvements) of one run against its baseline runs."""
    found = [compare(m, row[m], [b[m] for b in baseline if b[m] is not None]) for m in METRICS]
    found = [f for f in found if f is not None]
    return [f for f in found if f["direction"] == "worse"], [f for f in found if f["direction"] == "better"]


def judge(row: dict[str, Any], baseline: list[dict[str, Any]]) -> tuple[dict | None, list[dict], list[dict]]:
    """(baseline description, regressions, improvements) of one run."""
    if not baseline:
        return None, [], []
    return (describe_baseline(baseline), *findings(row, baseline))


def annotate(rows: list[dict[str, Any]]) -> None:
    """Add ``regressions``, ``improvements``, ``baseline_runs`` (how many runs it was compared
    with) and ``baseline`` (named; only for a run with findings) to fleet rows, oldest first:
    each run against the finished runs of its configuration before it in ``rows``, exactly
    as ``judge``, with each configuration's last values per metric kept as it goes."""
    names = tuple(METRICS)
    windows: dict[str, tuple[deque, list[deque]]] = {}
    for row in rows:
        window = windows.get(row["config_key"])
        if window is None:
            window = windows[row["config_key"]] = (deque(maxlen=BASELINE_RUNS),
                                                   [deque(maxlen=BASELINE_RUNS) for _ in names])
        members, columns = window
        worse, better = [], []
        if len(members) >= MIN_BASELINE:
            for name, column in zip(names, columns):
                value = row[name]
                if value is not None:
                    found = compare(name, value, [v for v in column if v is not None])
                    if found is not None:
                        (worse if found["direction"] == "worse" else better).append(found)
        row["regressions"], row["improvements"], row["baseline_runs"] = worse, better, len(members)
        row["baseline"] = describe_baseline(list(members)) if worse or better else None
        if row["status"] == "finished":
            members.append(row)
            for name, column in zip(names, columns):
                column.append(row[name])


def run_regressions(store: Store, run_id: str) -> dict[str, Any] | None:
    """One run against its baseline: ``baseline`` (None: no earlier run of its configuration),
    ``regressions``, ``improvements``, ``judged`` (False with fewer than MIN_BASELINE runs).
    None for an unknown run."""
    with store.read() as conn:
        run = fleet.run_config(conn, run_id)
        if run is None:
            return None
        pks = [run.id] + fleet.finished_before(conn, run.config_key, run.started_at, BASELINE_RUNS, other_than=run.id)
        table = fleet.rows_of_runs(conn, pks)
    target = table.pop(run.id)
    baseline, worse, better = judge(target, list(table.values()))
    return {"baseline": baseline, "regressions": worse, "improvements": better,
            "judged": len(table) >= MIN_BASELINE, "figures": {m: target[m] for m in METRICS},
            "version": target["version"], "version_change": version_change(target["version"], baseline)}


def version_change(version: str | None, baseline: dict[str, Any] | None) -> str | None:
    """"vllm 0.12.0 → vllm 0.13.0" when the run's version is not its baseline's (an upgrade
    or a downgrade: what the comparison is then about); None when the same or not recorded."""
    if baseline is None or not version or not baseline["versions"] or baseline["versions"] == [version]:
        return None
    return f"{', '.join(v for v in baseline['versions'] if v != version) or version} → {version}"
