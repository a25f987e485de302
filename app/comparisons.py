"""What the pages say about a run beyond its own figures: how it compares with the earlier
runs of its model and configuration (``replayscope.collector.analysis.regressions``), and how much of its step
detail is stored (sampled at the source, expired by retention), and what its source cannot
know. Text only, from query results; the run page and the fleet page both use it."""

from __future__ import annotations

from typing import Any

from dash import html

from replayscope.app import formats, headlines


def value_text(unit: str, value: float | None) -> str:
    if unit == "ratio":
        return formats.pct(value)
    if unit == "bytes":
        return formats.size(value)
    return formats.seconds(value)


def change_text(finding: dict[str, Any]) -> str:
    """+3.2 share points (eager share), else +30% of the baseline median."""
    change = finding["change"]
    if change is None:
        return "from zero"
    if finding["metric"] == "eager_ratio":
        return f"{change * 100:+.1f} share points"
    return f"{change * 100:+.0f}%"


def finding_text(finding: dict[str, Any]) -> str:
    """'graph step time 13.0 ms: +30% over the baseline median 10.0 ms (its runs: 9.90 ms–10.1 ms)'."""
    unit = finding["unit"]
    return (f"{finding['label']} {value_text(unit, finding['value'])}: {change_text(finding)} against the "
            f"baseline median {value_text(unit, finding['median'])} (its runs: {value_text(unit, finding['low'])}"
            f"–{value_text(unit, finding['high'])})")


def short_findings(findings: list[dict[str, Any]]) -> str:
    """One cell: 'graph step time +30%; startup time +25%'."""
    return "; ".join(f"{f['label']} {change_text(f)}" for f in findings)


def comparison_block(result: dict[str, Any] | None) -> list[Any]:
    """The run page's section: regressions (with the baseline named), improvements, or why
    the run was not compared."""
    if result is None or result["baseline"] is None:
        return [html.P("Not compared: no earlier finished run of this model and configuration.",
                       className="hint")]
    baseline = result["baseline"]
    named = html.P(f"Baseline: {baseline['text']}.", className="hint", id="run-baseline")
    if result.get("version_change"):
        named = html.Div([named, html.P(f"Version changed: {result['version_change']}; the figures below compare "
                                        "this version with the earlier ones.", className="hint",
                                        id="run-version-change")])
    if not result["judged"]:
        return [named, html.P(f"Not judged yet: {formats.plural(baseline['n'], 'earlier run')}, "
                              "at least 3 are needed to know their spread.", className="hint")]
    parts: list[Any] = []
    if result["regressions"]:
        parts.append(html.Ul([html.Li(finding_text(f), className="regression", **{"data-metric": f["metric"]})
                              for f in result["regressions"]], className="regressions"))
    else:
        parts.append(html.P("No figure is beyond the spread of the baseline.", className="hint"))
    if result["improvements"]:
        parts.append(html.P("Better than the baseline: " + "; ".join(finding_text(f) for f in result["improvements"]),
                            className="hint"))
    return parts + [named]


def detail_notes(detail: dict[str, Any]) -> list[str]:
    """What a reader should know about the stored step detail of a run."""
    notes = []
    if detail.get("graph_sample"):
        notes.append(f"Step detail sampled at the source: 1 in {detail['graph_sample']} graph steps was sent one "
                     "by one, the rest as exact counts; totals, shares, timelines, batch sizes and step times "
                     "count every step.")
    if detail.get("log_sample"):
        notes.append(log_sample_note(detail["log_sample"]))
    if detail.get("raw_expired_before") is not None:
        notes.append(f"Raw step events before {formats.when(detail['raw_expired_before'], seconds=False)} UTC "
                     "have expired (retention); every figure here comes from rollups kept for good.")
    if detail.get("seconds_expired_before") is not None:
        notes.append(f"1-second detail before {formats.when(detail['seconds_expired_before'], seconds=False)} UTC "
                     "has expired: timelines are in whole minutes.")
    return notes


# What each entry of a run's ``not_measured`` (replayscope.contract.wire NOT_MEASURABLE) is, in words.
NOT_MEASURED_WORDS = {"modes": "how each step ran (graph, padded or eager)", "padding": "padding",
                      "reasons": "why a step ran eager", "batch_sizes": "each step's batch size"}


def not_measured_note(summary: dict[str, Any]) -> str | None:
    """What a run's source cannot know (a scrape of /metrics), said once on its page."""
    missing = [NOT_MEASURED_WORDS.get(m, m) for m in summary.get("not_measured") or []]
    if not missing:
        return None
    unknown = summary["modes"].get("unknown", 0)
    text = (f"Scraped from {summary['source'].removesuffix('-metrics')}'s /metrics, which cannot show "
            f"{', '.join(missing[:-1]) + ' or ' if len(missing) > 1 else ''}{missing[-1]}: "
            f"those read \"{headlines.PADDING_UNKNOWN}\" or \"not measured\" here, never 0 or graph.")
    if unknown:
        text += (f" {formats.plural(unknown, 'step')} of unknown mode (counted by the engine; "
                 "eager only where known above the largest capture size).")
    return text


def log_sample_note(sample: dict[str, Any]) -> str:
    """What a run whose source logs 1 in N steps of a stage (SGLang's decode lines) counts."""
    every, logged, stage = sample["every"], sample["logged"], sample["stage"]
    where = (f"decode_log_interval={every} in the log's server_args" if sample["provenance"] == "log"
             else "SGLang's default decode_log_interval: the log does not print its server_args")
    return (f"{stage.capitalize()} steps are a sample: SGLang logs 1 {stage} batch in {every} ({where}). "
            f"{formats.plural(logged, f'{stage} line')} logged, so about {logged * every:,} {stage} batches ran "
            f"(estimated). Prefill batches are each logged: shares within {stage} steps hold, but a share over "
            f"all steps counts each prefill batch like {every} {stage} batches.")


def clock_note(ahead_s: float) -> str:
    """A run whose events were stamped ahead of the collector's clock: what its figures mean."""
    return (f"Some events of this run were stamped up to {formats.seconds(ahead_s)} ahead of the collector's "
            "clock when they arrived. Its last event time, and the clock its alerts are evaluated on, count "
            "each of them as stamped when it arrived, so one wrong stamp cannot silence its alerts.")


def detail_short(row: dict[str, Any]) -> str:
    """One cell: 'sampled 1/8; raw expired'."""
    parts = []
    if row.get("graph_sample"):
        parts.append(f"sampled 1/{row['graph_sample']}")
    if row.get("raw_expired_before") is not None:
        parts.append("raw expired")
    return "; ".join(parts) or "all"
