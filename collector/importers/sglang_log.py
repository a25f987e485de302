"""SGLang server logs -> replayscope runs.

Reads the lines docs/importing.md lists (older and newer wording, "cuda"/"cpu"/"npu" graph,
the early-2025 end line with its fields swapped, negative mem usage): weight loading,
the KV cache, each capture section (target / draft, decode / verify / prefill), the
tqdm bar's per-size progression, capture failures, the startup timings line, and the
per-batch ``cuda graph: True|False`` flag. docs/importing.md says what becomes what.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Any

from collector.importers.common import (
    BANNER, EXCEPTION, FATAL, LOAD, NUM, RANK_POLICY, READY, assemble_runs, clip, EventList, Fact,
    ImportResult, int_list, LogLine, mem_bytes, num, safe_parse, to_int,
)

SOURCE = "sglang-log"

_MEM = NUM + r"\s*(GB|GiB|MB|MiB)"
_RE = {
    "banner": re.compile(r"server_args=ServerArgs\(|Launch(?:ing)? (?:the )?SGLang server", re.I),
    "load_begin": re.compile(r"Load weight begin\b(?P<rest>.*)$"),
    "load_end": re.compile(r"Load weight end\b(?P<rest>.*)$"),
    "kv": re.compile(r"KV Cache is allocated\.(?P<rest>.*)$"),
    "timings": re.compile(r"Engine startup timings \(s\):\s*(?P<rest>.*)$"),
    "capture_failed": re.compile(
        r"Capture (?:(?P<role>target|draft) (?P<stage>\w+) )?(?P<dev>\w+) graph failed\b:?\s*(?P<error>.*)$", re.I),
    "capture_begin": re.compile(
        r"Capture (?:(?P<role>target|draft) (?P<stage>\w+) )?(?P<dev>\w+) graph begin\b(?P<rest>.*)$", re.I),
    "capture_end": re.compile(
        r"Capture (?:(?P<role>target|draft) (?P<stage>\w+) )?(?P<dev>\w+) graph end\b(?P<rest>.*)$", re.I),
    "capture_bs": re.compile(r"Capture (?P<dev>\w+) graph bs \[(?P<bs>[^\]]*)\]", re.I),
    "tqdm": re.compile(
        r"Capturing [\w ]*?\((?:bs|num_tokens)=(?P<bs>\d+)\s+avail_mem=" + NUM + r"\s*(?P<unit>GB|GiB)\)"
        r"(?::\s*\d+%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\[(?P<elapsed>\d+(?::\d\d){1,2}))?"),
    "batch": re.compile(r"\b(?P<stage>Decode|Prefill) batch\b(?P<rest>.*)$"),
    "ready": re.compile(r"The server is fired up and ready to roll|Uvicorn running on|Application startup complete"),
    "fatal": re.compile(r"Scheduler hit an exception|Received sigquit from a child|hit an exception:|"
                        r"scheduler is dead|Child process unexpectedly failed"),
    "exception": re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)(?::\s*(?P<msg>.*))?$"),
}
_KV = {
    "elapsed": re.compile(r"(?:Time )?elapsed(?:=|:\s*)" + NUM + r"\s*s\b"),
    "mem_usage": re.compile(r"mem usage=" + _MEM),
    "avail": re.compile(r"avail mem=" + _MEM),
    "backend": re.compile(r"backend=([\w.-]+)"),
    "bs": re.compile(r"\bbs=\[([^\]]*)\]"),
    "num_tokens": re.compile(r"\bnum_tokens=\[([^\]]*)\]"),
    "type": re.compile(r"\btype=([\w.]+)"),
}
_STAGES = {"decode": "decode", "verify": "verify", "prefill": "prefill", "extend": "prefill"}


def _mem(pattern: re.Pattern, text: str) -> int | None:
    m = pattern.search(text)
    return mem_bytes(m.group(1), m.group(2)) if m else None


def _seconds(clock: str) -> float | None:
    try:
        parts = [int(p) for p in clock.split(":")]
    except ValueError:
        return None
    total = 0
    for p in parts:
        total = total * 60 + p
    return float(total)


def classify(line: LogLine) -> Fact | None:
    text = line.text
    if "graph" in text or "Graph" in text or "GRAPH" in text:
        for kind in ("capture_failed", "capture_begin", "capture_end", "capture_bs"):
            m = _RE[kind].search(text)
            if m:
                return Fact(line, kind, m.groupdict())
    if "batch" in text:
        m = _RE["batch"].search(text)
        if m:
            return Fact(line, "batch", m.groupdict())
    if "Capturing" in text:
        m = _RE["tqdm"].search(text)
        if m:
            d = m.groupdict()
            d["avail"] = mem_bytes(m.group(2), d["unit"])
            return Fact(line, "tqdm", d)
    for kind in ("load_begin", "load_end", "kv", "timings"):
        m = _RE[kind].search(text)
        if m:
            return Fact(line, LOAD if kind == "load_begin" else kind, m.groupdict())
    if _RE["banner"].search(text):
        return Fact(line, BANNER, {"text": text})
    if _RE["ready"].search(text):
        return Fact(line, READY)
    if _RE["fatal"].search(text):
        return Fact(line, FATAL, {"msg": text})
    m = _RE["exception"].match(text)
    if m:
        return Fact(line, EXCEPTION, {"msg": text})
    return None


@dataclass
class _Section:
    """One capture pass: a ``Capture ... begin`` to its ``end`` (or failure)."""
    role: str
    stage: str
    dev: str
    order: int
    backend: str | None = None
    sizes: list[int] = field(default_factory=list)
    begin_avail: int | None = None
    begin_ts: float | None = None
    tqdm: list[Fact] = field(default_factory=list)
    ended: bool = False
    failed: bool = False
    error: str | None = None
    elapsed: float | None = None
    mem_usage: int | None = None
    end_avail: int | None = None
    end_ts: float | None = None
    end_order: int = 0

    @property
    def label(self) -> str:
        return f"{self.role}.{self.stage}"


def _server_args(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("model_path", "served_model_name", "device"):
        m = re.search(rf"\b{key}='([^']*)'", text)
        if m:
            out[key] = m.group(1)
    for key in ("disable_cuda_graph", "enable_torch_compile", "disable_cuda_graph_padding"):
        m = re.search(rf"\b{key}=(True|False)", text)
        if m:
            out[key] = m.group(1) == "True"
    for key in ("torch_compile_max_bs", "cuda_graph_max_bs", "decode_log_interval", "tp_size"):
        m = re.search(rf"\b{key}=(\d+)", text)
        if m:
            out[key] = int(m.group(1))
    m = re.search(r"\bcuda_graph_bs=\[([^\]]*)\]", text)
    if m:
        out["cuda_graph_bs"] = int_list(m.group(1))
    return out


def _timings(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    m = re.search(r"cuda_graph=\{([^}]*)\}", text)
    if m:
        graphs = {k: v for k, v in ((k, num(v)) for k, v in re.findall(r"(\w+)=" + NUM, m.group(1)))
                  if v is not None}
        out["cuda_graph"] = graphs
        text = text[:m.start()] + text[m.end():]
    for key, value in re.findall(r"(\w+)=" + NUM, text):
        v = num(value)
        if v is not None:
            out[key] = v
    return out


class _Run:
    def __init__(self, facts: list[Fact], warnings: list[str]):
        self.facts = facts
        self.warnings = warnings
        self.events = EventList(warnings)
        self.args: dict[str, Any] = {}
        self.loads: list[dict[str, Any]] = []
        self.kv: list[dict[str, Any]] = []
        self.timings: dict[str, Any] = {}
        self.sections: list[_Section] = []
        self.section: _Section | None = None
        self.ready = False
        self.fatal = False
        self.error: str | None = None
        self.exception: str | None = None
        self.steps_without_flag = 0
        self.fatal_text: str | None = None
        self.timing_split = False
        self.primary = None

    # -- facts ---------------------------------------------------------------------------
    def apply(self, fact: Fact) -> None:
        getattr(self, "on_" + fact.kind, lambda f: None)(fact)

    def on_banner(self, fact: Fact) -> None:
        if "ServerArgs(" in fact.data["text"]:
            self.args.update(_server_args(fact.data["text"]))

    def on_load(self, fact: Fact) -> None:
        self.loads.append({"begin_ts": fact.line.ts, "begin_avail": _mem(_KV["avail"], fact.data["rest"]),
                           "order": fact.line.lineno})

    def on_load_end(self, fact: Fact) -> None:
        rest = fact.data["rest"]
        load = self.loads[-1] if self.loads and "end_ts" not in self.loads[-1] else None
        if load is None:
            load = {"begin_ts": None}
            self.loads.append(load)
        e = _KV["elapsed"].search(rest)
        t = _KV["type"].search(rest)
        load.update(end_ts=fact.line.ts, order=fact.line.lineno, elapsed=num(e.group(1)) if e else None,
                    mem=_mem(_KV["mem_usage"], rest), type=t.group(1) if t else None)

    def on_kv(self, fact: Fact) -> None:
        rest = fact.data["rest"]
        total = 0
        found = False
        for key in ("K size", "V size", "KV size"):
            m = re.search(r"\b" + re.escape(key) + r":\s*" + _MEM, rest)
            if m:
                b = mem_bytes(m.group(1), m.group(2))
                if b is not None:
                    total += b
                    found = True
        tokens = re.search(r"#tokens:\s*(\d+)", rest)
        self.kv.append({"mem": total if found else None, "tokens": to_int(tokens.group(1)) if tokens else None,
                        "order": fact.line.lineno, "ts": fact.line.ts})

    def on_timings(self, fact: Fact) -> None:
        self.timings = _timings(fact.data["rest"])

    def _open(self, fact: Fact, role: str | None, stage: str | None, dev: str) -> _Section:
        section = _Section(role=(role or "target").lower(), stage=(stage or "decode").lower(),
                           dev=dev.lower(), order=fact.line.lineno, begin_ts=fact.line.ts)
        self.sections.append(section)
        self.section = section
        return section

    def on_capture_begin(self, fact: Fact) -> None:
        d = fact.data
        section = self._open(fact, d["role"], d["stage"], d["dev"])
        rest = d["rest"]
        section.begin_avail = _mem(_KV["avail"], rest)
        m = _KV["backend"].search(rest)
        section.backend = m.group(1) if m else None
        m = _KV["bs"].search(rest) or _KV["num_tokens"].search(rest)
        if m:
            section.sizes = int_list(m.group(1))

    def on_capture_bs(self, fact: Fact) -> None:
        section = self.section or self._open(fact, None, None, fact.data["dev"])
        section.sizes = int_list(fact.data["bs"])

    def on_tqdm(self, fact: Fact) -> None:
        section = self.section
        if section is None or section.ended or section.failed:
            section = self._open(fact, None, None, "cuda")
        section.tqdm.append(fact)

    def on_capture_end(self, fact: Fact) -> None:
        d = fact.data
        section = self.section
        if section is None or section.ended or section.failed:
            section = self._open(fact, d["role"], d["stage"], d["dev"])
        rest = d["rest"]
        e = _KV["elapsed"].search(rest)
        section.ended = True
        section.elapsed = num(e.group(1)) if e else None
        section.mem_usage = _mem(_KV["mem_usage"], rest)
        section.end_avail = _mem(_KV["avail"], rest)
        section.end_ts = fact.line.ts
        section.end_order = fact.line.lineno
        self.section = None

    def on_capture_failed(self, fact: Fact) -> None:
        d = fact.data
        section = self.section
        if section is None or section.ended or section.failed:
            section = self._open(fact, d["role"], d["stage"], d["dev"])
        section.failed = True
        section.error = clip(d["error"], 4000) or "capture failed"
        section.end_ts = fact.line.ts
        section.end_order = fact.line.lineno
        self.fatal = True
        if self.error is None:
            self.error = clip(self._label(fact) + "capture failed: " + section.error, 4000)
        self.section = None

    def on_ready(self, fact: Fact) -> None:
        self.ready = True

    def _label(self, fact: Fact) -> str:
        """Who said it, when that is not the rank the run follows."""
        if fact.line.rank is not None and fact.line.rank != self.primary and fact.line.rank_label:
            return f"{fact.line.rank_label}: "
        return ""

    def on_fatal(self, fact: Fact) -> None:
        self.fatal = True
        self.fatal_text = fact.data["msg"]

    def on_exception(self, fact: Fact) -> None:
        if self.exception is None:
            self.exception = clip(self._label(fact) + fact.data["msg"], 4000)
        if not self.ready:
            self.fatal = True

    def on_batch(self, fact: Fact) -> None:
        rest = fact.data["rest"]
        stage = fact.data["stage"].lower()
        flag = re.search(r"\b(?:cuda|cpu|npu|\w+) graph:\s*(True|False)", rest)
        if flag is None:
            self.steps_without_flag += 1
            return
        graph = flag.group(1) == "True"
        key = r"#running-req:\s*(\d+)" if stage == "decode" else r"#new-seq:\s*(\d+)"
        m = re.search(key, rest)
        raw_bs = to_int(m.group(1)) if m else None
        tokens_m = re.search(r"#new-token:\s*(\d+)", rest) if stage == "prefill" else None
        base = {"kind": "step", "ts": fact.line.ts, "stage": stage, "duration_s": None}
        if raw_bs is None or raw_bs < 1:
            event = {"kind": "step_counts", "ts": fact.line.ts, "stage": stage, "count": 1,
                     "mode": "graph" if graph else "eager", "reason": None if graph else "unknown",
                     "num_tokens": 0, "padded_tokens": 0}
            self.events.add(fact.line.lineno, event)
            return
        tokens = to_int(tokens_m.group(1)) if tokens_m else raw_bs
        if not graph:
            event = dict(base, mode="eager", raw_bs=raw_bs, graph_bs=None, num_tokens=tokens or 0,
                         padded_tokens=0, reason="unknown")
        else:
            graph_bs = raw_bs
            sizes = self._decode_sizes() if stage == "decode" else []
            i = bisect.bisect_left(sizes, raw_bs)
            if i < len(sizes):
                graph_bs = sizes[i]
            mode = "padded" if graph_bs > raw_bs else "graph"
            padded = (graph_bs - raw_bs) if stage == "decode" else 0
            event = dict(base, mode=mode, raw_bs=raw_bs, graph_bs=graph_bs, num_tokens=tokens or 0,
                         padded_tokens=padded, reason=None)
        self.events.add(fact.line.lineno, event)

    def _decode_sizes(self) -> list[int]:
        for s in self.sections:
            if s.role == "target" and s.stage == "decode" and not s.failed:
                sizes = s.sizes or [int(f.data["bs"]) for f in s.tqdm]
                return sorted(set(sizes))
        return []

    # -- events ----------------------------------------------------------------------------
    def _phase(self, order: int, name: str, duration: float | None, mem: int | None, ts: float | None) -> None:
        duration = max(0.0, duration or 0.0)
        self.events.add(order, {"kind": "phase", "ts": ts, "phase": name, "duration_s": duration,
                                "start_ts": None if ts is None else ts - duration, "mem_bytes": mem})

    def finish_phases(self) -> None:
        loads = [l for l in self.loads if "end_ts" in l]
        for i, load in enumerate(loads):
            if load.get("elapsed") is None:
                if load.get("begin_ts") is not None and load.get("end_ts") is not None:
                    load["elapsed"] = load["end_ts"] - load["begin_ts"]
                elif len(loads) == 1 and "load_weight" in self.timings:
                    load["elapsed"] = self.timings["load_weight"]
        if len(loads) == 1:
            l = loads[0]
            self._phase(l["order"], "load_weights", l["elapsed"], l["mem"], l["end_ts"])
        elif loads:
            for i, l in enumerate(loads):
                name = "load_weights.target" if i == 0 else ("load_weights.draft" if i == 1 else f"load_weights.draft{i}")
                self._phase(l["order"], name, l["elapsed"], l["mem"], l["end_ts"])
            mems = [l["mem"] for l in loads if l["mem"] is not None]
            last = loads[-1]
            self._phase(last["order"], "load_weights", sum(l["elapsed"] or 0.0 for l in loads),
                        sum(mems) if mems else None, last["end_ts"])
        if self.kv:
            mems = [k["mem"] for k in self.kv if k["mem"] is not None]
            first = self.kv[0]
            self._phase(first["order"], "kv_cache", self.timings.get("kv_cache_allocation", 0.0),
                        sum(mems) if mems else None, first["ts"])
        ended = [s for s in self.sections if s.ended]
        if len(self.sections) > 1:
            for s in ended:
                self._phase(s.end_order, f"capture.{s.role}.{s.stage}", s.elapsed, s.mem_usage, s.end_ts)
        if ended:
            mems = [s.mem_usage for s in ended if s.mem_usage is not None]
            last = ended[-1]
            self._phase(last.end_order, "capture", sum(s.elapsed or 0.0 for s in ended),
                        sum(mems) if mems else None, last.end_ts)
        if "scheduler_e2e" in self.timings:
            fact = next(f for f in self.facts if f.kind == "timings")
            self._phase(fact.line.lineno, "engine_init", self.timings["scheduler_e2e"], None, fact.line.ts)

    def finish_captures(self) -> None:
        for section in self.sections:
            self._section_captures(section)

    def _section_captures(self, s: _Section) -> None:
        stage = _STAGES.get(s.stage, "decode")
        compiled = (self.args.get("enable_torch_compile") and s.role == "target" and stage == "decode")
        max_compile_bs = self.args.get("torch_compile_max_bs", 32)

        def variant(bs: int) -> str | None:
            if s.role == "draft":
                return "draft"
            return "compile" if compiled and bs <= max_compile_bs else None

        # first appearance of each size on the bar: (bs, avail bytes before it, count done)
        seen: dict[int, tuple[int | None, int | None, int]] = {}
        elapsed_at: dict[int, float] = {}
        last_elapsed_at: dict[int, float] = {}
        for fact in s.tqdm:
            d = fact.data
            n = to_int(d.get("n")) if d.get("n") is not None else None
            el = _seconds(d["elapsed"]) if d.get("elapsed") else None
            if n is not None and el is not None:
                elapsed_at[n] = min(elapsed_at.get(n, el), el)
                last_elapsed_at[n] = max(last_elapsed_at.get(n, el), el)
            bs = int(d["bs"])
            if bs >= 1 and bs not in seen:
                seen[bs] = (d["avail"], n, fact.line.lineno)
        order = list(seen.items())
        if not order:
            self._captures_without_bar(s, stage, variant)
            return
        rows = []
        for i, (bs, (avail, n, lineno)) in enumerate(order):
            last = i == len(order) - 1
            nxt_avail = order[i + 1][1][0] if not last else (s.end_avail if s.ended else None)
            delta = avail - nxt_avail if avail is not None and nxt_avail is not None else None
            duration = None
            if n is not None and n in elapsed_at and n + 1 in elapsed_at:
                duration = elapsed_at[n + 1] - elapsed_at[n]
            if last and s.failed:
                spent = (last_elapsed_at.get(n, 0.0) - elapsed_at.get(n, 0.0)) if n is not None else 0.0
                rows.append([bs, max(0.0, spent), None, "failed", s.error, lineno])
                continue
            if last and not s.ended and duration is None:
                self.warnings.append(f"the capture of bs {bs} ({s.label}) was still running where the log ends")
                continue
            rows.append([bs, duration, delta, "ok", None, lineno])
        unknown = [r for r in rows if r[1] is None]
        if unknown:
            known = sum(r[1] for r in rows if r[1] is not None)
            rest = max(0.0, (s.elapsed or 0.0) - known)
            for r in unknown:
                r[1] = rest / len(unknown)
            self.timing_split = True
            self.warnings.append(f"{len(unknown)} capture size(s) of {s.label} have no time of their own "
                                 f"on the progress bar: the rest of the section's time is split evenly")
        pool = 0
        pool_known = True
        for bs, duration, delta, status, error, lineno in rows:
            if delta is None:
                pool_known = False
            else:
                pool += delta
            self.events.add(lineno, {
                "kind": "capture", "ts": s.end_ts, "graph_bs": bs, "stage": stage,
                "duration_s": float(duration), "pool_bytes": max(0, pool) if pool_known and status == "ok" else None,
                "pool_delta_bytes": delta, "status": status, "error": error, "variant": variant(bs)})

    def _captures_without_bar(self, s: _Section, stage: str, variant) -> None:
        sizes = sorted(set(s.sizes), reverse=True)   # SGLang captures the largest first
        if not sizes:
            return
        if s.failed:
            self.warnings.append(f"capture of {s.label} failed, but the log does not say at which size")
            return
        if not s.ended:
            self.warnings.append(f"the capture of {s.label} was still running where the log ends")
            return
        self.timing_split = True
        self.warnings.append(f"no progress bar for {s.label} in the log (SGLang draws one on rank 0 only, not for every section): "
                             f"the section's {s.elapsed or 0.0:g} s is split evenly over {len(sizes)} sizes")
        for bs in sizes:
            self.events.add(s.end_order, {
                "kind": "capture", "ts": s.end_ts, "graph_bs": bs, "stage": stage,
                "duration_s": (s.elapsed or 0.0) / len(sizes), "pool_bytes": None,
                "pool_delta_bytes": None, "status": "ok", "error": None, "variant": variant(bs)})

    # -- the run record -------------------------------------------------------------------
    def finish(self) -> None:
        self.finish_phases()
        self.finish_captures()
        if self.steps_without_flag:
            self.warnings.append(f"{self.steps_without_flag} batch line(s) without a 'cuda graph:' flag "
                                 f"(older SGLang): not imported as steps")

    def error_for(self, status: str) -> str | None:
        error = self.error or (self.exception if status == "failed" else None)
        if status == "failed" and error is None:
            error = clip(self.fatal_text, 4000)
        return error

    def model(self) -> str | None:
        return self.args.get("served_model_name") or self.args.get("model_path")

    def backend(self) -> str:
        if self.args.get("disable_cuda_graph"):
            return "disabled"
        target = next((s for s in self.sections if s.role == "target" and s.stage == "decode"), None)
        target = target or (self.sections[0] if self.sections else None)
        if target is None:
            return "unknown"
        return target.backend or f"{target.dev}_graph"

    def device(self) -> str:
        if self.sections:
            return self.sections[0].dev
        return self.args.get("device") or "unknown"

    def config(self) -> dict[str, Any]:
        sizes = self._decode_sizes()
        ended = [s for s in self.sections if s.ended and s.mem_usage is not None]
        config: dict[str, Any] = {
            "engine": "sglang", "rank_policy": RANK_POLICY,
            "capture_sizes": sizes,
            "compile": bool(self.args.get("enable_torch_compile", False)),
            "padding": not self.args.get("disable_cuda_graph_padding", False),
            "graph_mem_bytes": sum(s.mem_usage for s in ended) if ended else None,
            "capture_timing": "split_evenly" if self.timing_split else "progress_bar",
            "sections": [{"role": s.role, "stage": s.stage, "backend": s.backend, "sizes": s.sizes,
                          "elapsed_s": s.elapsed, "mem_usage_bytes": s.mem_usage,
                          "status": "failed" if s.failed else ("ok" if s.ended else "incomplete")}
                         for s in self.sections],
        }
        if self.kv and self.kv[0]["tokens"] is not None:
            config["kv_tokens"] = self.kv[0]["tokens"]
        if self.timings:
            config["startup_timings"] = self.timings
        if "decode_log_interval" in self.args:
            config["decode_log_interval"] = self.args["decode_log_interval"]
        return config


def parse(text: str, *, path: str = "sglang.log", mtime: float = 0.0, digest: str = "0" * 64) -> ImportResult:
    result = assemble_runs(text, path=path, mtime=mtime, digest=digest, engine="sglang", source=SOURCE,
                           classify=classify, new_run=_Run,
                           progress_kinds={"load_end", "kv", "capture_begin", "capture_end", "tqdm",
                                           "capture_failed", "batch", "timings"})
    if not result.runs:
        result.warnings.append("no SGLang server start found in this log")
    return result


def parse_text(text: str, *, path: str = "sglang.log", mtime: float = 0.0, digest: str | None = None) -> ImportResult:
    """Parse a log's text; never raises."""
    return safe_parse(parse, SOURCE, text, path, mtime, digest)
