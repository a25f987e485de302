"""Which steps of a run the capture sizes decide, and the part of the run held back.

A run's steps come as ``StepRow``s in time order (many steps per row: one time bucket,
stage, batch size, mode and reason). The advisor chooses sizes from the steps a list of
sizes decides: decode-like steps (``decode_like_stage``) that ran on a graph, or eager
for a reason the list decides (``replayscope.contract.wire.SIZE_DECIDED_REASONS``). Steps eager for
another reason (an adapter, a grammar switch, a prefill under decode-only graphs) would
run eager whatever was captured: they are left out and counted.

The chosen sizes are then scored on steps they were not chosen from: the run is split in
time, the first ``FIT_SHARE`` of its steps to choose from, the rest held back.
"""

from __future__ import annotations

import bisect
from collections import Counter
from functools import partial
from typing import Callable, Iterable, NamedTuple, Sequence

from replayscope.collector.analysis.reasons import size_words
from replayscope.contract.wire import DECODE_STAGES, DECODE_VIEW, SIZE_DECIDED_REASONS, stages_of

SizeName = Callable[[int], str]     # a size of a list in its unit: "bs 8", "512 tokens" (``sizes_named``)
BATCH_SIZE: SizeName = partial(size_words, None)
FIT_SHARE = 0.7            # the first 70% of the steps choose the sizes, the last 30% score them
MIN_HELD_BACK = 20         # fewer held-back steps than this score nothing: no split


class StepRow(NamedTuple):
    t: float                # start of the row's time bucket (unix s); rows come in time order
    stage: str
    raw_bs: int
    mode: str               # graph | padded | eager
    reason: str | None      # why eager; None otherwise
    steps: int


def decode_like_stage(stages: Iterable[str]) -> str | None:
    """The stages whose batches capture sizes serve, as a rule names them: the decode stages
    (``replayscope.contract.wire.DECODE_STAGES``: ``decode`` and vLLM's ``mixed`` batches, which its graphs
    serve by their token count) that the run has, one stage or ``decode+mixed``
    (``replayscope.contract.wire.DECODE_VIEW``). None: the run has neither."""
    seen = set(stages)
    present = [stage for stage in DECODE_STAGES if stage in seen]
    if not present:
        return None
    return present[0] if len(present) == 1 else DECODE_VIEW


def sizes_named(stage: str | None, source: str | None, config: dict | None) -> SizeName:
    """How the advice names a size of the list for ``stage`` (one stage or ``decode+mixed``) on a
    run from ``source``: ``reasons.size_words``, tokens where vLLM's sizes serve mixed batches."""
    return partial(size_words, stage, source=source, config=config)


def served(raw_bs: int, sizes: Sequence[int], padding: bool = True) -> int | None:
    """The captured size that serves a batch of ``raw_bs`` (as ``replayscope.runner.dispatch`` chooses it:
    the size itself, else with padding the next larger one), or None: eager."""
    if padding:
        i = bisect.bisect_left(sizes, raw_bs)
        return sizes[i] if i < len(sizes) else None
    return raw_bs if raw_bs in sizes else None


def size_decided(row: StepRow, current: Sequence[int], padding: bool = True) -> bool:
    """Whether the capture list decided how this step ran. An eager step of reason
    ``unknown`` counts when no size of the run's list could have served it (what a too-large
    batch looks like), not when one could (something else sent it eager)."""
    if row.mode != "eager":
        return True
    if row.reason in SIZE_DECIDED_REASONS:
        return True
    if row.reason in (None, "unknown"):
        return served(row.raw_bs, current, padding) is None
    return False


def select(rows: Iterable[StepRow], current: Sequence[int], padding: bool = True
           ) -> tuple[list[StepRow], dict[str, int], str | None]:
    """(the decode-like rows the list decides, steps left out by reason, the stage chosen)."""
    rows = list(rows)
    stage = decode_like_stage(r.stage for r in rows)
    stages = stages_of(stage) if stage else ()
    kept, left_out = [], Counter()
    for row in rows:
        if row.stage not in stages:
            continue
        if size_decided(row, current, padding):
            kept.append(row)
        else:
            left_out[row.reason or "unknown"] += row.steps
    return kept, dict(left_out), stage


def split(rows: Sequence[StepRow], fit_share: float = FIT_SHARE
          ) -> tuple[list[StepRow], list[StepRow], float | None]:
    """(rows to choose from, rows held back, the time the held-back part starts).

    The split falls between time buckets, at the first bucket that brings the steps before it
    to ``fit_share`` of the whole; no split (everything to choose from, nothing held back,
    None) when that would hold back fewer than ``MIN_HELD_BACK`` steps or the run has a
    single time bucket."""
    if not 0 < fit_share < 1:
        raise ValueError("fit_share must be between 0 and 1")
    total = sum(r.steps for r in rows)
    times = sorted({r.t for r in rows})
    if len(times) < 2:
        return list(rows), [], None
    seen, at = 0, None
    per_t = Counter()
    for r in rows:
        per_t[r.t] += r.steps
    for t in times:
        if seen >= fit_share * total:
            at = t
            break
        seen += per_t[t]
    if at is None or total - seen < MIN_HELD_BACK or seen == 0:
        return list(rows), [], None
    return [r for r in rows if r.t < at], [r for r in rows if r.t >= at], at


def distribution(rows: Iterable[StepRow], stage: str | None = None) -> dict[int, int]:
    """Steps per batch size (``stage``: of that stage only)."""
    out: Counter = Counter()
    for r in rows:
        if stage is None or r.stage == stage:
            out[r.raw_bs] += r.steps
    return dict(sorted(out.items()))
