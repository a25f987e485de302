"""A run's headline numbers as the Run page and the Runs list write them: the eager share of
the decode stages' steps (prefill, always eager, counted apart), marked as a sample where the
source logs 1 in N batches; padding its source cannot know (an engine's /metrics without a
known capture list) as unknown; a run without steps as "no steps", never 0.0%; and the words for how a
run that has an error ended."""

from __future__ import annotations

from typing import Any

from replayscope.app import formats
from replayscope.contract.wire import DECODE_STAGES

NO_STEPS = "no steps"
NO_DECODE_STEPS = "no decode steps"
PADDING_UNKNOWN = "not in /metrics"


def eager_value(run: dict[str, Any], *, marked: bool = True) -> str:
    """The eager share of the decode stages' steps; "no steps" / "no decode steps" where none;
    with ``marked``, a sample says so ("31.9% (sampled)")."""
    if not run["steps"]:
        return NO_STEPS
    if run["modes"].get("unknown"):
        return formats.NOT_MEASURED           # a source that counts steps without their mode
    value = formats.pct(run["decode_eager_ratio"], NO_DECODE_STEPS)
    if marked and run["decode_eager_ratio"] is not None and run.get("decode_sampled_every"):
        value += " (sampled)"
    return value


def eager_note(run: dict[str, Any]) -> str:
    """What the eager share counts: the decode stages present, the steps apart from them
    (prefill), and the sample it is, where the source logs 1 in N."""
    present = [s for s in DECODE_STAGES if run["stage_steps"].get(s)]
    scope = " and ".join(present) if present else DECODE_STAGES[0]
    note = f"of {scope} steps"
    others = {s: n for s, n in sorted(run["stage_steps"].items()) if s not in DECODE_STAGES and n}
    if others:
        eager_apart = run["modes"]["eager"] - run["decode_eager_steps"]
        apart = ", ".join(f"{formats.count(n)} {s}" for s, n in others.items())
        note += f"; {apart} apart ({formats.count(eager_apart)} eager)"
    sample = (run.get("step_detail") or {}).get("log_sample")
    if sample and sample["stage"] in present:
        note += f"; sampled: the log has 1 in {sample['every']} {sample['stage']} batches"
    return note


def padding_value(run: dict[str, Any], scope: str = "decode") -> str:
    """The padding share of the decode stages' tokens; unknown where the source cannot tell."""
    if not run["padding_known"]:
        return PADDING_UNKNOWN
    return formats.pct(run["decode_padded_ratio"], f"no {scope} tokens")


def eager_pct(run: dict[str, Any]) -> float | None:
    """The eager share as a sortable, filterable number (None: no decode steps)."""
    ratio = run["decode_eager_ratio"] if run["steps"] else None
    return None if ratio is None else round(ratio * 100, 1)


def ended_how(status: str | None) -> str:
    """The words before a run's error: an interrupted run (Ctrl-C, a process stopped from outside)
    did not fail."""
    return {"interrupted": "Run interrupted", "failed": "Run failed"}.get(status or "", "Run ended with an error")
