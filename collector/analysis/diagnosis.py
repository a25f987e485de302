"""A startup post-mortem: the run's own outcome first, then what took longer than expected.

``diagnose(facts)`` reads what a run recorded (phases, captures, degradation steps, how it
ended, its config and which sizes served steps) and returns a ``Diagnosis``:

1. **The outcome.** A failed run leads with its failure: the error, where it happened
   (phase, size, rank) and its class (``collector.importers.failures``) with what to do. A finished
   run whose captures failed leads with those. A run that stopped during startup says so.
2. **Findings against expectations** (``collector.analysis.expectations``): weight load against the
   bytes at plausible storage bandwidths; capture time per size against the other sizes
   and against a per-size cost for the model's size; torch.compile's own time; the number
   of sizes against the traffic that used them; time between known phases that no line
   accounts for; estimated against actual graph memory.

Findings with a time are ranked by ``seconds``, the time over the expectation; each
evidence line says where its figure came from (``runner.wire.PROVENANCES``). A title only
states what its evidence shows. Imported vLLM and SGLang runs are diagnosed from what
their logs state (docs/importing.md); what a log does not state is not assumed.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from collector.analysis import expectations as ex
from collector.analysis.explanations import STAND_IN_NOTE
from collector.importers.failures import FailureClass, classify, first_line
from runner.wire import default_provenance

MIN_SHARE = 0.05          # a finding with a time is reported from 5% of the startup ...
MIN_SECONDS = 0.25        # ... and from a quarter of a second
OUTLIER_FACTOR = 3.0      # a size slower than 3x the median of the others ...
OUTLIER_MIN_S = 0.2       # ... and by at least this much
MAX_LISTED = 5            # evidence lines listed one by one before "and N more"
MIN_GAP_S = 5.0           # a stretch without any phase, capture or line, from this long ...
GAP_SHARE = 0.10          # ... and this share of the startup
GAP_NOTES = {
    "vllm-log": "vLLM does not log how long its memory profiling run, the KV cache set-up or process "
                "start-up take: the gap is one of those",
    "sglang-log": "SGLang does not log how long process start-up, distributed initialisation or memory "
                  "profiling take: the gap is one of those",
    "runner": "the runner records each phase it runs; a gap is time outside them (imports, process "
              "start, the caller's own code)",
}

LOAD_PHASES = ("load_weights", "weights", "model_load", "model_loading")
COMPILE_PHASES = ("compile", "torch_compile", "dynamo")
PHASE_LABELS = {"load_weights": "weight load", "kv_cache": "KV cache allocation", "warmup": "warm-up",
                "compile": "compile", "capture": "capture", "engine_init": "engine start-up",
                "capture_verify": "verify capture", "capture_prefill": "prefill capture"}


@dataclass
class Evidence:
    text: str
    provenance: str     # measured | log | inferred | estimated


@dataclass
class Finding:
    cause: str
    title: str
    severity: str                   # error | warning | info
    seconds: float | None           # time over the expectation (None: not a matter of time)
    evidence: list[Evidence] = field(default_factory=list)
    actions: dict[str, list[str]] = field(default_factory=dict)   # replayscope / vllm / sglang
    failure_class: str | None = None
    where: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        """``cause`` or ``cause/class``: how the evaluation set names a finding."""
        return f"{self.cause}/{self.failure_class}" if self.failure_class else self.cause

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunFacts:
    """What the diagnosis reads about one run (``facts_for_run`` gathers it from a store)."""
    run_id: str = ""
    source: str = "runner"
    backend: str = ""
    status: str = "finished"
    started_at: float | None = None
    config: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    failure: dict[str, Any] | None = None      # queries.run_summary's: ts, error, rank, phase, graph_bs
    phases: list[dict[str, Any]] = field(default_factory=list)
    captures: list[dict[str, Any]] = field(default_factory=list)
    degrades: list[dict[str, Any]] = field(default_factory=list)
    steps: int = 0
    served: dict[str, set[int]] | None = None  # stage -> captured sizes that served a step


@dataclass
class Diagnosis:
    run_id: str
    source: str
    status: str
    stand_in: bool
    timing_note: str | None
    startup_s: float | None
    capture: dict[str, Any]
    findings: list[Finding]

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["findings"] = [f.as_dict() for f in self.findings]
        return d


# -- reading the facts ---------------------------------------------------------------------

def _prov(row: dict[str, Any], source: str) -> str:
    return row.get("provenance") or default_provenance(source)


def _top(phases: Iterable[dict[str, Any]], names: Iterable[str]) -> list[dict[str, Any]]:
    names = tuple(names)
    return [p for p in phases if p.get("phase") in names]


def _capture_phase(name: str) -> bool:
    return name == "capture" or (name.startswith("capture_") and "." not in name)


def _known(values: Iterable[Any]) -> list[float]:
    return [float(v) for v in values if v is not None]


def _span(row: dict[str, Any]) -> tuple[float, float] | None:
    """(start, end) of a phase or capture from its timestamps; None without any."""
    end = row.get("ts")
    duration = row.get("duration_s")
    start = row.get("start_ts")
    if end is None and start is None:
        return None
    if start is None:
        start = float(end) - float(duration or 0.0)
    if end is None:
        end = float(start) + float(duration or 0.0)
    return float(start), float(end)


def phase_label(name: str) -> str:
    """A phase's name in words: ``compile.dynamo`` -> "compile (dynamo)"."""
    base, _, part = name.partition(".")
    label = PHASE_LABELS.get(base, base.replace("_", " "))
    return f"{label} ({part.replace('_', ' ').replace('.', ' ')})" if part else label


def _secs(value: float) -> str:
    if abs(value) >= 10:
        return f"{value:.0f} s"
    if abs(value) >= 1:
        return f"{value:.1f} s"
    if abs(value) >= 0.001:
        return f"{value * 1000:.0f} ms"
    return f"{value * 1e6:.0f} µs"


def _sizes_text(sizes: list[int], limit: int = 12) -> str:
    shown = ", ".join(str(s) for s in sizes[:limit])
    return shown + (f", … ({len(sizes)} in all)" if len(sizes) > limit else "")


def weight_bytes(facts: RunFacts) -> tuple[int | None, str | None]:
    """The model's weight bytes and where the figure came from."""
    for p in _top(facts.phases, LOAD_PHASES):
        if p.get("mem_bytes"):
            return int(p["mem_bytes"]), _prov(p, facts.source)
    for key in ("weights_mem", "weight_bytes"):
        if facts.config.get(key):
            return int(facts.config[key]), "log" if facts.source.endswith("-log") else "measured"
    return None, None


def capture_summary(facts: RunFacts) -> dict[str, Any]:
    """What is known about the capture as a whole: total time, sizes, counts, with provenance.

    The total is the engine's own capture phase (its wall time) when there is one, else the
    sum of timed per-size rows. Sizes come from the capture rows, else from the config the
    log printed; the count of graphs from the rows, else from a progress bar's total.
    """
    source = facts.source
    totals = [p for p in facts.phases if _capture_phase(p.get("phase", "")) and p.get("duration_s") is not None]
    ok = [c for c in facts.captures if c.get("status", "ok") == "ok"]
    failed = [c for c in facts.captures if c.get("status") == "failed"]
    timed = [c for c in facts.captures if c.get("duration_s") is not None]
    if totals:
        total, total_prov = sum(float(p["duration_s"]) for p in totals), _prov(totals[0], source)
    elif timed:
        total, total_prov = sum(float(c["duration_s"]) for c in timed), _prov(timed[0], source)
    else:
        total, total_prov = None, None
    sizes = sorted({int(c["graph_bs"]) for c in facts.captures})
    sizes_prov = _prov(facts.captures[0], source) if facts.captures else None
    if not sizes and facts.config.get("capture_sizes"):
        sizes = sorted({int(s) for s in facts.config["capture_sizes"]})
        sizes_prov = "log" if source.endswith("-log") else "measured"
    listed = facts.config.get("capture_count")      # the list's length, else a bar's total
    passes = facts.config.get("capture_passes") or []
    bar_total = sum(int(p.get("graphs") or 0) for p in passes)
    bar_done = sum(int(p.get("graphs_done") or 0) for p in passes)
    if facts.captures:
        count, count_prov, planned, done = len(facts.captures), sizes_prov, None, len(ok)
    elif bar_total:
        count, count_prov, planned, done = bar_done, "log", bar_total, bar_done
    elif sizes and total is not None:
        count, count_prov, planned, done = len(sizes), sizes_prov, None, None
    elif listed and total is not None:
        count, count_prov, planned, done = int(listed), "log", None, None
    else:
        count, count_prov, planned, done = 0, None, (len(sizes) or None), None
    return {"total_s": total, "total_provenance": total_prov, "sizes": sizes, "sizes_provenance": sizes_prov,
            "count": count, "count_provenance": count_prov, "planned": planned, "ok": done, "failed": len(failed)}


def startup_seconds(phases: list[dict[str, Any]], captures: list[dict[str, Any]]) -> float:
    """Wall time of the startup: first phase start to last phase end when timestamps are
    known, else the sum of the timed phases (else of the captures)."""
    spans = [s for p in phases if p.get("duration_s") is not None and (s := _span(p)) is not None]
    if spans and len(spans) == len([p for p in phases if p.get("duration_s") is not None]):
        return max(e for _, e in spans) - min(s for s, _ in spans)
    total = sum(_known(p.get("duration_s") for p in phases if "." not in p.get("phase", "")))
    return total or sum(_known(c.get("duration_s") for c in captures))


# -- 1. the outcome ------------------------------------------------------------------------

def _where(facts: RunFacts) -> tuple[dict[str, Any], str]:
    """Where the run failed and how we know: the run_end's own fields, else a failed
    capture, else the phase after the last one that completed (inferred)."""
    failure = facts.failure or {}
    where = {k: failure.get(k) for k in ("phase", "graph_bs", "rank", "ts")}
    provenance = default_provenance(facts.source)
    failed = [c for c in facts.captures if c.get("status") == "failed"]
    if where["phase"] is None and failed:
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
                where["last_bs"] = last[2]["graph_bs"]
            provenance = "inferred"
        elif last is not None:
            where["after"] = last[2]["phase"]
            provenance = "inferred"
    return where, provenance


def _where_text(where: dict[str, Any]) -> str:
    parts = []
    if where.get("phase"):
        parts.append(f"during {phase_label(where['phase'])}")
    elif where.get("after"):
        parts.append(f"after {phase_label(where['after'])}")
    if where.get("graph_bs"):
        parts.append(f"at bs {where['graph_bs']}")
    elif where.get("last_bs"):
        parts.append(f"after bs {where['last_bs']}")
    if where.get("rank"):
        parts.append(f"on {where['rank']}")
    return " ".join(parts)


def _actions(failure_class: FailureClass) -> dict[str, list[str]]:
    return {"replayscope": list(failure_class.replayscope), "vllm": list(failure_class.vllm),
            "sglang": list(failure_class.sglang)}


def _failure_findings(facts: RunFacts) -> list[Finding]:
    source = facts.source
    failed = [c for c in facts.captures if c.get("status") == "failed"]
    errors = [d for d in facts.degrades if d.get("error")]
    run_error = (facts.failure or {}).get("error") or facts.error if facts.status == "failed" else None
    if facts.status != "failed" and not failed and not errors:
        return []
    failure_class = classify(run_error, *(c.get("error") for c in failed), *(d.get("error") for d in errors))
    evidence: list[Evidence] = []
    if facts.status == "failed":
        where, where_prov = _where(facts)
        place = _where_text(where)
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
        noun = f"bs {_sizes_text(sizes)}" if sizes else "a compile or capture step"
        dropped = f"the run dropped {'them' if len(sizes) > 1 else 'it'} and went on"
        title = (f"The capture of {noun} failed; {dropped}" if failure_class.key == "unknown"
                 else f"{failure_class.title} when capturing {noun}; {dropped}")
    for c in failed:
        took = f" after {_secs(float(c['duration_s']))}" if c.get("duration_s") else ""
        rank = f" on {c['rank']}" if c.get("rank") else ""
        evidence.append(Evidence(f"capture of bs {c['graph_bs']} ({c.get('stage', 'decode')}){rank} failed{took}: "
                                 f"{first_line(c.get('error')) or 'no error text'}", _prov(c, source)))
    for d in facts.degrades:
        text = f"degraded {d.get('from')} → {d.get('to')}" + (f" (bs {d['graph_bs']})" if d.get("graph_bs") else "")
        if d.get("error") and not any(first_line(d["error"]) in e.text for e in evidence):
            text += f": {first_line(d['error'])}"
        evidence.append(Evidence(text, default_provenance(source)))
    name = "none that replayscope knows" if failure_class.key == "unknown" else failure_class.title.lower()
    evidence.append(Evidence(f"class: {name}: {failure_class.what}", "inferred"))
    if failure_class.key == "oom":
        evidence += _memory_evidence(facts)
    return [Finding(cause="failure", title=title, severity="error", seconds=None, evidence=evidence,
                    actions=_actions(failure_class), failure_class=failure_class.key, where=where)]


def _interrupted_finding(facts: RunFacts) -> list[Finding]:
    if facts.status != "interrupted":
        return []
    imported = facts.source.endswith("-log")
    during_startup = facts.steps == 0
    where, _ = _where(facts)
    place = _where_text(where)
    if imported:
        title = "The log ends before the server was ready" if during_startup else \
            "The log ends while the server was running"
    else:
        title = "The run was stopped during startup" if during_startup else \
            f"The run was stopped after {facts.steps:,} steps"
    if during_startup and place:
        title += f" ({place})"
    evidence = [Evidence("status: interrupted (no end or failure was recorded)", default_provenance(facts.source))]
    summary = capture_summary(facts)
    if summary["planned"] and summary["ok"] is not None and summary["ok"] < summary["planned"]:
        evidence.append(Evidence(f"{summary['ok']} of {summary['planned']} graphs captured before it stopped",
                                 summary["count_provenance"] or "log"))
    if facts.config.get("partial"):
        evidence.append(Evidence("the log starts mid-way", "log"))
    return [Finding(cause="interrupted", title=title, severity="warning" if during_startup else "info",
                    seconds=None, evidence=evidence,
                    actions={"replayscope": ["A run stopped with Ctrl-C or SIGTERM ends 'interrupted'; "
                                             "import the whole log to see the rest."],
                             "vllm": ["Check whether the orchestrator killed the server (a startup probe "
                                      "shorter than the startup)."],
                             "sglang": ["Check whether the orchestrator killed the server (a startup probe "
                                        "shorter than the startup)."]},
                    where=where if during_startup else None)]


# -- 2. findings against expectations ------------------------------------------------------

def _load_finding(facts: RunFacts) -> list[Finding]:
    loads = [p for p in _top(facts.phases, LOAD_PHASES) if p.get("duration_s") is not None]
    if not loads:
        return []
    actual = sum(float(p["duration_s"]) for p in loads)
    prov = _prov(loads[0], facts.source)
    size, size_prov = weight_bytes(facts)
    generated = facts.config.get("weights") == "random"
    storage = ["Put the checkpoint on local NVMe (or a RAM disk) and load it from there.",
               "Or give the orchestrator a startup probe as long as the load."]
    actions = {"replayscope": storage, "vllm": ["--load-format safetensors from local disk; "
                                                "--download-dir on local NVMe."] + storage[1:],
               "sglang": ["--load-format safetensors from local disk; --download-dir on local NVMe."] + storage[1:]}
    if size is None:
        excess = actual - ex.LOAD_SETUP_S
        return [Finding(
            cause="slow_weight_load", title=f"Weight load took {_secs(actual)}; the size of the weights is not known",
            severity="info", seconds=excess,
            evidence=[Evidence(f"weight load took {_secs(actual)}", prov),
                      Evidence("no weight size was recorded, so no bandwidth can be judged; "
                               f"set-up alone takes about {_secs(ex.LOAD_SETUP_S)}", "estimated")],
            actions=actions)]
    expected = ex.expected_load_s(size)
    excess = actual - expected
    if actual < ex.SLOW_LOAD_FACTOR * expected:
        return []
    rate = size / actual if actual > 0 else float("inf")
    at_nvme = ex.load_seconds(size)
    at_network = ex.load_seconds(size, ex.NETWORK_STORAGE_BPS)
    evidence = [Evidence(f"{ex.human_bytes(size)} of weights in {_secs(actual)} ({ex.human_rate(rate)})",
                         prov if size_prov == prov else f"{prov}")]
    if generated:
        evidence.append(Evidence("no checkpoint was read: the weights were generated at random (run config)",
                                 "measured"))
        cause, title = "load_setup", (f"Model set-up took {_secs(actual)} for {ex.human_bytes(size)} of generated "
                                      f"weights: the time is set-up, not reading")
        evidence.append(Evidence(f"set-up expected within about {_secs(ex.LOAD_SETUP_S)}", "estimated"))
        actions = {"replayscope": ["Expected on a loaded or cold machine (imports, CUDA context); "
                                   "it is not storage."], "vllm": [], "sglang": []}
    else:
        evidence.append(Evidence(
            f"expected about {_secs(expected)}: {_secs(at_nvme)} at local NVMe speed "
            f"({ex.human_rate(ex.LOCAL_NVME_BPS)}) plus about {_secs(ex.LOAD_SETUP_S)} of set-up; "
            f"{_secs(at_network)} at network-storage speed ({ex.human_rate(ex.NETWORK_STORAGE_BPS)})",
            "estimated"))
        read = facts.config.get("weights") == "checkpoint" or facts.source.endswith("-log")
        if size < ex.IO_BOUND_BYTES and not read:
            cause, title = "load_setup", (f"Weight load took {_secs(actual)} for only {ex.human_bytes(size)}: "
                                          f"the time is set-up, not reading")
        elif rate < ex.NETWORK_STORAGE_BPS:
            cause, title = "slow_weight_load", (f"Slow weight load: {ex.human_bytes(size)} at {ex.human_rate(rate)}, "
                                                f"slower than network storage")
        else:
            cause, title = "slow_weight_load", (f"Weight load at {ex.human_rate(rate)}: {_secs(excess)} longer than "
                                                f"local NVMe would take")
    return [Finding(cause=cause, title=title, severity="warning", seconds=excess, evidence=evidence,
                    actions=actions)]


def _compile_finding(facts: RunFacts, per_size_expected: float | None) -> list[Finding]:
    compile_phases = [p for p in _top(facts.phases, COMPILE_PHASES) if p.get("duration_s") is not None]
    compiled = [c for c in facts.captures if "compile" in (c.get("variant") or "")
                and c.get("duration_s") is not None and c.get("status", "ok") == "ok"]
    if not (compile_phases or compiled or facts.config.get("compile")):
        return []
    evidence: list[Evidence] = []
    if compile_phases:
        seconds = sum(float(p["duration_s"]) for p in compile_phases)
        count = len(compile_phases)
        evidence.append(Evidence(f"compile took {_secs(seconds)}" + (f" over {count} compiles" if count > 1 else ""),
                                 _prov(compile_phases[0], facts.source)))
    elif compiled:
        total = sum(float(c["duration_s"]) for c in compiled)
        baseline = per_size_expected if per_size_expected is not None else ex.CAPTURE_BASE_S
        seconds = max(0.0, total - baseline * len(compiled))
        evidence.append(Evidence(f"{len(compiled)} sizes compiled and captured in {_secs(total)}",
                                 _prov(compiled[0], facts.source)))
        evidence.append(Evidence(f"capture alone would take about {_secs(baseline)} per size", "estimated"))
    else:
        return []   # compile is on, but nothing says what it cost
    if compiled and compile_phases:
        plain = per_size_expected if per_size_expected is not None else ex.CAPTURE_BASE_S
        evidence.append(Evidence(f"{len(compiled)} sizes compiled then captured; capture alone would take about "
                                 f"{_secs(plain)} per size", "estimated"))
    return [Finding(
        cause="torch_compile", title=f"torch.compile added {_secs(seconds)} to the startup", severity="warning",
        seconds=seconds, evidence=evidence,
        actions={"replayscope": ["--backend cuda captures the graphs without compiling first.",
                                 "Keep compile for its faster steps, and accept the startup or cache it."],
                 "vllm": ["-O.mode=0 turns torch.compile off and keeps CUDA graphs (older releases: "
                          "compilation_config level 0).",
                          "Keep ~/.cache/vllm/torch_compile_cache between restarts: a cache hit skips compiling."],
                 "sglang": ["Drop --enable-torch-compile, or lower --torch-compile-max-bs so fewer sizes compile."]})]


def _per_size_rows(facts: RunFacts) -> dict[str, list[tuple[int, float]]]:
    rows: dict[str, list[tuple[int, float]]] = {}
    for c in facts.captures:
        if c.get("status", "ok") == "ok" and c.get("duration_s") is not None:
            rows.setdefault(c.get("stage", "decode"), []).append((int(c["graph_bs"]), float(c["duration_s"])))
    return rows


def _outlier_finding(facts: RunFacts, per_size_expected: float | None) -> list[Finding]:
    if facts.config.get("capture_timing") == "split_evenly":
        return []
    outliers = []
    for stage, rows in _per_size_rows(facts).items():
        if len(rows) < 3:
            continue
        found = []
        for i, (bs, d) in enumerate(rows):
            others = [x for j, (_, x) in enumerate(rows) if j != i]
            median = statistics.median(others)
            floor = max(median, per_size_expected or 0.0)
            if median > 0 and d > OUTLIER_FACTOR * median and d - floor > OUTLIER_MIN_S:
                found.append((stage, bs, d, median, floor))
        # a few sizes far above the rest, not capture times that vary all over (a busy machine)
        if len(found) <= max(2, len(rows) // 10):
            outliers += found
    if not outliers:
        return []
    prov = _prov(facts.captures[0], facts.source)
    if len(outliers) == 1:
        stage, bs, d, median, _ = outliers[0]
        title = (f"bs {bs} took {_secs(d)} to capture, {d / median:.0f}x the median of the other "
                 f"{stage} sizes ({_secs(median)})")
    else:
        title = f"{len(outliers)} sizes took far longer to capture than the others"
    worst = sorted(outliers, key=lambda o: o[4] - o[2])[:MAX_LISTED]
    evidence = [Evidence(f"{stage} bs {bs}: {_secs(d)} against a median of {_secs(m)} for the other sizes "
                         f"({d / m:.1f}x)", prov) for stage, bs, d, m, _ in worst]
    if len(outliers) > len(worst):
        evidence.append(Evidence(f"and {len(outliers) - len(worst)} more sizes like these", prov))
    if per_size_expected is not None:
        evidence.append(Evidence(f"a size of this model is expected to take about {_secs(per_size_expected)}",
                                 "estimated"))
    return [Finding(
        cause="slow_size", title=title, severity="warning", seconds=sum(d - f for *_, d, _, f in outliers),
        evidence=evidence,
        actions={"replayscope": ["Drop the slow size from --capture-sizes unless the traffic needs it "
                                 "(Advisor page).",
                                 "The first (largest) capture pays one-off allocation; a later size being "
                                 "slow points at that shape (a kernel tuned for it)."],
                 "vllm": ["Leave the size out of --cudagraph-capture-sizes."],
                 "sglang": ["Leave the size out of --cuda-graph-bs."]})]


def _slow_capture_finding(facts: RunFacts, per_size_expected: float | None, summary: dict[str, Any],
                          stand_in: bool) -> list[Finding]:
    if per_size_expected is None or stand_in:
        return []
    plain = [(bs, d) for rows in _per_size_rows(facts).values() for bs, d in rows]
    if any("compile" in (c.get("variant") or "") for c in facts.captures):
        return []
    if plain:
        per_size = statistics.median(d for _, d in plain)
        count, prov = len(plain), _prov(facts.captures[0], facts.source)
    elif summary["total_s"] and summary["count"]:
        if facts.config.get("compile") or _top(facts.phases, COMPILE_PHASES):
            return []   # the log's total includes compiling; the compile finding says so
        per_size, count, prov = summary["total_s"] / summary["count"], summary["count"], summary["total_provenance"]
    else:
        return []
    if per_size <= ex.SLOW_CAPTURE_FACTOR * per_size_expected:
        return []
    excess = (per_size - per_size_expected) * count
    size, _ = weight_bytes(facts)
    return [Finding(
        cause="slow_captures",
        title=f"Every capture was slow: {_secs(per_size)} per size, about {per_size / per_size_expected:.0f}x "
              f"what a model of {ex.human_bytes(size)} takes",
        severity="warning", seconds=excess,
        evidence=[Evidence(f"{count} captures at {_secs(per_size)} each (median)", prov),
                  Evidence(f"expected about {_secs(per_size_expected)} per size for {ex.human_bytes(size)} of weights",
                           "estimated")],
        actions={"replayscope": ["Profile one capture (--capture-sizes with one size) to see what it runs."],
                 "vllm": ["Compare with --enforce-eager's startup; LoRA (--enable-lora) and many piecewise "
                          "splits multiply the graphs per size."],
                 "sglang": ["Check --cuda-graph-backend and the attention backend; a draft model doubles "
                            "the captures."]})]


def _sizes_finding(facts: RunFacts, summary: dict[str, Any]) -> list[Finding]:
    total, count = summary["total_s"], summary["count"]
    sizes = summary["sizes"]
    if not total or not count:
        return []
    per_capture = total / count
    actions = {"replayscope": ["Capture only the sizes the traffic uses: the Advisor page (replayscope advise "
                               "RUN) picks the best K.", "Lower --max-bs, or list sizes with --capture-sizes."],
               "vllm": ["--cudagraph-capture-sizes with a short list (older releases: --cuda-graph-sizes), or "
                        "a lower --max-cudagraph-capture-size / --max-num-seqs."],
               "sglang": ["--cuda-graph-bs with the sizes you need (e.g. 1 2 4 8 16 32), or a lower "
                          "--cuda-graph-max-bs."]}
    rows = _per_size_rows(facts)
    if facts.served is not None and rows:
        unused = sorted({(stage, bs) for stage, stage_rows in rows.items() for bs, _ in stage_rows
                         if stage in facts.served and bs not in facts.served[stage]})
        if not unused:
            return []
        spent = sum(d for stage, stage_rows in rows.items() for bs, d in stage_rows if (stage, bs) in unused)
        # each unused size at most at its stage's median: a slow size's excess is the slow-size finding's
        medians = {stage: statistics.median(d for _, d in stage_rows) for stage, stage_rows in rows.items()}
        seconds = sum(min(d, medians[stage]) for stage, stage_rows in rows.items() for bs, d in stage_rows
                      if (stage, bs) in unused)
        captured = sum(len(r) for r in rows.values())
        prov = "inferred"
        evidence = [Evidence(f"{captured} sizes captured in {_secs(sum(d for r in rows.values() for _, d in r))}",
                             _prov(facts.captures[0], facts.source)),
                    Evidence(f"{len(unused)} of them never served a step: "
                             + _sizes_text([bs for _, bs in unused]), prov),
                    Evidence(f"their captures took {_secs(spent)}", _prov(facts.captures[0], facts.source))]
        if spent - seconds > 0.01:
            evidence.append(Evidence(f"counted at most at the median capture time of their stage: {_secs(seconds)} "
                                     f"(the rest is a slow size's own excess)", "inferred"))
        if facts.source == "sglang-log":
            evidence.append(Evidence("SGLang logs one decode batch in every --decode-log-interval (40 by "
                                     "default): a size can serve steps the log does not show", "log"))
        return [Finding(cause="too_many_sizes",
                        title=f"{len(unused)} of {captured} capture sizes never served a step",
                        severity="warning", seconds=seconds, evidence=evidence, actions=actions)]
    distinct = len(sizes) or count
    if distinct <= ex.MANY_SIZES:
        return []
    seconds = per_capture * (count - ex.TYPICAL_SIZES * count / distinct)
    what = f"{distinct} sizes" if sizes else f"{count} graphs (the log gives a count, not the sizes)"
    evidence = [Evidence(f"{what} captured in {_secs(total)}", summary["total_provenance"] or "log"),
                Evidence(f"{_secs(per_capture)} per capture", "inferred"),
                Evidence(f"about {ex.TYPICAL_SIZES} sizes usually cover the traffic within a few percent of "
                         f"padding; the others cost about {_secs(seconds)}", "estimated"),
                Evidence("no steps with batch sizes were recorded, so which sizes served traffic is unknown",
                         "inferred")]
    return [Finding(cause="too_many_sizes", title=f"{distinct} capture sizes took {_secs(total)}",
                    severity="warning", seconds=seconds, evidence=evidence, actions=actions)]


def _gap_finding(facts: RunFacts) -> list[Finding]:
    """Stretches of the startup that no phase, capture or line covers."""
    items: list[tuple[float, float, str, bool]] = []    # start, end, label, a point in time
    for p in facts.phases:
        span = _span(p)
        if span is not None:
            items.append((*span, phase_label(p.get("phase", "")), False))
    for c in facts.captures:
        span = _span(c)
        if span is not None:
            items.append((*span, f"the capture of bs {c['graph_bs']}", False))
    if not items:
        return []
    end_of_startup = max(e for _, e, _, _ in items)
    if facts.status == "failed" and (facts.failure or {}).get("ts") is not None:
        ts = float(facts.failure["ts"])
        items.append((ts, ts, "the failure", True))
        end_of_startup = max(end_of_startup, ts)
    if facts.started_at is not None:
        items.append((float(facts.started_at), float(facts.started_at), "the run's start", True))
    items.sort()
    startup = end_of_startup - items[0][0]
    gaps = []
    covered, last = items[0][1], items[0]
    for item in items[1:]:
        start, end = item[0], item[1]
        if start > end_of_startup:
            break
        if start - covered >= max(MIN_GAP_S, GAP_SHARE * startup):
            gaps.append((start - covered, last, item))
        if end >= covered:
            covered, last = end, item
    if not gaps:
        return []
    gaps.sort(key=lambda g: -g[0])
    seconds = sum(g for g, _, _ in gaps)

    def after(item) -> str:
        return item[2] if item[3] else f"the end of {item[2]}"

    def before(item) -> str:
        return item[2] if item[3] else f"the start of {item[2]}"

    what = "log line" if facts.source.endswith("-log") else "recorded phase"
    gap, a, b = gaps[0]
    title = f"Unaccounted: {_secs(gap)} between {a[2]} and {b[2]} that no {what} explains"
    if len(gaps) > 1:
        title += f" (and {len(gaps) - 1} more gap{'s' if len(gaps) > 2 else ''}, {_secs(seconds)} in all)"
    evidence = [Evidence(f"{_secs(g)} between {after(a)} and {before(b)}", "inferred") for g, a, b in gaps]
    evidence.append(Evidence(GAP_NOTES.get(facts.source, GAP_NOTES["runner"]), "inferred"))
    return [Finding(cause="unaccounted", title=title, severity="warning", seconds=seconds, evidence=evidence,
                    actions={"replayscope": ["The waterfall shows where the gap sits: look at what the "
                                             "process does there (imports, process start, a hook)."],
                             "vllm": ["VLLM_LOGGING_LEVEL=DEBUG logs the profiling run and the compile cache."],
                             "sglang": ["--log-level debug logs more of the start-up."]})]


def _memory_evidence(facts: RunFacts) -> list[Evidence]:
    config = facts.config
    out = []
    actual, estimate = config.get("graph_mem_bytes"), config.get("graph_mem_estimate_bytes")
    prov = "log" if facts.source.endswith("-log") else "measured"
    if estimate is not None:
        out.append(Evidence(f"graph memory estimated at {ex.human_bytes(estimate)} before capture", prov))
    if actual is not None:
        out.append(Evidence(f"graph memory after capture: {ex.human_bytes(actual)}", prov))
    if config.get("available_gpu_mem_bytes") is not None:
        out.append(Evidence(f"{ex.human_bytes(config['available_gpu_mem_bytes'])} of GPU memory free once the "
                            f"server was set up (after capture)", prov))
    if config.get("memory_cap_bytes"):
        out.append(Evidence(f"the process was capped at {ex.human_bytes(config['memory_cap_bytes'])} of GPU memory",
                            "measured"))
    return out


def _memory_finding(facts: RunFacts) -> list[Finding]:
    config = facts.config
    actual, estimate = config.get("graph_mem_bytes"), config.get("graph_mem_estimate_bytes")
    free = config.get("available_gpu_mem_bytes")
    risky_estimate = (actual is not None and estimate is not None and actual > 1.1 * estimate
                      and actual - estimate >= 128 * ex.MIB)
    risky_free = free is not None and free < ex.GIB
    if not (risky_estimate or risky_free):
        return []
    if risky_estimate:
        title = (f"Graph memory {ex.human_bytes(actual)} against {ex.human_bytes(estimate)} estimated: "
                 f"the difference came out of the headroom")
    else:
        title = f"Only {ex.human_bytes(free)} free after capture: little headroom for activations"
    return [Finding(
        cause="graph_memory", title=title, severity="warning", seconds=None, evidence=_memory_evidence(facts),
        actions={"replayscope": ["Fewer or smaller --capture-sizes shrink the pool."],
                 "vllm": ["The KV cache is sized on the estimate: lower --gpu-memory-utilization or capture "
                          "fewer sizes to keep the headroom."],
                 "sglang": ["Lower --mem-fraction-static or --cuda-graph-max-bs to keep more free memory."]})]


# -- the whole ---------------------------------------------------------------------------

def diagnose(facts: RunFacts) -> Diagnosis:
    """The post-mortem of one run: its outcome first, then findings ranked by excess seconds."""
    stand_in = facts.backend == "static"
    summary = capture_summary(facts)
    size, _ = weight_bytes(facts)
    per_size_expected = ex.expected_capture_s(size)
    startup = startup_seconds(facts.phases, facts.captures) or None
    timed = (_load_finding(facts) + _compile_finding(facts, per_size_expected)
             + _outlier_finding(facts, per_size_expected)
             + _slow_capture_finding(facts, per_size_expected, summary, stand_in)
             + _sizes_finding(facts, summary) + _gap_finding(facts))
    floor = max(MIN_SECONDS, MIN_SHARE * (startup or 0.0))
    timed = [f for f in timed if f.seconds is not None and f.seconds >= floor]
    timed.sort(key=lambda f: -f.seconds)
    outcome = _failure_findings(facts) + _interrupted_finding(facts)
    leading = [f for f in outcome if f.severity != "info"]
    trailing = [f for f in outcome if f.severity == "info"]
    memory = [] if any(f.failure_class == "oom" for f in outcome) else _memory_finding(facts)
    return Diagnosis(run_id=facts.run_id, source=facts.source, status=facts.status, stand_in=stand_in,
                     timing_note=STAND_IN_NOTE if stand_in else None, startup_s=startup, capture=summary,
                     findings=leading + timed + memory + trailing)


def served_sizes(batch_rows: list[dict[str, Any]], captures: list[dict[str, Any]]) -> dict[str, set[int]] | None:
    """Per stage, the captured sizes that served at least one step (padding replays the
    smallest captured size that fits); None when no step recorded a batch size."""
    replayed = [r for r in batch_rows if r["mode"] in ("graph", "padded")]
    if not batch_rows:
        return None
    captured: dict[str, list[int]] = {}
    for c in captures:
        if c.get("status", "ok") == "ok":
            captured.setdefault(c.get("stage", "decode"), []).append(int(c["graph_bs"]))
    served: dict[str, set[int]] = {stage: set() for stage in captured}
    for r in replayed:
        sizes = sorted(captured.get(r["stage"], []))
        size = r["raw_bs"] if r["mode"] == "graph" else next((s for s in sizes if s >= r["raw_bs"]), None)
        if size is not None and r["stage"] in served:
            served[r["stage"]].add(size)
    return served


def facts_for_run(store: Any, run_id: str) -> RunFacts | None:
    """A stored run's facts, read through the query layer; None for an unknown run."""
    from collector.models import queries

    summary = queries.run_summary(store, run_id)
    if summary is None:
        return None
    config = summary.get("config") or {}
    # one rank's figures where several ranks logged the same fact (docs/importing.md, Ranks);
    # every rank's failed captures
    every = queries.captures(store, run_id)
    headline = queries.headline_rows(every, config, "captures")
    captures = [c for c in every if c in headline or c.get("status") == "failed"]
    return RunFacts(
        run_id=run_id, source=summary["source"], backend=summary["backend"], status=summary["status"],
        started_at=summary["started_at"], config=dict(config, partial=summary.get("partial")),
        error=summary.get("error"), failure=summary.get("failure"),
        phases=queries.headline_rows(queries.phases(store, run_id), config),
        captures=captures, degrades=queries.degrades(store, run_id), steps=summary["steps"],
        served=served_sizes(queries.batch_times(store, run_id), captures))


def diagnose_run(store: Any, run_id: str) -> Diagnosis | None:
    """``diagnose`` for a stored run (what the API's /diagnosis and the Startup page show)."""
    facts = facts_for_run(store, run_id)
    return None if facts is None else diagnose(facts)


__all__ = ["Diagnosis", "Evidence", "Finding", "RunFacts", "capture_summary", "diagnose", "diagnose_run",
           "facts_for_run", "served_sizes", "startup_seconds", "weight_bytes"]
