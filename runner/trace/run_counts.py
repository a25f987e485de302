"""What the summary of ``replayscope trace`` counts of a run the trace ended from outside (its
process was killed, see ``outside.py``): ``steps``, ``modes``, ``reasons``, ``captures``,
``failed_captures``, the keys of a process's own ``close`` record.

From the run's events file, or, for a run that went to a collector, from what the collector
stored: the run's summary (``GET /v1/runs/{id}``) and its captures (``GET
/v1/runs/{id}/captures``), asked with the trace's token through the contract's HTTP client.
Where the counts cannot be had, ``counts_unavailable`` says why (the collector did not answer,
answered an error, or answered something else): unknown is not zero, and the summary says so
instead of counting 0 steps.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from replayscope.contract.http import HttpError, request_json
from replayscope.contract.wire import STEP_COUNT_MODES

COUNTS_TIMEOUT_S = 5.0      # each of the two reads; the trace waits for them before its summary
DETAIL_CHARS = 300


def events_file_counts(path: str | None) -> dict[str, Any]:
    """What a run's events file holds, counted as a process's own ``close`` record counts it;
    nothing where the file cannot be read (its ``run_end`` could not be written either, which
    the run's error says)."""
    steps, captures, failed = 0, 0, 0
    modes: dict[str, int] = {}
    reasons: dict[str, int] = {}
    try:
        with open(path or "", "rb") as f:
            for line in f:
                if b'"kind": "step"' not in line and b'"kind": "capture"' not in line:
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue          # a line cut off mid-write
                if event.get("kind") == "step":
                    steps += 1
                    modes[event.get("mode")] = modes.get(event.get("mode"), 0) + 1
                    if event.get("reason"):
                        reasons[event["reason"]] = reasons.get(event["reason"], 0) + 1
                elif event.get("kind") == "capture":
                    captures += 1
                    failed += event.get("status") == "failed"
    except OSError:
        return {}
    return {"steps": steps, "modes": modes, "reasons": reasons, "captures": captures, "failed_captures": failed}


def collector_counts(collector: str, run_id: str, token: str | None = None,
                     timeout_s: float = COUNTS_TIMEOUT_S) -> dict[str, Any]:
    """What the collector stored of the run, counted as ``events_file_counts`` counts a file;
    ``{"counts_unavailable": why}`` where it did not answer, or answered anything but the run's
    summary and captures. ``why`` never holds the token (it travels in a header only)."""
    run_url = f"{collector.rstrip('/')}/v1/runs/{quote(run_id, safe='')}"
    try:
        summary = request_json("GET", run_url, token=token, timeout=timeout_s)
        captures = request_json("GET", f"{run_url}/captures", token=token, timeout=timeout_s)
    except HttpError as failure:
        return counts_unavailable(failure)
    except ValueError:
        return {"counts_unavailable": "the collector's answer is not JSON"}
    counts = _summary_counts(summary, captures)
    if counts is None:
        return {"counts_unavailable": "the collector's answer is not a run's summary and captures"}
    return counts


def counts_unavailable(failure: HttpError) -> dict[str, str]:
    """Why the collector gave no counts, in the summary's words."""
    if failure.status is None:
        return {"counts_unavailable": f"collector did not answer: {failure.message[:DETAIL_CHARS]}"}
    return {"counts_unavailable": f"collector answered HTTP {failure.status}: {failure.detail[:DETAIL_CHARS]}"}


def _summary_counts(summary: Any, captures: Any) -> dict[str, Any] | None:
    """The counts of a run's summary (``steps``, ``modes``, ``reasons``) and capture rows (their
    ``status``); None where they are not shaped so (modes outside the wire's ``STEP_COUNT_MODES``)."""
    if not isinstance(summary, dict) or not isinstance(captures, list):
        return None
    steps, modes, reasons = summary.get("steps"), _tally(summary.get("modes")), _tally(summary.get("reasons"))
    if not _count(steps) or modes is None or reasons is None or not set(modes) <= set(STEP_COUNT_MODES):
        return None
    if not all(isinstance(row, dict) for row in captures):
        return None
    return {"steps": steps, "modes": {mode: n for mode, n in modes.items() if n},
            "reasons": reasons, "captures": len(captures),
            "failed_captures": sum(row.get("status") == "failed" for row in captures)}


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tally(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict) or not all(isinstance(k, str) and _count(n) for k, n in value.items()):
        return None
    return value
