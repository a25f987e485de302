"""Findings about how a startup ended: where it failed (the phase, the capture size, the
frame of the engine's traceback) and what to do about that kind of failure, or that it
was interrupted.
"""

from __future__ import annotations

from typing import Any

from replayscope.collector.analysis.diagnosis.facts import RunFacts, capture_summary, provenance_of
from replayscope.collector.analysis.diagnosis.findings import Evidence, Finding, memory_evidence
from replayscope.collector.analysis.diagnosis.text import phase_label, sizes_text
from replayscope.collector.analysis.reasons import size_in_tokens, size_words
from replayscope.collector.importers.failures import FailureClass, classify, first_line
from replayscope.contract import formats
from replayscope.contract.wire import default_provenance


def _where(facts: RunFacts) -> tuple[dict[str, Any], str, str | None]:
    """Where the run failed and how we know: the run_end's own fields, else a failed
    capture, else the phase after the last one that completed (inferred); and the stage of
    the capture it names (its size's unit: ``size_words``), None where no capture says."""
    failure = facts.failure or {}
    where = {k: failure.get(k) for k in ("phase", "graph_bs", "rank", "ts")}
    provenance = default_provenance(facts.source)
    failed = [c for c in facts.captures if c.get("status") == "failed"]
    stage = next((c.get("stage") for c in reversed(failed) if c.get("graph_bs") == where["graph_bs"]), None)
    if where["phase"] is None and failed:
        stage = stage if where["graph_bs"] else failed[-1].get("stage")
        where["phase"] = "capture"
        where["graph_bs"] = where["graph_bs"] or failed[-1].get("graph_bs")
        where["rank"] = where["rank"] or failed[-1].get("rank")
    if where["phase"] is None:
        passes = [p for p in facts.config.get("capture_passes") or []
                  if p.get("graphs") and (p.get("graphs_done") or 0) < p["graphs"]]
        # the last thing recorded: by time, then in the order it was recorded
        def when(r: dict[str, Any], i: int) -> tuple[float, int]:
            return (float(r["ts"]) if r.get("ts") is not None else float("-inf"), r.get("seq", i))
        events = [(when(r, i), "capture", r) for i, r in enumerate(facts.captures)]
        events += [(when(r, i), "phase", r) for i, r in enumerate(facts.phases) if "." not in r.get("phase", "")]
        last = max(events, key=lambda e: e[0]) if events else None
        if passes or (last is not None and last[1] == "capture"):
            where["phase"] = "capture"
            if last is not None and last[1] == "capture":
                where["last_bs"], stage = last[2]["graph_bs"], last[2].get("stage")
            provenance = "inferred"
        elif last is not None:
            where["after"] = last[2]["phase"]
            provenance = "inferred"
    return where, provenance, stage


def _where_text(where: dict[str, Any], stage: str | None, facts: RunFacts) -> str:
    parts = []
    if where.get("phase"):
        parts.append(f"during {phase_label(where['phase'])}")
    elif where.get("after"):
        parts.append(f"after {phase_label(where['after'])}")
    if where.get("graph_bs"):
        parts.append(f"at {size_words(stage, where['graph_bs'], source=facts.source, config=facts.config)}")
    elif where.get("last_bs"):
        parts.append(f"after {size_words(stage, where['last_bs'], source=facts.source, config=facts.config)}")
    if where.get("rank"):
        parts.append(f"on {where['rank']}")
    return " ".join(parts)


def _actions(failure_class: FailureClass) -> dict[str, list[str]]:
    return {"replayscope": list(failure_class.replayscope), "vllm": list(failure_class.vllm),
            "sglang": list(failure_class.sglang)}


def failure_findings(facts: RunFacts) -> list[Finding]:
    source = facts.source
    failed = [c for c in facts.captures if c.get("status") == "failed"]
    errors = [d for d in facts.degrades if d.get("error")]
    run_error = (facts.failure or {}).get("error") or facts.error if facts.status == "failed" else None
    if facts.status != "failed" and not failed and not errors:
        return []
    failure_class = classify(run_error, *(c.get("error") for c in failed), *(d.get("error") for d in errors))
    evidence: list[Evidence] = []
    if facts.status == "failed":
        where, where_prov, stage = _where(facts)
        place = _where_text(where, stage, facts)
        if failure_class.key == "unknown":
            title = "The run failed" + (f" {place}" if place else "")
        else:
            title = f"The run failed: {failure_class.title[0].lower()}{failure_class.title[1:]}"
            title += f" {place}" if place else ""
        if run_error:
            evidence.append(Evidence(f"error: {first_line(run_error)}", default_provenance(source)))
        else:
            evidence.append(Evidence("the run ended failed without an error text", default_provenance(source)))
        if place:
            evidence.append(Evidence(f"where: {place}", where_prov))
    else:
        where = {"phase": "capture", "graph_bs": failed[0].get("graph_bs") if failed else None,
                 "rank": failed[0].get("rank") if failed else None}
        sizes = sorted({int(c["graph_bs"]) for c in failed})
        by_unit: dict[bool, set[int]] = {False: set(), True: set()}         # in tokens or not
        for c in failed:
            by_unit[size_in_tokens(c.get("stage"), source, facts.config)].add(int(c["graph_bs"]))
        named = [f"bs {sizes_text(sorted(by_unit[False]))}"] if by_unit[False] else []
        named += [f"{sizes_text(sorted(by_unit[True]))} tokens"] if by_unit[True] else []
        noun = " and ".join(named) if sizes else "a compile or capture step"
        dropped = f"the run dropped {'them' if len(sizes) > 1 else 'it'} and went on"
        title = (f"The capture of {noun} failed; {dropped}" if failure_class.key == "unknown"
                 else f"{failure_class.title} when capturing {noun}; {dropped}")
    for c in failed:
        took = f" after {formats.seconds(float(c['duration_s']))}" if c.get("duration_s") else ""
        rank = f" on {c['rank']}" if c.get("rank") else ""
        size = size_words(c.get("stage"), c["graph_bs"], source=source, config=facts.config)
        evidence.append(Evidence(f"capture of {size} ({c.get('stage', 'decode')}){rank} failed{took}: "
                                 f"{first_line(c.get('error')) or 'no error text'}", provenance_of(c, source)))
    for d in facts.degrades:
        at = f" ({size_words(None, d['graph_bs'], source=source)})" if d.get("graph_bs") else ""   # no stage: bs
        text = f"degraded {d.get('from')} → {d.get('to')}{at}"
        if d.get("error") and not any(first_line(d["error"]) in e.text for e in evidence):
            text += f": {first_line(d['error'])}"
        evidence.append(Evidence(text, default_provenance(source)))
    name = "none that replayscope knows" if failure_class.key == "unknown" else failure_class.title.lower()
    evidence.append(Evidence(f"class: {name}: {failure_class.what}", "inferred"))
    if failure_class.key == "oom":
        evidence += memory_evidence(facts)
    return [Finding(cause="failure", title=title, severity="error", seconds=None, evidence=evidence,
                    actions=_actions(failure_class), failure_class=failure_class.key, where=where)]


def interrupted_finding(facts: RunFacts) -> list[Finding]:
    if facts.status != "interrupted":
        return []
    imported = facts.source.endswith("-log")
    during_startup = facts.steps == 0
    where, _, stage = _where(facts)
    place = _where_text(where, stage, facts)
    if imported:
        title = "The log ends before the server was ready" if during_startup else \
            "The log ends while the server was running"
    else:
        title = "The run was stopped during startup" if during_startup else \
            f"The run was stopped after {facts.steps:,} steps"
    if during_startup and place:
        title += f" ({place})"
    # what the run recorded of its end (a trace's "the process disappeared ..."), else that it has none
    said = (f"status: interrupted: {facts.error}" if facts.error
            else "status: interrupted (no end or failure was recorded)")
    evidence = [Evidence(said, default_provenance(facts.source))]
    summary = capture_summary(facts)
    if summary["planned"] and summary["ok"] is not None and summary["ok"] < summary["planned"]:
        evidence.append(Evidence(f"{summary['ok']} of {summary['planned']} graphs captured before it stopped",
                                 summary["count_provenance"] or "log"))
    if facts.config.get("partial"):
        evidence.append(Evidence("the log starts mid-way", "log"))
    actions = {"replayscope": ["A run stopped with Ctrl-C or SIGTERM ends 'interrupted'; "
                               "import the whole log to see the rest."]}
    if during_startup:                  # a probe's advice only for a server that had not started
        actions.update({engine: ["Check whether the orchestrator killed the server (a startup probe "
                                 "shorter than the startup)."] for engine in ("vllm", "sglang")})
    return [Finding(cause="interrupted", title=title, severity="warning" if during_startup else "info",
                    seconds=None, evidence=evidence, actions=actions, where=where if during_startup else None)]
