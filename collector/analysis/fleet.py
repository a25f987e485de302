"""The fleet read model: every run's headline figures (``replayscope.collector.models.fleet``), judged
against its baseline (``replayscope.collector.analysis.regressions``), grouped and over time. The fleet
page and the API read it. Runs group by (model, backend, device, version).
"""

from __future__ import annotations

import statistics
from typing import Any

from replayscope.collector.analysis import regressions
from replayscope.collector.models.fleet import GROUP_KEYS, Filters, fleet_options, run_rows
from replayscope.collector.store import Store
from replayscope.contract.wire import MODES

DAY_S = 86400


def fleet_runs(store: Store, filters: Filters | None = None) -> list[dict[str, Any]]:
    """Every run the filters select, oldest first, with its figures and (from
    ``replayscope.collector.analysis.regressions``) ``regressions``: the figures beyond the spread of the
    earlier runs of its model and configuration, and ``baseline``: those runs, named."""
    f = filters or Filters()
    every = run_rows(store, f)
    regressions.annotate(every)
    return [r for r in every
            if (f.since is None or r["started_at"] >= f.since) and (f.version is None or r["version"] == f.version)]


def _weighted(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Figures of a set of runs: shares weighted by steps and tokens, step times by timed
    steps, capture and startup as medians of the runs that have them (one pass: a fleet
    page makes this per group and per time bucket)."""
    steps = eager = tokens = padded = regressed = 0
    totals = {m: [0.0, 0] for m in MODES}
    captures, startups, pools = [], [], []
    for r in rows:
        if r["eager_ratio"] is not None:               # a run whose steps' modes are known
            steps += r["decode_steps"]                  # the eager share is the decode stages' (prefill apart)
            eager += r["decode_eager_steps"]
        if r["decode_padded_ratio"] is not None:       # a scrape's padding is unknown, not 0
            tokens += r["decode_num_tokens"]
            padded += r["decode_padded_tokens"]
        for mode, (seconds, timed) in r["step_sums"].items():
            acc = totals[mode]
            acc[0] += seconds
            acc[1] += timed
        if r["capture_total_s"] is not None:
            captures.append(r["capture_total_s"])
        if r["startup_s"] is not None:
            startups.append(r["startup_s"])
        if r["pool_bytes"] is not None:
            pools.append(r["pool_bytes"])
        if r["regressions"]:
            regressed += 1
    step_s = {m: (total / timed if timed else None) for m, (total, timed) in totals.items()}
    return {"runs": len(rows), "steps": sum(r["steps"] for r in rows), "eager_ratio": eager / steps if steps else None,
            "decode_padded_ratio": padded / (tokens + padded) if tokens + padded else None, "step_s": step_s,
            "graph_step_s": step_s["graph"], "padded_step_s": step_s["padded"], "eager_step_s": step_s["eager"],
            "capture_total_s": statistics.median(captures) if captures else None,
            "startup_s": statistics.median(startups) if startups else None,
            "pool_bytes": max(pools) if pools else None, "regressions": regressed}


def group_key(row: dict[str, Any]) -> tuple:
    return tuple(row[k] for k in GROUP_KEYS)


def fleet_groups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (model, backend, device, version): weighted figures, the newest run."""
    groups: dict[tuple, list] = {}
    for row in rows:
        groups.setdefault(group_key(row), []).append(row)
    out = []
    for key, members in groups.items():
        latest = max(members, key=lambda r: r["started_at"])
        out.append({**dict(zip(GROUP_KEYS, key)), **_weighted(members), "latest_run_id": latest["run_id"],
                    "latest_name": latest["name"],
                    "first_started_at": min(r["started_at"] for r in members),
                    "last_started_at": latest["started_at"]})
    return sorted(out, key=lambda g: (-g["last_started_at"], [str(g[k]) for k in GROUP_KEYS]))


def choose_bucket_s(span_s: float) -> int:
    """A day for spans over ~2 weeks, else hours, for at most a few hundred points per group."""
    for bucket in (3600, 6 * 3600, DAY_S, 7 * DAY_S):
        if span_s / bucket <= 400:
            return bucket
    return 7 * DAY_S


def fleet_series(rows: list[dict[str, Any]], bucket_s: int | None = None) -> list[dict[str, Any]]:
    """Per group and time bucket (of the runs' start): the group's weighted figures."""
    if not rows:
        return []
    if bucket_s is None:
        bucket_s = choose_bucket_s(rows[-1]["started_at"] - rows[0]["started_at"])
    cells: dict[tuple, list] = {}
    for row in rows:
        t = row["started_at"] - row["started_at"] % bucket_s
        cells.setdefault((group_key(row), t), []).append(row)
    out = [{"group": " · ".join(str(v) if v is not None else "–" for v in key), **dict(zip(GROUP_KEYS, key)),
            "t": t, "bucket_s": bucket_s, **_weighted(members)}
           for (key, t), members in cells.items()]
    return sorted(out, key=lambda p: (p["group"], p["t"]))


RUNS_LISTED = 500


def fleet(store: Store, filters: Filters | None = None, bucket_s: int | None = None,
          runs_listed: int = RUNS_LISTED) -> dict[str, Any]:
    """Everything the fleet page shows: ``groups`` and ``series`` over every run the filters
    select, ``runs`` (the newest ``runs_listed`` of them, newest first), ``runs_total``,
    ``options``."""
    rows = fleet_runs(store, filters)
    return {"runs": rows[::-1][:runs_listed], "runs_total": len(rows), "groups": fleet_groups(rows),
            "series": fleet_series(rows, bucket_s), "options": fleet_options(store)}
