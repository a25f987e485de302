"""What the summary of ``replayscope trace`` counts of a run the trace ended from outside (its
process was killed, see ``outside.py``): ``steps``, ``modes``, ``reasons``, ``captures``,
``failed_captures``, the keys of a process's own ``close`` record, from the run's events file.
"""

from __future__ import annotations

import json
from typing import Any


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
