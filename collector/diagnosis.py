"""Why a startup was slow: ranked causes with their evidence and what to do about each.

The causes are the seeds' list (SGLang §8 and its self-check "capture stuck at 90 s";
vLLM §3 and §4.6): too many capture sizes, torch.compile on, a very large model / slow
weight load, outlier sizes (one size far slower than the rest), and failures (failed
captures, OOM, degradation steps). Only phases and captures are needed, so imported
vLLM/SGLang runs are diagnosed too. Failures rank first; the rest by the seconds they
account for.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

# A cause is reported only when it accounts for at least this much of the startup ...
MIN_SHARE = 0.05
# ... or is a failure. A size is an outlier when it took this many times the median.
OUTLIER_FACTOR = 3.0
# More sizes than this is "many" (the seeds' default list has 9; vLLM #20098 had 67).
MANY_SIZES = 12
# A weight load slower than this (bytes/s) suggests slow storage rather than a big model.
SLOW_LOAD_BPS = 1.0e9


@dataclass
class Finding:
    cause: str
    title: str
    seconds: float                 # startup time this cause accounts for
    severity: str                  # "error" | "warning" | "info"
    evidence: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    vllm: list[str] = field(default_factory=list)
    sglang: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _phase_start(row: dict[str, Any]) -> float | None:
    if row.get("start_ts") is not None:
        return float(row["start_ts"])
    if row.get("ts") is not None:
        return float(row["ts"]) - float(row.get("duration_s") or 0.0)
    return None


def startup_seconds(phases: list[dict[str, Any]], captures: list[dict[str, Any]]) -> float:
    """Wall time of the startup: first phase start to last phase end when timestamps are
    known, else the sum of the phases (else of the captures)."""
    spans = [(s, s + float(p["duration_s"])) for p in phases if (s := _phase_start(p)) is not None]
    if spans and len(spans) == len(phases):
        return max(e for _, e in spans) - min(s for s, _ in spans)
    total = sum(float(p["duration_s"]) for p in phases)
    return total or sum(float(c["duration_s"]) for c in captures)


def _phase_total(phases: list[dict[str, Any]], *names: str) -> float:
    return sum(float(p["duration_s"]) for p in phases if p.get("phase") in names)


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def diagnose(phases: list[dict[str, Any]], captures: list[dict[str, Any]],
             degrades: list[dict[str, Any]] | None = None, *,
             config: dict[str, Any] | None = None,
             used_sizes: Iterable[int] | None = None) -> list[Finding]:
    """Ranked causes of a slow startup. ``used_sizes``: batch sizes graphs actually
    served (from the step histogram), when known, to name captured-but-unused sizes."""
    degrades = degrades or []
    config = config or {}
    # Unknown lengths (null durations) are not zero: they take no part in the sums below.
    phases = [p for p in phases if p.get("duration_s") is not None]
    captures = [c for c in captures if c.get("duration_s") is not None]
    total = startup_seconds(phases, captures)
    findings: list[Finding] = []
    ok = [c for c in captures if c.get("status", "ok") == "ok"]
    failed = [c for c in captures if c.get("status") == "failed"]
    capture_s = sum(float(c["duration_s"]) for c in captures)

    # failures / OOM
    if failed or degrades:
        evidence = []
        for c in failed:
            error = (c.get("error") or "no error text").strip().splitlines()[0][:200]
            evidence.append(f"capture of bs {c['graph_bs']} ({c.get('stage', 'decode')}) failed "
                            f"after {float(c['duration_s']):.2f} s: {error}")
        for d in degrades:
            error = (d.get("error") or "").strip().splitlines()[0][:200] if d.get("error") else ""
            evidence.append(f"degraded {d.get('from')} -> {d.get('to')}"
                            + (f" (bs {d['graph_bs']})" if d.get("graph_bs") else "")
                            + (f": {error}" if error else ""))
        text = " ".join(str(c.get("error") or "") for c in failed) + " ".join(
            str(d.get("error") or "") for d in degrades)
        oom = "out of memory" in text.lower() or "oom" in text.lower().split()
        findings.append(Finding(
            cause="oom" if oom else "failures",
            title="Out of memory during capture" if oom else "Captures failed / the run degraded",
            seconds=sum(float(c["duration_s"]) for c in failed),
            severity="error", evidence=evidence,
            actions=[
                "Fewer or smaller capture sizes (--capture-sizes, lower --max-bs) need less pool memory.",
                "An error naming inductor/dynamo is compile: try --backend cuda instead of compile.",
                "--backend disabled confirms whether graphs are the cause at all.",
            ] if not oom else [
                "Capture fewer / smaller sizes: the shared pool grows with the largest graph.",
                "Leave more memory outside the KV cache for the graph pool.",
            ],
            vllm=["--enforce-eager first, to confirm it is a graph problem (seed 004 §4.6)",
                  "shrink --cudagraph-capture-sizes; lower --gpu-memory-utilization on OOM",
                  "compile errors: compilation_config level 0 keeps graphs without compile"],
            sglang=["lower --cuda-graph-max-bs or --mem-fraction-static on OOM",
                    "--disable-cuda-graph while debugging"],
        ))

    # too many capture sizes
    sizes = sorted({int(c["graph_bs"]) for c in captures})
    if sizes and capture_s > 0:
        used = set(used_sizes) if used_sizes is not None else None
        evidence = [f"{len(sizes)} sizes captured in {capture_s:.2f} s "
                    f"({capture_s / len(captures):.2f} s per capture)"]
        if used is not None:
            unused = [s for s in sizes if s not in used]
            seconds = sum(float(c["duration_s"]) for c in captures if int(c["graph_bs"]) in unused)
            if unused:
                evidence.append(f"{len(unused)} of them never served a step: "
                                + ", ".join(str(s) for s in unused[:20])
                                + (" ..." if len(unused) > 20 else ""))
        else:
            keep = min(len(sizes), 4)
            seconds = capture_s * (len(sizes) - keep) / len(sizes) if len(sizes) > MANY_SIZES else 0.0
        if len(sizes) > MANY_SIZES or (used is not None and seconds > 0):
            findings.append(Finding(
                cause="too_many_sizes", title="Too many capture sizes",
                seconds=seconds, severity="warning", evidence=evidence,
                actions=["Capture only the sizes the traffic uses: see the Advisor page "
                         "(replayscope advise RUN) for a budget of K sizes.",
                         "Lower --max-bs, or list sizes with --capture-sizes."],
                vllm=["--cudagraph-capture-sizes with a short list",
                      "or a lower max_cudagraph_capture_size / --max-num-seqs"],
                sglang=["--cuda-graph-bs 1 32 128 (fewer sizes, seed §9)",
                        "--cuda-graph-max-bs 128 lowers the ceiling"],
            ))

    # torch.compile on
    compile_s = _phase_total(phases, "compile", "torch_compile", "dynamo")
    compiled = [c for c in captures if (c.get("variant") or "") == "compile"]
    compile_on = bool(config.get("compile")) or compile_s > 0 or bool(compiled)
    if compile_on:
        seconds = compile_s
        evidence = []
        if compile_s:
            evidence.append(f"compile phase took {compile_s:.2f} s")
        if compiled:
            plain = [float(c["duration_s"]) for c in ok if (c.get("variant") or "") != "compile"]
            evidence.append(f"{len(compiled)} captures were compile-then-capture "
                            f"({sum(float(c['duration_s']) for c in compiled):.2f} s)")
            if not compile_s:
                seconds = sum(float(c["duration_s"]) for c in compiled) - (
                    statistics.median(plain) * len(compiled) if plain else 0.0)
        if not evidence:
            evidence.append("the run's config has compile on")
        findings.append(Finding(
            cause="torch_compile", title="torch.compile is on",
            seconds=max(0.0, seconds), severity="warning", evidence=evidence,
            actions=["--backend cuda captures graphs without compiling first.",
                     "Keep compile for throughput but cache it between restarts."],
            vllm=["compilation_config={\"level\": 0} turns compile off and keeps graphs",
                  "VLLM_TORCH_COMPILE_CACHE_DIR reuses compiled artefacts across restarts"],
            sglang=["drop --enable-torch-compile, or bound it with --torch-compile-max-bs"],
        ))

    # very large model / slow weight load
    load = [p for p in phases if p.get("phase") in ("load_weights", "weights", "model_load")]
    load_s = sum(float(p["duration_s"]) for p in load)
    if load_s > 0:
        evidence = [f"weight load took {load_s:.2f} s"]
        mem = sum(int(p["mem_bytes"]) for p in load if p.get("mem_bytes"))
        slow_storage = False
        if mem:
            rate = mem / load_s
            size = _gib(mem) if mem >= 2**30 else f"{mem / 2**20:.1f} MiB"
            evidence.append(f"{size} of weights at {rate / 2**20:.1f} MiB/s")
            # a rate says something about storage only for a load big enough to be I/O-bound
            slow_storage = rate < SLOW_LOAD_BPS and mem >= 2**30
        per_capture = capture_s / len(captures) if captures else 0.0
        if per_capture > 2.0:
            evidence.append(f"each capture took {per_capture:.2f} s on average: a large model "
                            f"makes every size slow (seed: 70B+ takes ~10 s per size)")
        findings.append(Finding(
            cause="large_model", title="Slow weight load" if slow_storage else "A very large model",
            seconds=load_s, severity="info", evidence=evidence,
            actions=["Put the checkpoint on local NVMe or a ramdisk (seed §8).",
                     "With a large model, fewer capture sizes matter most: each one costs seconds.",
                     "Or accept it and give the orchestrator a startup probe long enough."],
            vllm=["--load-format safetensors from local disk; fewer --cudagraph-capture-sizes"],
            sglang=["--cuda-graph-bs with fewer sizes (seed §9: 1 32 128 for huge models)"],
        ))

    # outlier sizes
    durations = [(int(c["graph_bs"]), float(c["duration_s"])) for c in ok]
    if len(durations) >= 3:
        outliers = []
        for bs, d in durations:
            others = [x for b, x in durations if b != bs]
            median = statistics.median(others)
            if median > 0 and d > OUTLIER_FACTOR * median and d - median > 0.01:
                outliers.append((bs, d, median))
        if outliers:
            findings.append(Finding(
                cause="outlier_sizes", title="Some sizes took far longer to capture",
                seconds=sum(d - m for _, d, m in outliers), severity="warning",
                evidence=[f"bs {bs}: {d:.2f} s against a median of {m:.2f} s for the others "
                          f"({d / m:.1f}x)" for bs, d, m in outliers],
                actions=["Drop or replace the slow size unless the traffic needs it "
                         "(Advisor page).",
                         "A first capture pays one-off warm-up/autotune; a later one being slow "
                         "points at that shape (e.g. a kernel autotuned for it)."],
                vllm=["leave the size out of --cudagraph-capture-sizes"],
                sglang=["leave the size out of --cuda-graph-bs"],
            ))

    reported = [f for f in findings
                if f.severity == "error" or (total > 0 and f.seconds / total >= MIN_SHARE)]
    reported.sort(key=lambda f: (f.severity != "error", -f.seconds))
    return reported


def diagnose_run(store: Any, run_id: str) -> list[Finding]:
    """``diagnose`` for a stored run, read through the query layer."""
    from collector import queries

    summary = queries.run_summary(store, run_id) or {}
    captures = queries.captures(store, run_id)
    captured = sorted({int(c["graph_bs"]) for c in captures if c.get("status", "ok") == "ok"})
    used: set[int] = set()
    for row in queries.batch_histogram(store, run_id):
        if row.get("mode") in ("graph", "padded") and row.get("raw_bs") is not None:
            # padding replays the smallest captured size that fits
            size = next((s for s in captured if s >= row["raw_bs"]), None)
            if size is not None:
                used.add(size)
    return diagnose(queries.phases(store, run_id), captures, queries.degrades(store, run_id),
                    config=summary.get("config") or {},
                    used_sizes=used if summary.get("steps") and used else None)
