"""What a diagnosis says (``Evidence``, ``Finding``, ``Diagnosis``), and the findings of a
startup against the expectations of ``replayscope.collector.analysis.expectations``: slow weight load
or compile, capture outliers and slow captures, sizes, gaps, graph-pool memory.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from replayscope.collector.analysis import expectations as ex
from replayscope.collector.analysis.diagnosis.facts import (COMPILE_PHASES, LOAD_PHASES, RunFacts,
                                                            provenance_of, top, weight_bytes)
from replayscope.collector.analysis.diagnosis.text import sizes_text
from replayscope.collector.analysis.reasons import size_label
from replayscope.collector.analysis.diagnosis.timeline import Startup, unaccounted
from replayscope.contract import formats


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
    "trace": "replayscope trace records the program's CUDA-graph captures and torch.compile's compiles, "
             "not the rest of its start-up: a gap is the program's own work (imports, loading weights, "
             "an engine's memory profiling and KV cache set-up)",
}


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
class Diagnosis:
    run_id: str
    source: str
    status: str
    stand_in: bool
    timing_note: str | None
    startup_s: float | None
    capture: dict[str, Any]
    findings: list[Finding]
    startup_from: float | None = None           # the startup's wall time: from (unix s) ...
    ready_at: float | None = None               # ... to the ready line, where the log has one
    unaccounted: list[dict[str, Any]] = field(default_factory=list)   # timeline.Stretch.as_dict, in time order

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["findings"] = [f.as_dict() for f in self.findings]
        return d


def load_finding(facts: RunFacts) -> list[Finding]:
    loads = [p for p in top(facts.phases, LOAD_PHASES) if p.get("duration_s") is not None]
    if not loads:
        return []
    actual = sum(float(p["duration_s"]) for p in loads)
    prov = provenance_of(loads[0], facts.source)
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
            cause="slow_weight_load", title=f"Weight load took {formats.seconds(actual)}; the size of the weights is not known",
            severity="info", seconds=excess,
            evidence=[Evidence(f"weight load took {formats.seconds(actual)}", prov),
                      Evidence("no weight size was recorded, so no bandwidth can be judged; "
                               f"set-up alone takes about {formats.seconds(ex.LOAD_SETUP_S)}", "estimated")],
            actions=actions)]
    expected = ex.expected_load_s(size)
    excess = actual - expected
    if actual < ex.SLOW_LOAD_FACTOR * expected:
        return []
    rate = size / actual if actual > 0 else float("inf")
    at_nvme = ex.load_seconds(size)
    at_network = ex.load_seconds(size, ex.NETWORK_STORAGE_BPS)
    evidence = [Evidence(f"{formats.size(size)} of weights in {formats.seconds(actual)} ({formats.rate(rate)})",
                         prov if size_prov == prov else f"{prov}")]
    if generated:
        evidence.append(Evidence("no checkpoint was read: the weights were generated at random (run config)",
                                 "measured"))
        cause, title = "load_setup", (f"Model set-up took {formats.seconds(actual)} for {formats.size(size)} of generated "
                                      f"weights: the time is set-up, not reading")
        evidence.append(Evidence(f"set-up expected within about {formats.seconds(ex.LOAD_SETUP_S)}", "estimated"))
        actions = {"replayscope": ["Expected on a loaded or cold machine (imports, CUDA context); "
                                   "it is not storage."], "vllm": [], "sglang": []}
    else:
        evidence.append(Evidence(
            f"expected about {formats.seconds(expected)}: {formats.seconds(at_nvme)} at local NVMe speed "
            f"({formats.rate(ex.LOCAL_NVME_BPS)}) plus about {formats.seconds(ex.LOAD_SETUP_S)} of set-up; "
            f"{formats.seconds(at_network)} at network-storage speed ({formats.rate(ex.NETWORK_STORAGE_BPS)})",
            "estimated"))
        read = facts.config.get("weights") == "checkpoint" or facts.source.endswith("-log")
        if size < ex.IO_BOUND_BYTES and not read:
            cause, title = "load_setup", (f"Weight load took {formats.seconds(actual)} for only {formats.size(size)}: "
                                          f"the time is set-up, not reading")
        elif rate < ex.NETWORK_STORAGE_BPS:
            cause, title = "slow_weight_load", (f"Slow weight load: {formats.size(size)} at {formats.rate(rate)}, "
                                                f"slower than network storage")
        else:
            cause, title = "slow_weight_load", (f"Weight load at {formats.rate(rate)}: {formats.seconds(excess)} longer than "
                                                f"local NVMe would take")
    return [Finding(cause=cause, title=title, severity="warning", seconds=excess, evidence=evidence,
                    actions=actions)]


def compile_finding(facts: RunFacts, per_size_expected: float | None) -> list[Finding]:
    compile_phases = [p for p in top(facts.phases, COMPILE_PHASES) if p.get("duration_s") is not None]
    compiled = [c for c in facts.captures if "compile" in (c.get("variant") or "")
                and c.get("duration_s") is not None and c.get("status", "ok") == "ok"]
    if not (compile_phases or compiled or facts.config.get("compile")):
        return []
    evidence: list[Evidence] = []
    if compile_phases:
        seconds = sum(float(p["duration_s"]) for p in compile_phases)
        count = len(compile_phases)
        evidence.append(Evidence(f"compile took {formats.seconds(seconds)}" + (f" over {count} compiles" if count > 1 else ""),
                                 provenance_of(compile_phases[0], facts.source)))
    elif compiled:
        total = sum(float(c["duration_s"]) for c in compiled)
        baseline = per_size_expected if per_size_expected is not None else ex.CAPTURE_BASE_S
        seconds = max(0.0, total - baseline * len(compiled))
        evidence.append(Evidence(f"{len(compiled)} sizes compiled and captured in {formats.seconds(total)}",
                                 provenance_of(compiled[0], facts.source)))
        evidence.append(Evidence(f"capture alone would take about {formats.seconds(baseline)} per size", "estimated"))
    else:
        return []   # compile is on, but nothing says what it cost
    if compiled and compile_phases:
        plain = per_size_expected if per_size_expected is not None else ex.CAPTURE_BASE_S
        evidence.append(Evidence(f"{len(compiled)} sizes compiled then captured; capture alone would take about "
                                 f"{formats.seconds(plain)} per size", "estimated"))
    return [Finding(
        cause="torch_compile", title=f"torch.compile added {formats.seconds(seconds)} to the startup", severity="warning",
        seconds=seconds, evidence=evidence,
        actions={"replayscope": ["--backend cuda captures the graphs without compiling first.",
                                 "Keep compile for its faster steps, and accept the startup or cache it."],
                 "vllm": ["-O.mode=0 turns torch.compile off and keeps CUDA graphs (older releases: "
                          "compilation_config level 0).",
                          "Keep ~/.cache/vllm/torch_compile_cache between restarts: a cache hit skips compiling."],
                 "sglang": ["Drop --enable-torch-compile, or lower --torch-compile-max-bs so fewer sizes compile."]})]


def per_size_rows(facts: RunFacts) -> dict[str, list[tuple[int, float]]]:
    rows: dict[str, list[tuple[int, float]]] = {}
    for c in facts.captures:
        if c.get("status", "ok") == "ok" and c.get("duration_s") is not None:
            rows.setdefault(c.get("stage", "decode"), []).append((int(c["graph_bs"]), float(c["duration_s"])))
    return rows


def outlier_finding(facts: RunFacts, per_size_expected: float | None) -> list[Finding]:
    if facts.config.get("capture_timing") == "split_evenly":
        return []
    outliers = []
    for stage, rows in per_size_rows(facts).items():
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
    prov = provenance_of(facts.captures[0], facts.source)
    def size(stage: str, bs: int) -> str:
        return size_label(stage, bs, source=facts.source, config=facts.config)
    if len(outliers) == 1:
        stage, bs, d, median, _ = outliers[0]
        title = (f"{size(stage, bs)} took {formats.seconds(d)} to capture, {d / median:.0f}x the median of the "
                 f"other {stage} sizes ({formats.seconds(median)})")
    else:
        title = f"{len(outliers)} sizes took far longer to capture than the others"
    worst = sorted(outliers, key=lambda o: o[4] - o[2])[:MAX_LISTED]
    evidence = [Evidence(f"{size(stage, bs)}: {formats.seconds(d)} against a median of {formats.seconds(m)} for the other sizes "
                         f"({d / m:.1f}x)", prov) for stage, bs, d, m, _ in worst]
    if len(outliers) > len(worst):
        evidence.append(Evidence(f"and {len(outliers) - len(worst)} more sizes like these", prov))
    if per_size_expected is not None:
        evidence.append(Evidence(f"a size of this model is expected to take about {formats.seconds(per_size_expected)}",
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


def slow_capture_finding(facts: RunFacts, per_size_expected: float | None, summary: dict[str, Any],
                          stand_in: bool) -> list[Finding]:
    if per_size_expected is None or stand_in:
        return []
    plain = [(bs, d) for rows in per_size_rows(facts).values() for bs, d in rows]
    if any("compile" in (c.get("variant") or "") for c in facts.captures):
        return []
    if plain:
        per_size = statistics.median(d for _, d in plain)
        count, prov = len(plain), provenance_of(facts.captures[0], facts.source)
    elif summary["total_s"] and summary["count"]:
        if facts.config.get("compile") or top(facts.phases, COMPILE_PHASES):
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
        title=f"Every capture was slow: {formats.seconds(per_size)} per size, about {per_size / per_size_expected:.0f}x "
              f"what a model of {formats.size(size)} takes",
        severity="warning", seconds=excess,
        evidence=[Evidence(f"{count} captures at {formats.seconds(per_size)} each (median)", prov),
                  Evidence(f"expected about {formats.seconds(per_size_expected)} per size for {formats.size(size)} of weights",
                           "estimated")],
        actions={"replayscope": ["Profile one capture (--capture-sizes with one size) to see what it runs."],
                 "vllm": ["Compare with --enforce-eager's startup; LoRA (--enable-lora) and many piecewise "
                          "splits multiply the graphs per size."],
                 "sglang": ["Check --cuda-graph-backend and the attention backend; a draft model doubles "
                            "the captures."]})]


def sizes_finding(facts: RunFacts, summary: dict[str, Any]) -> list[Finding]:
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
    rows = per_size_rows(facts)
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
        evidence = [Evidence(f"{captured} sizes captured in {formats.seconds(sum(d for r in rows.values() for _, d in r))}",
                             provenance_of(facts.captures[0], facts.source)),
                    Evidence(f"{len(unused)} of them never served a step: "
                             + sizes_text([bs for _, bs in unused]), prov),
                    Evidence(f"their captures took {formats.seconds(spent)}", provenance_of(facts.captures[0], facts.source))]
        if spent - seconds > 0.01:
            evidence.append(Evidence(f"counted at most at the median capture time of their stage: {formats.seconds(seconds)} "
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
    evidence = [Evidence(f"{what} captured in {formats.seconds(total)}", summary["total_provenance"] or "log"),
                Evidence(f"{formats.seconds(per_capture)} per capture", "inferred"),
                Evidence(f"about {ex.TYPICAL_SIZES} sizes usually cover the traffic within a few percent of "
                         f"padding; the others cost about {formats.seconds(seconds)}", "estimated"),
                served_evidence(facts, sizes)]
    return [Finding(cause="too_many_sizes", title=f"{distinct} capture sizes took {formats.seconds(total)}",
                    severity="warning", seconds=seconds, evidence=evidence, actions=actions)]


def served_evidence(facts: RunFacts, sizes: list[int]) -> Evidence:
    """Which of the captured sizes served steps, as far as the steps say (never "unknown"
    when the run recorded steps with batch sizes)."""
    if facts.served is None:
        return Evidence("no steps with batch sizes were recorded, so which sizes served traffic is unknown",
                        "inferred")
    used = sorted(set().union(*facts.served.values())) if facts.served else []
    if not sizes:
        return Evidence(f"the steps used {len(used)} graph sizes: {sizes_text(used)}" if used else
                        "no step replayed a graph", "inferred")
    text = (f"the steps used {len(used)} of the {len(sizes)} sizes: {sizes_text(used)}" if used
            else f"no step replayed any of the {len(sizes)} sizes")
    if facts.source == "sglang-log":
        text += " (SGLang logs one decode batch in every --decode-log-interval: a size can serve steps the log does not show)"
    return Evidence(text, "inferred")


def gap_finding(facts: RunFacts, startup: Startup | None) -> list[Finding]:
    """Stretches of the startup that no phase, capture or line covers, from ``MIN_GAP_S`` and
    ``GAP_SHARE`` of the startup (the waterfall draws every one of ``timeline.unaccounted``)."""
    if startup is None:
        return []
    gaps = [g for g in unaccounted(startup) if g.seconds >= max(MIN_GAP_S, GAP_SHARE * startup.seconds)]
    if not gaps:
        return []
    gaps.sort(key=lambda g: -g.seconds)
    seconds = sum(g.seconds for g in gaps)
    what = "log line" if facts.source.endswith("-log") else "recorded phase"
    gap = gaps[0]
    title = (f"Unaccounted: {formats.seconds(gap.seconds)} between {gap.after.label} and {gap.before.label} "
             f"that no {what} explains")
    if len(gaps) > 1:
        title += f" (and {len(gaps) - 1} more gap{'s' if len(gaps) > 2 else ''}, {formats.seconds(seconds)} in all)"
    evidence = [Evidence(f"{formats.seconds(g.seconds)} between {g.after.after()} and {g.before.before()}", "inferred")
                for g in gaps]
    evidence.append(Evidence(GAP_NOTES.get(facts.source, GAP_NOTES["runner"]), "inferred"))
    ours = ["The waterfall draws the gap (\"unaccounted\") where it sits: look at what the process does there "
            "(imports, process start, a hook)."]
    if facts.source == "trace":
        ours.append("REPLAYSCOPE_TRACE_TIMINGS=1 in the traced command's environment: each process writes what "
                    "the tracer's own start and each module's hooks took, with the time, to line up with its log.")
    return [Finding(cause="unaccounted", title=title, severity="warning", seconds=seconds, evidence=evidence,
                    actions={"replayscope": ours,
                             "vllm": ["VLLM_LOGGING_LEVEL=DEBUG logs the profiling run and the compile cache."],
                             "sglang": ["--log-level debug logs more of the start-up."]})]


def memory_evidence(facts: RunFacts) -> list[Evidence]:
    config = facts.config
    out = []
    actual, estimate = config.get("graph_mem_bytes"), config.get("graph_mem_estimate_bytes")
    prov = "log" if facts.source.endswith("-log") else "measured"
    if estimate is not None:
        out.append(Evidence(f"graph memory estimated at {formats.size(estimate)} before capture", prov))
    if actual is not None:
        out.append(Evidence(f"graph memory after capture: {formats.size(actual)}", prov))
    if config.get("available_gpu_mem_bytes") is not None:
        out.append(Evidence(f"{formats.size(config['available_gpu_mem_bytes'])} of GPU memory free once the "
                            f"server was set up (after capture)", prov))
    if config.get("memory_cap_bytes"):
        out.append(Evidence(f"the process was capped at {formats.size(config['memory_cap_bytes'])} of GPU memory",
                            "measured"))
    return out


def memory_finding(facts: RunFacts) -> list[Finding]:
    config = facts.config
    actual, estimate = config.get("graph_mem_bytes"), config.get("graph_mem_estimate_bytes")
    free = config.get("available_gpu_mem_bytes")
    risky_estimate = (actual is not None and estimate is not None and actual > 1.1 * estimate
                      and actual - estimate >= 128 * ex.MIB)
    risky_free = free is not None and free < ex.GIB
    if not (risky_estimate or risky_free):
        return []
    if risky_estimate:
        title = (f"Graph memory {formats.size(actual)} against {formats.size(estimate)} estimated: "
                 f"the difference came out of the headroom")
    else:
        title = f"Only {formats.size(free)} free after capture: little headroom for activations"
    return [Finding(
        cause="graph_memory", title=title, severity="warning", seconds=None, evidence=memory_evidence(facts),
        actions={"replayscope": ["Fewer or smaller --capture-sizes shrink the pool."],
                 "vllm": ["The KV cache is sized on the estimate: lower --gpu-memory-utilization or capture "
                          "fewer sizes to keep the headroom."],
                 "sglang": ["Lower --mem-fraction-static or --cuda-graph-max-bs to keep more free memory."]})]
