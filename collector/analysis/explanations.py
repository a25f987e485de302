"""What each fallback reason cost on a run (``reason_costs``), compared only with what the run
measured: a reason's eager steps against graph replays of the same stage and size band.
The reasons themselves are explained in ``replayscope.collector.analysis.reasons``.
"""

from __future__ import annotations

from typing import Any

from replayscope.collector.analysis.reasons import explain, flags_for, size_label
from replayscope.collector.models import queries
from replayscope.contract import formats


def size_band(bs: int) -> tuple[int, int]:
    """The power-of-two band a batch size falls in: 1, 2-3, 4-7, 8-15, ..."""
    low = 1 << (max(1, int(bs)).bit_length() - 1)
    return low, 2 * low - 1


def reason_costs(breakdown: list[dict[str, Any]], batch_rows: list[dict[str, Any]], *,
                 stand_in: bool = False, source: str | None = None,
                 config: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Each reason of ``reason_breakdown`` with its explanation and what it cost the run,
    from measurements only.

    ``batch_rows`` are ``queries.batch_times``. For each stage and power-of-two size band,
    a reason's timed eager steps are compared with the graph (and padded) replays measured
    in the same stage and band of the same run: ``compared`` holds those steps, their eager
    time, what replay took on average for as many steps (``replay_s``) and the difference
    (``extra_s``). Steps with nothing to compare against are counted in ``not_compared``
    with why: no replay measured at those sizes, their own time not measured, or reported
    as counts without a batch size. ``stand_in``: the run's times are CPU timings. ``flags``:
    what to change per engine, the engine of the run's ``source`` first (``reasons.flags_for``).
    """
    replay: dict[tuple[str, tuple[int, int]], list[float]] = {}
    for r in batch_rows:
        if r["mode"] in ("graph", "padded") and r["timed_steps"]:
            acc = replay.setdefault((r["stage"], size_band(r["raw_bs"])), [0, 0.0])
            acc[0] += r["timed_steps"]
            acc[1] += r["duration_s"]
    out = []
    for row in breakdown:
        reason = row["reason"]
        eager: dict[tuple[str, tuple[int, int]], list[float]] = {}
        for r in batch_rows:
            if r["mode"] == "eager" and r["reason"] == reason:
                acc = eager.setdefault((r["stage"], size_band(r["raw_bs"])), [0, 0, 0.0])
                acc[0] += r["steps"]
                acc[1] += r["timed_steps"]
                acc[2] += r["duration_s"]
        compared = {"steps": 0, "eager_s": 0.0, "replay_s": 0.0, "bands": []}
        not_compared: dict[str, dict[str, Any]] = {}

        def skip(why: str, steps: int, band: str | None = None) -> None:
            entry = not_compared.setdefault(why, {"why": why, "steps": 0, "bands": []})
            entry["steps"] += steps
            if band and band not in entry["bands"]:
                entry["bands"].append(band)

        timed_total, eager_total = 0, 0.0
        for key in sorted(eager):
            steps, timed, seconds = eager[key]
            timed_total += timed
            eager_total += seconds
            label = size_label(key[0], *key[1], source=source, config=config)
            graph = replay.get(key)
            if timed and graph:
                compared["steps"] += timed
                compared["eager_s"] += seconds
                compared["replay_s"] += timed * graph[1] / graph[0]
                compared["bands"].append(label)
            elif timed:
                skip("no graph replay of these sizes was measured in this run", timed, label)
            if steps > timed:
                skip("their own time was not measured", steps - timed, label)
        counted = sum(acc[0] for acc in eager.values())
        if row["steps"] > counted:
            skip("reported as counts without a batch size", row["steps"] - counted)
        out.append({
            "reason": reason,
            "steps": row["steps"],
            "share": row.get("share"),
            "time_s": eager_total if timed_total else None,
            "timed_steps": timed_total,
            "compared": {**compared, "extra_s": compared["eager_s"] - compared["replay_s"]}
            if compared["steps"] else None,
            "not_compared": list(not_compared.values()),
            "stand_in": stand_in,
            "explanation": explain(reason).as_dict(),
            "flags": flags_for(explain(reason).as_dict(), source, config),
        })
    return out


STAND_IN_NOTE = ("CPU stand-in (static backend): these are CPU timings of a run without CUDA graphs; "
                 "they say nothing about a GPU.")


def cost_sentence(cost: dict[str, Any]) -> str:
    """What this reason cost on the run, in words, from measurements only."""
    head = f"{cost['steps']:,} eager steps"
    if cost.get("share") is not None:
        head += f" ({cost['share'] * 100:.1f}% of eager steps)"
    if cost.get("time_s") is not None:
        head += f"; {formats.seconds(cost['time_s'])} spent eager over {cost['timed_steps']:,} timed steps"
    else:
        head += "; their time was not measured"
    parts = [head + "."]
    compared = cost.get("compared")
    if compared:
        extra = compared["extra_s"]
        verdict = (f"{formats.seconds(extra)} more than replay" if extra > 0 else
                   f"{formats.seconds(-extra)} less than replay" if extra < 0 else "the same as replay")
        parts.append(f"Against graph replays measured at the same sizes in this run "
                     f"({', '.join(compared['bands'])}): {compared['steps']:,} steps took "
                     f"{formats.seconds(compared['eager_s'])} eager, replay would have taken about "
                     f"{formats.seconds(compared['replay_s'])}: {verdict}.")
    for entry in cost.get("not_compared") or []:
        where = f" ({', '.join(entry['bands'])})" if entry["bands"] else ""
        parts.append(f"{entry['steps']:,} steps{where}: no cost against graphs, {entry['why']}.")
    if cost.get("stand_in"):
        parts.insert(0, STAND_IN_NOTE)
    return " ".join(parts)


def is_stand_in(summary: dict[str, Any] | None) -> bool:
    """Whether a run's times come from the CPU stand-in (``static`` backend)."""
    return bool(summary) and summary.get("backend") == "static"


def explain_run(store: Any, run_id: str) -> list[dict[str, Any]]:
    """``reason_costs`` for a stored run, read through the query layer."""
    summary = queries.run_summary(store, run_id)
    return reason_costs(queries.reason_breakdown(store, run_id), queries.batch_times(store, run_id),
                        stand_in=is_stand_in(summary), source=(summary or {}).get("source"),
                        config=(summary or {}).get("config"))


__all__ = ["STAND_IN_NOTE", "cost_sentence", "explain_run", "is_stand_in", "reason_costs", "size_band"]
