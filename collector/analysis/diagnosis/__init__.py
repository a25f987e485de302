"""A startup post-mortem: the run's own outcome first, then what took longer than expected.

``diagnose(facts)`` reads what a run recorded (phases, captures, degradation steps, how it
ended, its config and which sizes served steps) and returns a ``Diagnosis``:

1. **The outcome.** A failed run leads with its failure: the error, where it happened
   (phase, size, rank) and its class (``replayscope.collector.importers.failures``) with what to do. A finished
   run whose captures failed leads with those. A run that stopped during startup says so.
2. **Findings against expectations** (``replayscope.collector.analysis.expectations``): weight load against the
   bytes at plausible storage bandwidths; capture time per size against the other sizes
   and against a per-size cost for the model's size; torch.compile's own time; the number
   of sizes against the traffic that used them; time between known phases that no line
   accounts for; estimated against actual graph memory.

Findings with a time are ranked by ``seconds``, the time over the expectation; each
evidence line says where its figure came from (``replayscope.contract.wire.PROVENANCES``). A title only
states what its evidence shows. Imported vLLM and SGLang runs are diagnosed from what
their logs state (docs/importing.md); what a log does not state is not assumed.

The startup is wall time: from the run's start (an engine log's first line) to the ready line
(else the failure, else the last phase), with the stretches nothing covers (``timeline``).

The package: ``facts`` (what a run recorded), ``timeline`` (the startup's wall time and its
unaccounted stretches), ``outcome`` and ``findings`` (what is said about it), ``text`` (how
things are named in the sentences).
"""

from __future__ import annotations

from typing import Any

from replayscope.collector.analysis import expectations as ex
from replayscope.collector.analysis.diagnosis.facts import (RunFacts, capture_summary, facts_for_run,
                                                            served_sizes, startup_seconds, weight_bytes)
from replayscope.collector.analysis.diagnosis.findings import (Diagnosis, Evidence, Finding, MIN_SECONDS,
                                                               MIN_SHARE, compile_finding, gap_finding,
                                                               load_finding, memory_finding, outlier_finding,
                                                               sizes_finding, slow_capture_finding)
from replayscope.collector.analysis.diagnosis.timeline import startup_of, unaccounted
from replayscope.collector.analysis.diagnosis.outcome import failure_findings, interrupted_finding
from replayscope.collector.analysis.explanations import STAND_IN_NOTE


def diagnose(facts: RunFacts) -> Diagnosis:
    """The post-mortem of one run: its outcome first, then findings ranked by excess seconds."""
    stand_in = facts.backend == "static"
    summary = capture_summary(facts)
    size, _ = weight_bytes(facts)
    per_size_expected = ex.expected_capture_s(size)
    wall = startup_of(facts)
    startup = (wall.seconds if wall is not None else startup_seconds(facts.phases, facts.captures)) or None
    timed = (load_finding(facts) + compile_finding(facts, per_size_expected)
             + outlier_finding(facts, per_size_expected)
             + slow_capture_finding(facts, per_size_expected, summary, stand_in)
             + sizes_finding(facts, summary) + gap_finding(facts, wall))
    floor = max(MIN_SECONDS, MIN_SHARE * (startup or 0.0))
    timed = [f for f in timed if f.seconds is not None and f.seconds >= floor]
    timed.sort(key=lambda f: -f.seconds)
    outcome = failure_findings(facts) + interrupted_finding(facts)
    leading = [f for f in outcome if f.severity != "info"]
    trailing = [f for f in outcome if f.severity == "info"]
    memory = [] if any(f.failure_class == "oom" for f in outcome) else memory_finding(facts)
    return Diagnosis(run_id=facts.run_id, source=facts.source, status=facts.status, stand_in=stand_in,
                     timing_note=STAND_IN_NOTE if stand_in else None, startup_s=startup, capture=summary,
                     findings=leading + timed + memory + trailing,
                     startup_from=wall.start if wall is not None else None,
                     ready_at=wall.ready_at if wall is not None else None,
                     unaccounted=[g.as_dict() for g in unaccounted(wall)])


def diagnose_run(store: Any, run_id: str) -> Diagnosis | None:
    """``diagnose`` for a stored run (what the API's /diagnosis and the Startup page show)."""
    facts = facts_for_run(store, run_id)
    return None if facts is None else diagnose(facts)


__all__ = ["Diagnosis", "Evidence", "Finding", "RunFacts", "capture_summary", "diagnose", "diagnose_run", "facts_for_run", "served_sizes", "startup_seconds", "weight_bytes"]
