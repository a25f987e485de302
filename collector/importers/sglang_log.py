"""SGLang server logs -> replayscope runs, line by line.

Reads what SGLang prints about startup and graphs, 0.3 to current (docs/importing.md has
the table): weight loading, the memory pool and KV cache, ``max_total_num_tokens``, each
capture section (target / draft, decode / verify / prefill; "cuda", "cpu" or "npu"
graph), every form of its progress bar (with ``bs=``, with only ``avail_mem=``, without a
description), capture failures, the startup timings line, and the per-batch
``cuda graph: True|False`` flag, with the cause of an eager batch where the log shows it.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Any

from collector.importers.failures import ENGINE_FATAL, EXCEPTION_LINE
from collector.importers.builder import RunBuilder
from collector.importers.facts import (BANNER, FATAL, LOAD, NUM, READY, Fact, clip, int_list, mem_bytes, num,
                                       rank_order, to_int)
from collector.importers.parser import Engine, parse_text as _parse
from collector.importers.bars import bars
from collector.importers.lines import LogLine

SOURCE = "sglang-log"

_MEM = NUM + r"\s*(GB|GiB|MB|MiB)"
_GRAPH = r"(?P<dev>cuda|cpu|npu|CUDA|CPU|NPU|musa|MUSA|hpu|HPU|xpu|XPU)"
_SECTION = (r"Capture (?:(?P<role>target|draft) )?(?:(?P<stage>decode|verify|prefill|extend|idle|piecewise) )?"
            + _GRAPH)
_RE = {
    "banner": re.compile(r"server_args=ServerArgs\("),
    "load_begin": re.compile(r"Load weight begin\b(?P<rest>.*)$"),
    "load_end": re.compile(r"Load weight end\b(?P<rest>.*)$"),
    "pool_end": re.compile(r"Memory pool end\.\s*avail mem=" + _MEM),
    "kv": re.compile(r"KV Cache is allocated\.(?P<rest>.*)$"),
    "token_budget": re.compile(r"max_total_num_tokens=(?P<rest>\d+.*)$"),
    "timings": re.compile(r"Engine startup timings \(s\):\s*(?P<rest>.*)$"),
    "capture_failed": re.compile(_SECTION + r" graph failed\b:?\s*(?P<error>.*)$", re.I),
    "capture_begin": re.compile(_SECTION + r" graph begin\b(?P<rest>.*)$", re.I),
    "capture_end": re.compile(_SECTION + r" graph end\b(?P<rest>.*)$", re.I),
    "capture_bs": re.compile(r"Capture " + _GRAPH + r" graph (?P<what>bs|num tokens) \[(?P<bs>[^\]]*)\]", re.I),
    "batch": re.compile(r"\b(?P<stage>Decode|Prefill) batch\b(?P<mixed>\s*\(mixed #running-req:\s*\d+\))?"
                        r"(?P<rest>.*)$"),
    "ready": re.compile(r"The server is fired up and ready to roll|Uvicorn running on|Application startup complete"),
    "fatal": ENGINE_FATAL["sglang"],
}
# What a capture bar is of: "Capturing batches (bs=8 avail_mem=12.30 GB)", "(bs=8, avail_mem=...)",
# "(avail_mem=...)" without the size, the piecewise "Capturing num tokens (num_tokens=N avail_mem=...)";
# a bar without a description is one too while a capture section is open.
_BAR_DESC = re.compile(r"Capturing [\w ]*?\((?:(?:bs|num_tokens)=(?P<bs>\d+),?\s*)?avail_mem=" + NUM +
                       r"\s*(?P<unit>GB|GiB)\)")
_KV = {
    "elapsed": re.compile(r"(?:Time )?elapsed(?:=|:\s*)" + NUM + r"\s*s\b"),
    "mem_usage": re.compile(r"mem usage=" + _MEM),
    "avail": re.compile(r"avail mem=" + _MEM),
    "backend": re.compile(r"backend=([\w.-]+)"),
    "bs": re.compile(r"\bbs=\[([^\]]*)\]"),
    "num_tokens": re.compile(r"\bnum_tokens=\[([^\]]*)\]"),
    "type": re.compile(r"\btype=([\w.]+)"),
}
# A section's stage as a capture event's: piecewise graphs serve prefill/extend batches.
_STAGES = {"decode": "decode", "verify": "verify", "prefill": "prefill", "extend": "prefill", "idle": "decode",
           "piecewise": "prefill"}


def _mem(pattern: re.Pattern, text: str) -> int | None:
    m = pattern.search(text)
    return mem_bytes(m.group(1), m.group(2)) if m else None


def classify(line: LogLine) -> list[Fact]:
    text = line.text
    if "raph" in text or "RAPH" in text:
        for kind in ("capture_failed", "capture_begin", "capture_end", "capture_bs"):
            m = _RE[kind].search(text)
            if m:
                return [Fact(line, kind, m.groupdict())]
    if "batch" in text:
        m = _RE["batch"].search(text)
        if m:
            return [Fact(line, "batch", m.groupdict())]
    if "%" in text:
        found = []
        for bar in bars(text):
            m = _BAR_DESC.search(bar.desc) if bar.desc else None
            if bar.desc is not None and m is None:
                continue                          # some other bar (a download, a checkpoint, a compile)
            found.append(Fact(line, "tqdm", {"bs": to_int(m["bs"]) if m and m["bs"] else None, "n": bar.n,
                                             "total": bar.total, "elapsed_s": bar.elapsed_s,
                                             "avail": mem_bytes(m.group(2), m["unit"]) if m else None,
                                             "named": m is not None}))
        if found:
            return found
    for kind in ("load_begin", "load_end", "pool_end", "kv", "token_budget", "timings"):
        m = _RE[kind].search(text)
        if m:
            return [Fact(line, LOAD if kind == "load_begin" else kind, m.groupdict() | {"groups": m.groups()})]
    if _RE["banner"].search(text):
        return [Fact(line, BANNER, {"text": text})]
    if _RE["ready"].search(text):
        return [Fact(line, READY)]
    m = _RE["fatal"].search(text)
    if m:
        return [Fact(line, FATAL, {"text": text, "error": m.groupdict().get("error")})]
    return []


@dataclass
class _Section:
    """One capture pass: a ``Capture ... begin`` to its ``end`` (or failure)."""
    role: str
    stage: str
    dev: str
    rank: Any
    rank_label: str | None
    backend: str | None = None
    sizes: list[int] = field(default_factory=list)
    begin_ts: float | None = None
    tqdm: list[Fact] = field(default_factory=list)
    ended: bool = False
    failed: bool = False
    error: str | None = None
    elapsed: float | None = None
    mem_usage: int | None = None
    end_avail: int | None = None
    end_ts: float | None = None
    emitted: bool = False

    @property
    def label(self) -> str:
        return f"{self.role}.{self.stage}"

    def bar_total(self) -> int | None:
        """How many sizes the section's bar counts (its N/total), if it drew one."""
        return max((f.data["total"] for f in self.tqdm), default=None)

    def bar_sizes(self) -> dict[int, int]:
        """Position -> size, from bar updates that name their size. SGLang sets the size as
        the description before it captures it and tqdm draws again after the update, so
        ``bs=X`` first shows at ``k/N`` when X is the (k+1)-th; an excerpt that starts at X's
        second drawing shows X and the next size at the same ``k``: X was the k-th."""
        first: dict[int, int] = {}
        previous = None
        for f in self.tqdm:
            bs, n = f.data.get("bs"), f.data["n"]
            if not bs or bs in first:
                continue
            if previous is not None and first[previous] == n:
                first[previous] = n - 1
            first[bs], previous = n, bs
        total = self.bar_total() or 0
        return {n: bs for bs, n in first.items() if 0 <= n < total}

    def known_sizes(self) -> list[int]:
        """The sizes of the section as the log states them: the printed list, else a bar
        seen naming every one of its sizes; [] when neither (a bar cut off in the excerpt
        shows some sizes, not which sizes there were)."""
        if self.sizes:
            return sorted(set(self.sizes))
        named, total = self.bar_sizes(), self.bar_total()
        if total and sorted(named) == list(range(total)):
            return sorted(set(named.values()))
        return []

    def largest(self) -> int | None:
        """The largest size: of the list, else the bar's first (SGLang captures largest first)."""
        known = self.known_sizes()
        return max(known) if known else self.bar_sizes().get(0)

    def planned(self) -> int | None:
        """How many sizes the section captures: the list's length, else the bar's total."""
        return len(self.known_sizes()) or self.bar_total()

    def current_bs(self) -> int | None:
        """The size the bar was on last (a bar without sizes: from its count and the list)."""
        if not self.tqdm:
            return None
        d = self.tqdm[-1].data
        if d.get("bs"):
            return int(d["bs"])
        n = d["n"]
        order = sorted(set(self.sizes), reverse=True)
        if n < len(order):
            return order[n]
        return None


def _server_args(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("model_path", "served_model_name", "device"):
        m = re.search(rf"\b{key}='([^']*)'", text)
        if m:
            out[key] = m.group(1)
    for key in ("disable_cuda_graph", "enable_torch_compile", "disable_cuda_graph_padding", "enable_dp_attention",
                "enforce_piecewise_cuda_graph", "disable_piecewise_cuda_graph"):
        m = re.search(rf"\b{key}=(True|False)", text)
        if m:
            out[key] = m.group(1) == "True"
    for key in ("torch_compile_max_bs", "cuda_graph_max_bs", "decode_log_interval", "tp_size", "dp_size",
                "pp_size", "ep_size", "max_running_requests"):
        m = re.search(rf"\b{key}=(\d+)", text)
        if m:
            out[key] = int(m.group(1))
    m = re.search(r"\bcuda_graph_bs=\[([^\]]*)\]", text)
    if m:
        out["cuda_graph_bs"] = sorted(set(int_list(m.group(1))))
    m = re.search(r"\bspeculative_algorithm='?(\w+)", text)
    if m and m.group(1) != "None":
        out["speculative_algorithm"] = m.group(1)
    return out


def _timings(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    m = re.search(r"cuda_graph=\{([^}]*)\}", text)
    if m:
        graphs = {k: v for k, v in ((k, num(v)) for k, v in re.findall(r"(\w+)=" + NUM, m.group(1)))
                  if v is not None}
        out["cuda_graph"] = graphs
        text = text[:m.start()] + text[m.end():]
    for key, value in re.findall(r"([\w()]+)=" + NUM, text):
        v = num(value)
        if v is not None:
            out[key] = v
    return out


class SglangRun(RunBuilder):
    engine = "sglang"
    source = SOURCE

    def __init__(self, run_id: str, **kw):
        super().__init__(run_id, **kw)
        self.args: dict[str, Any] = {}
        self.loads: dict[Any, list[dict[str, Any]]] = {}      # rank -> loads (target, draft)
        self.kv: dict[Any, dict[str, Any]] = {}
        self.figures: dict[str, dict[Any, tuple]] = {}
        self.timings: dict[str, Any] = {}
        self.sections: list[_Section] = []
        self.open: dict[Any, _Section] = {}                   # rank -> its open section
        self.steps_without_flag = 0
        self.step_ranks: dict[Any, tuple] = {}                # DP group -> the rank whose steps count

    def _figure(self, name: str, fact: Fact, value: Any) -> None:
        self.figures.setdefault(name, {})[fact.line.rank_label] = (rank_order(fact.line.rank), value)

    def _headline(self, name: str) -> Any:
        values = self.figures.get(name)
        return min(values.values(), key=lambda item: item[0])[1] if values else None

    # -- startup -----------------------------------------------------------------------
    def on_banner(self, fact: Fact) -> None:
        self.args.update(_server_args(fact.data["text"]))

    def on_load(self, fact: Fact) -> None:
        self.stage = "load_weights"
        self.loads.setdefault(fact.line.rank, []).append(
            {"begin_ts": fact.line.ts, "fact": fact})

    def on_load_end(self, fact: Fact) -> None:
        rest = fact.data["rest"]
        loads = self.loads.setdefault(fact.line.rank, [])
        load = loads[-1] if loads and "end" not in loads[-1] else None
        if load is None:
            load = {"begin_ts": None}
            loads.append(load)
        e = _KV["elapsed"].search(rest)
        load.update(end=True, fact=fact, elapsed=num(e.group(1)) if e else None, mem=_mem(_KV["mem_usage"], rest))
        self.stage = "kv_cache"

    def on_pool_end(self, fact: Fact) -> None:
        g = fact.data["groups"]
        self._figure("mem_pool_avail_bytes", fact, mem_bytes(g[0], g[1]))

    def on_kv(self, fact: Fact) -> None:
        rest = fact.data["rest"]
        total, found = 0, False
        for key in ("K size", "V size", "KV size"):
            m = re.search(r"\b" + re.escape(key) + r":\s*" + _MEM, rest)
            if m:
                b = mem_bytes(m.group(1), m.group(2))
                if b is not None:
                    total += b
                    found = True
        tokens = re.search(r"#tokens:\s*(\d+)", rest)
        self.kv.setdefault(fact.line.rank, {"fact": fact, "mem": total if found else None})
        if tokens and fact.line.rank_label not in self.figures.get("kv_tokens", {}):
            self._figure("kv_tokens", fact, to_int(tokens.group(1)))      # a second pool (SWA) keeps the first
        self.stage = "kv_cache"

    def on_token_budget(self, fact: Fact) -> None:
        rest = "max_total_num_tokens=" + fact.data["rest"]
        for key in ("max_total_num_tokens", "max_running_requests", "chunked_prefill_size", "max_prefill_tokens",
                    "context_len"):
            m = re.search(rf"\b{key}=(\d+)", rest)
            if m:
                self._figure(key, fact, int(m.group(1)))
        m = re.search(r"available_gpu_mem=" + _MEM, rest)
        if m:
            self._figure("available_gpu_mem_bytes", fact, mem_bytes(m.group(1), m.group(2)))

    def on_timings(self, fact: Fact) -> None:
        self.timings = _timings(fact.data["rest"])
        if "scheduler_e2e" in self.timings:
            self.phase(fact, "engine_init", self.timings["scheduler_e2e"])

    # -- capture -----------------------------------------------------------------------
    def _open(self, fact: Fact, role: str | None, stage: str | None, dev: str) -> _Section:
        section = _Section(role=(role or "target").lower(), stage=(stage or "decode").lower(), dev=dev.lower(),
                           rank=fact.line.rank, rank_label=fact.line.rank_label, begin_ts=fact.line.ts)
        self.sections.append(section)
        self.open[fact.line.rank] = section
        self.stage = "capture"
        return section

    def _section_for(self, fact: Fact, d: dict[str, Any]) -> _Section:
        section = self.open.get(fact.line.rank)
        if section is None:
            section = self._open(fact, d.get("role"), d.get("stage"), d.get("dev") or "cuda")
        return section

    def on_capture_begin(self, fact: Fact) -> None:
        d = fact.data
        previous = self.open.get(fact.line.rank)
        if previous is not None and not previous.tqdm and not previous.ended:
            self.sections.remove(previous)       # a begin with no end: the newer one stands
        section = self._open(fact, d["role"], d["stage"], d["dev"])
        rest = d["rest"]
        m = _KV["backend"].search(rest)
        section.backend = m.group(1) if m else None
        m = _KV["bs"].search(rest) or _KV["num_tokens"].search(rest)
        if m:
            section.sizes = int_list(m.group(1))

    def on_capture_bs(self, fact: Fact) -> None:
        # "num tokens" is the piecewise runner's list (prefill graphs), not the decode sizes
        piecewise = fact.data["what"].lower() == "num tokens"
        section = self.open.get(fact.line.rank)
        if section is None or (piecewise and section.stage != "piecewise"):
            section = self._open(fact, None, "piecewise" if piecewise else None, fact.data.get("dev") or "cuda")
        section.sizes = int_list(fact.data["bs"])

    def on_tqdm(self, fact: Fact) -> None:
        # SGLang draws the bar on rank 0 only, and without a rank prefix: it belongs to the
        # section the lowest rank has open
        section = self._bar_section()
        if section is None:
            if not fact.data.get("named"):
                return                              # some other bar (a download, a checkpoint)
            section = self._open(fact, None, None, "cuda")
        section.tqdm.append(fact)

    def _bar_section(self) -> _Section | None:
        open_sections = [s for s in self.open.values() if not s.ended and not s.failed]
        return min(open_sections, key=lambda s: rank_order(s.rank)) if open_sections else None

    def on_capture_end(self, fact: Fact) -> None:
        d = fact.data
        section = self._section_for(fact, d)
        rest = d["rest"]
        e = _KV["elapsed"].search(rest)
        section.ended = True
        section.elapsed = num(e.group(1)) if e else None
        section.mem_usage = _mem(_KV["mem_usage"], rest)
        section.end_avail = _mem(_KV["avail"], rest)
        section.end_ts = fact.line.ts
        self.open.pop(fact.line.rank, None)
        if not self.open:
            self.stage = "warmup"
        self.phase(fact, f"capture.{section.role}.{section.stage}", section.elapsed, section.mem_usage, hold=True)
        self._capture_total(fact)
        self._emit_captures(section)

    def _capture_total(self, fact: Fact) -> None:
        """The whole capture of this rank: the sum of its ended sections (held: another
        section may follow)."""
        mine = [s for s in self.sections if s.ended and s.rank == fact.line.rank]
        timed = [s.elapsed for s in mine if s.elapsed is not None]
        mems = [s.mem_usage for s in mine if s.mem_usage is not None]
        event = {"kind": "phase", "ts": fact.line.ts, "phase": "capture",
                 "duration_s": sum(timed) if timed else None,
                 "start_ts": None if fact.line.ts is None or not timed else fact.line.ts - sum(timed),
                 "mem_bytes": sum(mems) if mems else None, "rank": fact.line.rank_label}
        self.note_headline("capture", fact.line)
        self.hold(("capture", fact.line.rank), event)

    def on_capture_failed(self, fact: Fact) -> None:
        d = fact.data
        section = self.open.get(fact.line.rank) or self._bar_section()
        if section is None:
            section = self._open(fact, d["role"], d["stage"], d["dev"])
        # "Capture cuda graph failed: {e}": e's text, where the line has it; an empty one names no
        # cause, so the exception the traceback printed (or the scheduler's line) stays the error
        error = clip(d["error"], 4000) or None
        if not section.failed:
            section.failed = True
            section.error = error
            section.end_ts = fact.line.ts
        self.open.pop(section.rank, None)
        trace = self.trace.get(fact.line.rank)
        if trace is not None and EXCEPTION_LINE.match(fact.line.text):
            trace["error"] = True                      # the traceback's own exception line: not cut
        self.fail(fact, clip("capture failed: " + error, 4000) if error else None, phase="capture",
                  graph_bs=section.current_bs(), wrapper=False if error else None)
        self._emit_captures(section)

    def capturing_bs(self) -> int | None:
        section = self._bar_section()
        return section.current_bs() if section else None

    def on_ready(self, fact: Fact) -> None:
        self.ready = True
        self.stage = "serving"
        self._release_startup()

    def _emit_captures(self, s: _Section) -> None:
        """Per-size captures of a section. The bar names each size as it starts (largest
        first); a size's time is the bar's elapsed time when the next size starts minus when
        this one started (whole seconds), its memory the drop in ``avail_mem``. Sizes the
        section lists but the bar gives nothing for are captures of unknown length."""
        if s.emitted:
            return
        s.emitted = True
        if not s.tqdm and any(o.tqdm and o.role == s.role and o.stage == s.stage and o is not s
                              for o in self.sections):
            return                                   # the bar went to another rank's section
        stage = _STAGES.get(s.stage, "decode")
        compiled = self.args.get("enable_torch_compile") and s.role == "target" and stage == "decode"
        max_compile_bs = self.args.get("torch_compile_max_bs", 32)
        order = sorted(set(s.known_sizes()), reverse=True)   # SGLang captures the largest first
        seen: dict[int, tuple[int | None, int | None]] = {}   # bs -> (avail when it started, count done then)
        first_at: dict[int, float] = {}
        named_bar = any(f.data.get("bs") for f in s.tqdm)
        for fact in s.tqdm:
            d = fact.data
            n, el = d["n"], d["elapsed_s"]
            if el is not None:
                first_at[n] = min(first_at.get(n, el), el)
            if d.get("bs"):
                seen.setdefault(int(d["bs"]), (d.get("avail"), n))
            elif not named_bar and n < len(order):
                seen.setdefault(order[n], (d.get("avail"), n))
        # without the list, the sizes are those the bar named, and only from its first one on:
        # an excerpt that starts inside the bar shows some sizes, not which sizes there were
        sizes = order or (list(seen) if 0 in s.bar_sizes() else [])
        if not sizes:
            if seen:
                self.warnings.append(f"the {s.label} capture bar starts before this excerpt does: which sizes "
                                     f"it captured is not in the log, so no per-size captures are recorded")
            return
        position = {bs: i for i, bs in enumerate(sizes)}
        failing = s.failed or (not s.ended and self.failed())
        failed_bs = s.current_bs() if failing else None

        def done(bs: int) -> bool:
            n = seen.get(bs, (None, None))[1]
            return n is not None and n + 1 in first_at

        rows = []
        for bs in sizes:
            avail, n = seen.get(bs, (None, None))
            status, error = "ok", None
            if failing:
                if bs == failed_bs:
                    status, error = "failed", s.error or self.error_text(self.headline_failure())
                elif failed_bs is not None and position.get(failed_bs, -1) > position[bs]:
                    pass                               # captured before the one that failed
                elif not done(bs):
                    continue
            elif not s.ended and not done(bs):
                if bs in seen:
                    self.warnings.append(f"the capture of bs {bs} ({s.label}) was still running where the log ends")
                continue
            duration = first_at[n + 1] - first_at[n] if status == "ok" and done(bs) and n in first_at else None
            later = [seen[b][0] for b in sizes[position[bs] + 1:] if b in seen]
            nxt = later[0] if later else (s.end_avail if bs == sizes[-1] else None)
            delta = avail - nxt if avail is not None and nxt is not None and status == "ok" else None
            rows.append((bs, duration, delta, status, error))
        untimed = sum(1 for r in rows if r[1] is None and r[3] == "ok")
        if untimed and s.tqdm:
            self.warnings.append(f"{untimed} capture size(s) of {s.label} have no time of their own in the log: "
                                 f"their duration is not known")
        pool, pool_known = 0, True
        for bs, duration, delta, status, error in rows:
            if delta is None:
                pool_known = False
            else:
                pool += delta
            self.emit({"kind": "capture", "ts": s.end_ts, "graph_bs": bs, "stage": stage,
                       "duration_s": duration, "pool_bytes": max(0, pool) if pool_known and status == "ok" else None,
                       "pool_delta_bytes": delta, "status": status, "error": error,
                       "variant": "draft" if s.role == "draft" else ("compile" if compiled and bs <= max_compile_bs
                                                                     else None),
                       "rank": s.rank_label})
        if rows:
            self.note_headline("captures", LogLine(0, "", s.end_ts, s.rank, s.rank_label))

    # -- steps -------------------------------------------------------------------------
    def on_batch(self, fact: Fact) -> None:
        self._release_startup()
        if not self._counts_steps(fact):
            return
        rest = fact.data["rest"]
        stage = fact.data["stage"].lower()
        flag = re.search(r"\b(?:cuda|cpu|npu|\w+) graph:\s*(True|False)", rest)
        if flag is None:
            self.steps_without_flag += 1
            return
        graph = flag.group(1) == "True"
        m = re.search(r"#running-req:\s*(\d+)" if stage == "decode" else r"#new-seq:\s*(\d+)", rest)
        raw_bs = to_int(m.group(1)) if m else None
        tokens_m = re.search(r"#new-token:\s*(\d+)", rest) if stage == "prefill" else None
        tokens = to_int(tokens_m.group(1)) if tokens_m else raw_bs
        if raw_bs is None or raw_bs < 1:
            event = {"kind": "step_counts", "ts": fact.line.ts, "stage": stage, "count": 1,
                     "mode": "graph" if graph else "eager", "num_tokens": 0, "padded_tokens": 0}
            event.update({"reason": None} if graph else self._eager_cause(stage, None))
            self.emit(event)
            return
        base = {"kind": "step", "ts": fact.line.ts, "stage": stage, "duration_s": None, "raw_bs": raw_bs,
                "num_tokens": tokens or 0}
        if not graph:
            cause = self._eager_cause(stage, raw_bs)
            self.emit(dict(base, mode="eager", graph_bs=None, padded_tokens=0, reason=cause["reason"],
                           evidence=cause["evidence"]))
            return
        graph_bs = raw_bs
        sizes = self.decode_sizes() if stage == "decode" else []
        i = bisect.bisect_left(sizes, raw_bs)
        if i < len(sizes):
            graph_bs = sizes[i]
        self.emit(dict(base, mode="padded" if graph_bs > raw_bs else "graph", graph_bs=graph_bs,
                       padded_tokens=(graph_bs - raw_bs) if stage == "decode" else 0, reason=None))

    def _counts_steps(self, fact: Fact) -> bool:
        """Each data-parallel group's batches once: from the lowest rank that logs them."""
        parts = dict(fact.line.rank or ())
        group = parts.get("DP")
        order = rank_order(fact.line.rank)
        best = self.step_ranks.get(group)
        if best is None or order < best:
            self.step_ranks[group] = order
            return True
        return order == best

    def _eager_cause(self, stage: str, raw_bs: int | None) -> dict[str, Any]:
        """Why a batch ran without a graph, from what the log shows; unknown otherwise."""
        if self.args.get("disable_cuda_graph"):
            return {"reason": "graphs_disabled", "provenance": "inferred",
                    "evidence": "the server runs with disable_cuda_graph=True"}
        if stage == "prefill":
            return {"reason": "prefill", "provenance": "inferred",
                    "evidence": "a prefill batch (cuda graph: False): its variable-length input has no captured graph"}
        sizes = self.decode_sizes()
        largest = max(sizes) if sizes else self.args.get("cuda_graph_max_bs")
        source = "the largest captured size" if sizes else "cuda_graph_max_bs"
        if raw_bs is not None and largest is not None and raw_bs > largest:
            return {"reason": "batch_too_large", "provenance": "inferred",
                    "evidence": f"#running-req: {raw_bs} is above {source} ({largest})"}
        if raw_bs is not None and sizes and self.args.get("disable_cuda_graph_padding") and raw_bs not in sizes:
            return {"reason": "not_captured", "provenance": "inferred",
                    "evidence": f"padding is disabled and bs {raw_bs} is not one of the captured sizes"}
        return {"reason": "unknown", "provenance": None, "evidence": None}

    def decode_sizes(self) -> list[int]:
        """The decode sizes captured (a failed capture's do not serve steps)."""
        for s in self.sections:
            if s.role == "target" and s.stage in ("decode", "idle") and not s.failed:
                sizes = s.known_sizes()
                if sizes:
                    return sizes
        return list(self.args.get("cuda_graph_bs") or [])

    def _decode_sections(self) -> list[_Section]:
        """The target decode sections, the lowest rank's first."""
        return sorted((s for s in self.sections if s.role == "target" and s.stage in ("decode", "idle")),
                      key=lambda s: rank_order(s.rank))

    def planned_sizes(self) -> tuple[list[int], int | None, int | None]:
        """(sizes, how many, the largest) of the decode capture as the log states them,
        captured or not: the list, else a bar's total and its first size; server_args'
        ``cuda_graph_bs`` where no capture line says."""
        sections = self._decode_sections()
        for s in sections:
            if s.known_sizes():
                return s.known_sizes(), s.planned(), s.largest()
        listed = list(self.args.get("cuda_graph_bs") or [])
        if listed:
            return listed, len(listed), max(listed)
        count = next((s.planned() for s in sections if s.planned()), None)
        largest = next((s.largest() for s in sections if s.largest()), None)
        return [], count, largest

    # -- held phases -------------------------------------------------------------------
    def _release_startup(self) -> None:
        """Loads and the KV cache wait for the startup timings line (their lengths)."""
        for rank, loads in list(self.loads.items()):
            done = [l for l in loads if l.get("end")]
            for i, load in enumerate(done):
                if load.get("elapsed") is None:
                    if load.get("begin_ts") is not None and load["fact"].line.ts is not None:
                        load["elapsed"] = load["fact"].line.ts - load["begin_ts"]
                        load["provenance"] = "inferred"
                    elif len(done) == 1 and "load_weight" in self.timings:
                        load["elapsed"] = self.timings["load_weight"]
                names = ["load_weights"] if len(done) == 1 else (
                    ["load_weights.target"] + [f"load_weights.draft{'' if j == 1 else j}" for j in range(1, len(done))])
                self._load_phase(load, names[i])
            if len(done) > 1:
                times = [l["elapsed"] for l in done if l.get("elapsed") is not None]
                mems = [l["mem"] for l in done if l.get("mem") is not None]
                self._load_phase({"fact": done[-1]["fact"], "elapsed": sum(times) if len(times) == len(done) else None,
                                  "mem": sum(mems) if mems else None}, "load_weights")
            if done:
                self.loads[rank] = [l for l in loads if not l.get("end")]
        lowest = min((rank_order(r) for r in self.kv), default=None)
        for rank, kv in list(self.kv.items()):
            fact = kv["fact"]
            duration = self.timings.get("kv_cache_allocation") if rank_order(fact.line.rank) == lowest else None
            self.phase(fact, "kv_cache", duration, kv["mem"])
            del self.kv[rank]
        # a rank with one capture section has its total only, not the same figure twice
        for key in [k for k in self.held if k[0] == "phase" and k[1].startswith("capture.")]:
            rank = next((s.rank for s in self.sections if s.rank_label == key[2]), None)
            if sum(1 for s in self.sections if s.rank == rank and s.ended) <= 1:
                del self.held[key]
                self.headline.pop(key[1], None)
        self.release()

    def _load_phase(self, load: dict[str, Any], name: str) -> None:
        fact = load["fact"]
        ts = fact.line.ts
        duration = None if load.get("elapsed") is None else max(0.0, load["elapsed"])
        self.note_headline(name, fact.line)
        self.emit({"kind": "phase", "ts": ts, "phase": name, "duration_s": duration,
                   "start_ts": None if ts is None or duration is None else ts - duration,
                   "mem_bytes": load.get("mem"), "rank": fact.line.rank_label,
                   "provenance": load.get("provenance")})

    # -- the end -----------------------------------------------------------------------
    def close(self) -> None:
        for section in self.sections:
            if not section.emitted and (section.tqdm or section.sizes) and not section.ended:
                if self.failed():
                    section.error = section.error or self.error_text(self.headline_failure())
                    self._emit_captures(section)
                else:
                    where = f" on {section.rank_label}" if section.rank_label else ""
                    self.warnings.append(f"the capture of {section.label}{where} was still running where the log ends")
                    self._emit_captures(section)
        self._release_startup()
        if self.steps_without_flag:
            self.warnings.append(f"{self.steps_without_flag} batch line(s) without a 'cuda graph:' flag "
                                 f"(older SGLang): not imported as steps")
        super().close()

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
        sizes = self.decode_sizes()
        primary = min((s.rank for s in self.sections), key=rank_order, default=None)
        mine = [s for s in self.sections if s.rank == primary]
        ended = [s for s in mine if s.ended and s.mem_usage is not None]
        untimed = any(s.ended and len(s.sizes) > len({f.data.get("bs") for f in s.tqdm}) for s in mine)
        planned, count, largest = self.planned_sizes()
        config: dict[str, Any] = {
            "engine": "sglang",
            "capture_sizes": sizes or planned,
            "capture_count": count,
            "max_capture_size": largest,
            "compile": bool(self.args.get("enable_torch_compile", False)),
            "padding": not self.args.get("disable_cuda_graph_padding", False),
            "graph_mem_bytes": sum(s.mem_usage for s in ended) if ended else None,
            "capture_timing": "partial" if untimed else "progress_bar",
            "sections": [{"role": s.role, "stage": s.stage, "backend": s.backend, "sizes": s.sizes,
                          "elapsed_s": s.elapsed, "mem_usage_bytes": s.mem_usage, "rank": s.rank_label,
                          "status": "failed" if s.failed else ("ok" if s.ended else "incomplete")}
                         for s in self.sections],
        }
        # the KV cache's capacity in tokens: "KV Cache is allocated. #tokens", else max_total_num_tokens
        # (the same pool's size, printed when the scheduler starts)
        figures = dict(self.figures, kv_tokens={**(self.figures.get("max_total_num_tokens") or {}),
                                                **(self.figures.get("kv_tokens") or {})})
        for key in ("kv_tokens", "max_total_num_tokens", "max_running_requests", "chunked_prefill_size",
                    "max_prefill_tokens", "context_len", "mem_pool_avail_bytes", "available_gpu_mem_bytes"):
            ranks = figures.get(key) or {}
            value = min(ranks.values(), key=lambda item: item[0])[1] if ranks else None
            if value is not None:
                config[key] = value
            if len([label for label in ranks if label]) > 1:
                config[key + "_by_rank"] = {label: value for label, (_, value) in ranks.items() if label}
        if self.timings:
            config["startup_timings"] = self.timings
        for key in ("decode_log_interval", "cuda_graph_max_bs", "disable_cuda_graph", "disable_cuda_graph_padding",
                    "tp_size", "dp_size", "pp_size", "enable_dp_attention", "torch_compile_max_bs",
                    "speculative_algorithm"):
            if key in self.args:
                config[key] = self.args[key]
        return config


# What only SGLang prints: its stamp with ranks, server_args, its startup and batch lines and
# its source tree.
MARKERS = re.compile(
    r"server_args=ServerArgs\(|/sglang/srt/|Capture (?:cuda|CUDA|piecewise CUDA) graph (?:begin|end|bs|failed)|"
    r"Load weight (?:begin|end)\b|KV Cache is allocated\.|Memory pool end\.|(?:Decode|Prefill) batch[.,] #|"
    r"The server is fired up and ready to roll|Capturing batches \(|Scheduler hit an exception|"
    r"^\[(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d(?: (?:DP|PP|TP|EP)\d+)+\]", re.M)
ENGINE = Engine("sglang", SOURCE, "SGLang", classify, SglangRun, MARKERS)


def parse_text(text: str, *, path: str = "sglang.log", mtime: float = 0.0, digest: str | None = None):
    """Parse a log's text; never raises."""
    return _parse(ENGINE, text, path=path, mtime=mtime, digest=digest)
