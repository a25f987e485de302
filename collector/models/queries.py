"""The read model: what the API, the dashboard and the CLI show, from one place.

Plain functions of ``(store, ...)`` returning JSON-ready dicts and lists. Counts come
from the rollups (``replayscope.collector.models.rollups``), never from scanning raw steps, so they stay
fast on runs of millions of steps. A function about one run returns ``[]`` (or ``None``
for ``run_summary``) when the run is unknown.

Definitions: ``eager_ratio`` = eager steps / all steps (every stage);
``padded_ratio`` = padded_tokens / (num_tokens + padded_tokens), the share of the
computed tokens that were padding, every stage (prefill tokens included);
``decode_padded_ratio`` = decode_padded_tokens / (decode_num_tokens +
decode_padded_tokens), the same share over the decode stages only (``replayscope.contract.wire.DECODE_STAGES``:
decode and mixed steps; what padding to a captured size costs; None when the run has no
tokens in them); ``share`` in ``reason_breakdown`` is the reason's share of the run's eager
steps. A ``stage`` argument is a stage or a rule's selection (``replayscope.contract.wire.RULE_STAGES``:
``decode+mixed`` is the decode stages).

The functions live by what they read: ``replayscope.collector.models.runs`` (whole runs),
``replayscope.collector.models.steps`` (a run's steps, from the rollups), ``replayscope.collector.models.events``
(its events one by one, alert rules and alerts); this module is the one name the API,
the pages and the CLI import them by.
"""

from __future__ import annotations

from replayscope.collector.models.events import (alert_events, alert_rules, captures, degrades, parity,
                                                 phases, recordings, warnings)
from replayscope.collector.models.runs import (earlier_runs, gauge_counts, headline_rows, headlines,
                                               is_headline, list_runs, rank_table, run_exists, run_summary)
from replayscope.collector.models.steps import (SEQUENCE_BUCKETS, SEQUENCE_READ, SEQUENCE_WINDOWS,
                                                TIMELINE_MAX_POINTS, batch_histogram, batch_sequence,
                                                batch_times, choose_bucket_s, mode_timeline, reason_breakdown,
                                                step_evidence, step_time_by_mode)

__all__ = ["SEQUENCE_BUCKETS", "SEQUENCE_READ", "SEQUENCE_WINDOWS", "TIMELINE_MAX_POINTS", "alert_events",
           "alert_rules", "batch_histogram", "batch_sequence", "batch_times", "captures", "choose_bucket_s",
           "degrades", "earlier_runs", "gauge_counts", "headline_rows", "headlines", "is_headline", "list_runs",
           "mode_timeline", "parity", "phases", "rank_table", "reason_breakdown", "recordings", "run_exists",
           "run_summary", "step_evidence", "step_time_by_mode", "warnings"]
