"""vLLM server logs -> replayscope runs.

Reads the lines docs/importing.md lists, in their older and newer wording: weight loading,
torch.compile (Dynamo transform, per-range / per-shape compiles, the total), the KV
cache, the capture progress bars and the capture total, engine init, failures, and the
``--cudagraph-metrics`` tables. vLLM logs no per-size capture time, so a vLLM run has a
``capture`` phase but no per-size capture events (except a failed size it can name).
"""

from __future__ import annotations

import re
from typing import Any

from collector.importers.common import (
    BANNER, EXCEPTION, FATAL, LOAD, NUM, RANK_POLICY, READY, assemble_runs, clip, EventList, Fact,
    ImportResult, int_list, LogLine, mem_bytes, num, safe_parse, to_int,
)

SOURCE = "vllm-log"

_MEM = NUM + r"\s*(GiB|GB|MiB|MB)"
_SECS = NUM + r"\s*(?:seconds|secs|sec|s)\b"
_RE: list[tuple[str, re.Pattern]] = [
    ("cg_settings", re.compile(r"\*\*CUDAGraph Config Settings:\*\*")),
    ("cg_stats", re.compile(r"\*\*CUDAGraph Stats:\*\*")),
    ("cg_mode", re.compile(r"^- Mode:\s*(?P<mode>\S+)")),
    ("cg_sizes", re.compile(r"^- Capture sizes:\s*\[(?P<sizes>[^\]]*)\]")),
    ("row", re.compile(r"^\|(?P<cells>.*)\|\s*$")),
    ("capture_progress", re.compile(
        r"Capturing CUDA graphs?(?: shapes)?\s*(?:\((?P<desc>[^)]*)\))?:\s*(?P<pct>\d+)%\|[^|]*\|\s*"
        r"(?P<n>\d+)/(?P<total>\d+)")),
    ("capture_done", re.compile(r"Graph capturing finished in " + _SECS + r"(?:,\s*took " + _MEM + ")?")),
    ("load_weights", re.compile(r"Loading weights took " + _SECS)),
    ("weights_mem", re.compile(r"Loading model weights took " + _MEM)),
    ("model_loading", re.compile(r"Model loading took " + _MEM + r"(?: memory)? and " + _SECS)),
    ("dynamo", re.compile(r"Dynamo bytecode transform time:\s*" + _SECS)),
    ("compile_graph", re.compile(r"Compiling a graph for (?P<what>.+?) (?:takes|took) " + _SECS)),
    ("compile_total", re.compile(r"torch\.compile (?:takes|took) " + _SECS + r" in total")),
    ("kv_mem", re.compile(r"Available KV cache memory:\s*" + _MEM)),
    ("kv_tokens", re.compile(r"GPU KV cache size:\s*(?P<tokens>[\d,]+) tokens")),
    ("graph_pool", re.compile(r"CUDA graph pool memory:\s*" + _MEM + r"\s*\(actual\)")),
    ("graph_estimate", re.compile(r"Estimated CUDA graph memory:\s*" + _MEM)),
    ("init_engine", re.compile(r"init engine \(profile, create kv cache, warmup model\) took " + _SECS +
                               r"(?:\s*\(compilation:\s*" + _SECS + r"\))?")),
    (LOAD, re.compile(r"Starting to load model (?P<model>\S+?)(?:\.\.\.)?$")),
    (BANNER, re.compile(r"vLLM API server version|Initializing a V1 LLM engine|Initializing an LLM engine")),
    (READY, re.compile(r"Application startup complete|Starting vLLM API server\b.*\bon http|"
                       r"Uvicorn running on")),
    (FATAL, re.compile(r"Engine core initialization failed|EngineCore failed to start|"
                       r"WorkerProc failed to start|EngineDeadError|Worker failed with error")),
    (EXCEPTION, re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)(?::\s*(?P<msg>.*))?$")),
]


def classify(line: LogLine) -> Fact | None:
    text = line.text
    for kind, pattern in _RE:
        m = pattern.search(text)
        if m:
            data = m.groupdict()
            data["groups"] = m.groups()
            data["text"] = text
            return Fact(line, kind, data)
    return None


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
    return slug.removeprefix("compile_")[:48] or "graph"


def _config_line(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    m = re.search(r"\bmodel='([^']*)'", text) or re.search(r"'model': '([^']*)'", text)
    if m:
        out["model"] = m.group(1)
    m = re.search(r"\benforce_eager=(True|False)", text) or re.search(r"'enforce_eager': (True|False)", text)
    if m:
        out["enforce_eager"] = m.group(1) == "True"
    m = re.search(r"\bdevice_config=(?:DeviceConfig\(device='?)?(\w+)", text)
    if m:
        out["device"] = m.group(1)
    m = re.search(r"['\"]cudagraph_capture_sizes['\"]:\s*\[([^\]]*)\]", text)
    if m:
        out["capture_sizes"] = int_list(m.group(1))
    m = re.search(r"CUDAGraphMode\.(\w+)", text)
    if m:
        out["cudagraph_mode"] = m.group(1)
    return out


class _Run:
    def __init__(self, facts: list[Fact], warnings: list[str]):
        self.facts = facts
        self.warnings = warnings
        self.events = EventList(warnings)
        self.meta: dict[str, Any] = {}
        self.sums: dict[str, list] = {}        # phase -> [duration, mem, order, ts]
        self.passes: list[dict[str, Any]] = []
        self.capturing = False
        self.capture_failed = False
        self.graph_pool: int | None = None
        self.graph_estimate: int | None = None
        self.kv_tokens: int | None = None
        self.ready = False
        self.fatal = False
        self.error: str | None = None
        self.exception: str | None = None
        self.fatal_text: str | None = None
        self.primary = None
        self.table: dict[str, Any] | None = None
        self.table_mode: str | None = None
        self.table_sizes: list[int] = []
        self.last_table_ts: float | None = None
        self.step_tables = 0

    def apply(self, fact: Fact) -> None:
        if fact.kind != "row":
            self.table = None if fact.kind != "cg_stats" else self.table
        getattr(self, "on_" + fact.kind, lambda f: None)(fact)

    def _add(self, fact: Fact, phase: str, duration: float | None, mem: int | None = None) -> None:
        if duration is None:
            return
        entry = self.sums.setdefault(phase, [0.0, None, 0, None])
        entry[0] += duration
        if mem is not None:
            entry[1] = (entry[1] or 0) + mem
        entry[2] = fact.line.lineno
        entry[3] = fact.line.ts if fact.line.ts is not None else entry[3]

    # -- startup ---------------------------------------------------------------------------
    def on_banner(self, fact: Fact) -> None:
        self.meta.update(_config_line(fact.data["text"]))

    def on_load(self, fact: Fact) -> None:
        self.meta.setdefault("model", fact.data["model"])

    def on_load_weights(self, fact: Fact) -> None:
        self._add(fact, "weights", num(fact.data["groups"][0]))

    def on_model_loading(self, fact: Fact) -> None:
        g = fact.data["groups"]
        self._add(fact, "model_loading", num(g[2]), mem_bytes(g[0], g[1]))

    def on_weights_mem(self, fact: Fact) -> None:
        g = fact.data["groups"]
        self.meta["weights_mem"] = mem_bytes(g[0], g[1])

    def on_dynamo(self, fact: Fact) -> None:
        self._add(fact, "compile.dynamo", num(fact.data["groups"][0]))

    def on_compile_graph(self, fact: Fact) -> None:
        self._add(fact, "compile." + _slug(fact.data["what"]), num(fact.data["groups"][1]))

    def on_compile_total(self, fact: Fact) -> None:
        self._add(fact, "compile", num(fact.data["groups"][0]))

    def on_kv_mem(self, fact: Fact) -> None:
        g = fact.data["groups"]
        self._add(fact, "kv_cache", 0.0, mem_bytes(g[0], g[1]))

    def on_kv_tokens(self, fact: Fact) -> None:
        self.kv_tokens = to_int(fact.data["tokens"])

    def on_capture_progress(self, fact: Fact) -> None:
        d = fact.data
        desc = (d["desc"] or "").strip()
        n, total = to_int(d["n"]), to_int(d["total"])
        current = self.passes[-1] if self.passes else None
        if current is None or current["desc"] != desc or current.get("done_n") == current["total"] \
                or (n is not None and current["n"] is not None and n < current["n"]):
            current = {"desc": desc, "n": n, "total": total, "order": fact.line.lineno}
            self.passes.append(current)
        current["n"] = n
        if n is not None and n == total:
            current["done_n"] = n
        self.capturing = True

    def on_capture_done(self, fact: Fact) -> None:
        g = fact.data["groups"]
        took = mem_bytes(g[1], g[2]) if g[1] is not None else None
        self._add(fact, "capture", num(g[0]), took)
        self.capturing = False

    def on_graph_pool(self, fact: Fact) -> None:
        g = fact.data["groups"]
        self.graph_pool = mem_bytes(g[0], g[1])

    def on_graph_estimate(self, fact: Fact) -> None:
        g = fact.data["groups"]
        self.graph_estimate = mem_bytes(g[0], g[1])

    def on_init_engine(self, fact: Fact) -> None:
        g = fact.data["groups"]
        self._add(fact, "engine_init", num(g[0]))
        if g[1] is not None and (num(g[1]) or 0.0) > 0:
            self.meta["init_compilation_s"] = (num(g[1]), fact)

    def on_ready(self, fact: Fact) -> None:
        self.ready = True

    def on_fatal(self, fact: Fact) -> None:
        self.fatal = True
        if self.fatal_text is None:
            self.fatal_text = self._label(fact) + fact.data["text"]

    def on_exception(self, fact: Fact) -> None:
        if not self.ready:
            self.fatal = True
        if self.exception is None:
            self.exception = clip(self._label(fact) + fact.data["text"], 4000)
        if self.capturing and not self.capture_failed:
            self.capture_failed = True
            self._failed_capture(fact, clip(fact.data["text"], 4000))

    def _label(self, fact: Fact) -> str:
        """Who said it, when that is not the rank the run follows."""
        if fact.line.rank is not None and fact.line.rank != self.primary and fact.line.rank_label:
            return f"{fact.line.rank_label}: "
        return ""

    def _failed_capture(self, fact: Fact, error: str | None) -> None:
        current = self.passes[-1] if self.passes else None
        sizes = sorted(set(self.meta.get("capture_sizes") or self.table_sizes))
        desc = (current or {}).get("desc", "")
        stage = "decode" if desc.startswith("decode") else ("prefill" if desc else "decode")
        bs = None
        if current and sizes and current["total"] and current["n"] is not None and current["total"] <= len(sizes):
            # vLLM captures largest first; a decode-only pass covers the smallest sizes
            pass_sizes = sorted(sizes[:current["total"]], reverse=True)
            if current["n"] < len(pass_sizes):
                bs = pass_sizes[current["n"]]
        if bs is None:
            self.warnings.append("a capture failed, but the log does not say at which size")
            return
        self.events.add(fact.line.lineno, {
            "kind": "capture", "ts": fact.line.ts, "graph_bs": bs, "stage": stage, "duration_s": 0.0,
            "pool_bytes": None, "pool_delta_bytes": None, "status": "failed", "error": error,
            "variant": None})

    # -- --cudagraph-metrics tables --------------------------------------------------------
    def on_cg_settings(self, fact: Fact) -> None:
        self.table_mode = None
        self.table_sizes = []

    def on_cg_mode(self, fact: Fact) -> None:
        mode = fact.data["mode"]
        self.table_mode = mode.split(".")[-1]

    def on_cg_sizes(self, fact: Fact) -> None:
        self.table_sizes = int_list(fact.data["sizes"])

    def on_cg_stats(self, fact: Fact) -> None:
        interval = None
        if fact.line.ts is not None and self.last_table_ts is not None:
            interval = max(0.0, fact.line.ts - self.last_table_ts)
        self.last_table_ts = fact.line.ts if fact.line.ts is not None else self.last_table_ts
        self.table = {"ts": fact.line.ts, "interval": interval}
        self.step_tables += 1

    def on_row(self, fact: Fact) -> None:
        if self.table is None:
            return
        cells = [c.strip() for c in fact.data["cells"].split("|")]
        if len(cells) != 5 or cells[0].startswith("Unpadded") or set(cells[0]) <= set("-: "):
            return
        unpadded, padded, paddings, count = (to_int(cells[i]) for i in (0, 1, 2, 4))
        mode = cells[3].split(".")[-1].upper()
        if None in (unpadded, padded, paddings, count) or count < 1 or min(unpadded, paddings) < 0:
            self.warnings.append(f"line {fact.line.lineno}: a CUDAGraph Stats row that does not read: skipped")
            return
        if mode == "NONE":
            wire_mode = "eager"
            if self.table_mode == "NONE" or self.meta.get("enforce_eager"):
                reason = "graphs_disabled"
            elif self.table_sizes and unpadded > max(self.table_sizes):
                reason = "batch_too_large"
            else:
                reason = "unknown"
        else:
            wire_mode, reason = ("padded" if paddings > 0 else "graph"), None
        self.events.add(fact.line.lineno, {
            "kind": "step_counts", "ts": self.table["ts"], "stage": "mixed", "mode": wire_mode,
            "reason": reason, "count": count, "num_tokens": unpadded * count,
            "padded_tokens": paddings * count, "duration_s": None, "interval_s": self.table["interval"]})

    # -- events ----------------------------------------------------------------------------
    def finish_phases(self) -> None:
        if "compile" not in self.sums and "init_compilation_s" in self.meta:
            seconds, fact = self.meta["init_compilation_s"]
            self._add(fact, "compile", seconds)
        load = self.sums.pop("model_loading", None)
        weights = self.sums.pop("weights", None)
        if load is not None:
            self.sums["load_weights"] = load
        elif weights is not None:
            if weights[1] is None:
                weights[1] = self.meta.get("weights_mem")
            self.sums["load_weights"] = weights
        for name, (duration, mem, order, ts) in self.sums.items():
            duration = max(0.0, duration)
            self.events.add(order, {"kind": "phase", "ts": ts, "phase": name, "duration_s": duration,
                                    "start_ts": None if ts is None else ts - duration, "mem_bytes": mem})
        if self.capturing and not self.capture_failed:
            if self.fatal:
                self.capture_failed = True
                self._failed_capture(self.facts[-1], clip(self.fatal_text, 4000))
            else:
                self.warnings.append("graph capture was still running where the log ends")

    def finish(self) -> None:
        self.finish_phases()

    def error_for(self, status: str) -> str | None:
        return (self.exception or clip(self.fatal_text, 4000)) if status == "failed" else None

    def model(self) -> str | None:
        return self.meta.get("model")

    def device(self) -> str | None:
        return self.meta.get("device") or ("cuda" if self.passes or "capture" in self.sums else None)

    def backend(self) -> str:
        if self.meta.get("enforce_eager"):
            return "eager"
        mode = self.meta.get("cudagraph_mode") or self.table_mode
        if mode:
            return mode.lower()
        modes = sorted({p["desc"].split(",")[-1].strip().lower() for p in self.passes if "," in p["desc"]})
        if modes:
            return "_and_".join(modes)
        return "cuda_graph" if self.passes or "capture" in self.sums else "unknown"

    def config(self) -> dict[str, Any]:
        capture = self.sums.get("capture")
        config: dict[str, Any] = {
            "engine": "vllm", "rank_policy": RANK_POLICY,
            "capture_sizes": sorted(set(self.meta.get("capture_sizes") or self.table_sizes)),
            "compile": any(name == "compile" or name.startswith("compile.") for name in self.sums),
            "graph_mem_bytes": self.graph_pool if self.graph_pool is not None else (capture[1] if capture else None),
            "graph_mem_estimate_bytes": self.graph_estimate,
            "capture_passes": [{"pass": p["desc"] or "graphs", "graphs_done": p["n"], "graphs": p["total"]}
                               for p in self.passes],
            "cudagraph_metrics_tables": self.step_tables,
        }
        if self.kv_tokens is not None:
            config["kv_tokens"] = self.kv_tokens
        if "enforce_eager" in self.meta:
            config["enforce_eager"] = self.meta["enforce_eager"]
        return config


def parse(text: str, *, path: str = "vllm.log", mtime: float = 0.0, digest: str = "0" * 64) -> ImportResult:
    progress = {"load_weights", "model_loading", "dynamo", "compile_graph", "compile_total", "kv_mem",
                "kv_tokens", "capture_progress", "capture_done", "init_engine", "cg_stats", "row"}
    result = assemble_runs(text, path=path, mtime=mtime, digest=digest, engine="vllm", source=SOURCE,
                           classify=classify, progress_kinds=progress, new_run=_Run)
    if not result.runs:
        result.warnings.append("no vLLM server start found in this log")
    return result


def parse_text(text: str, *, path: str = "vllm.log", mtime: float = 0.0, digest: str | None = None) -> ImportResult:
    """Parse a log's text; never raises."""
    return safe_parse(parse, SOURCE, text, path, mtime, digest)
