"""SGLang server logs -> replayscope runs, line by line.

Reads what SGLang prints about startup and graphs, 0.3 to current (docs/importing.md has
the table): weight loading, the memory pool and KV cache, ``max_total_num_tokens``, each
capture section (target / draft, decode / verify / prefill; "cuda", "cpu" or "npu"
graph), every form of its progress bar (with ``bs=``, with only ``avail_mem=``, without a
description), capture failures, the startup timings line, and the per-batch
``cuda graph: True|False`` flag, with the cause of an eager batch where the log shows it.
An offline ``sglang.Engine`` (no HTTP server line anywhere, batches after its start-up) is
ready at "Engine startup timings (s)", the end of its start-up.
"""

from __future__ import annotations

import bisect
import re
from typing import Any

from replayscope.collector.importers.builder import RunBuilder
from replayscope.collector.importers.facts import Fact, mem_bytes, num, rank_order, to_int
from replayscope.collector.importers.parser import Engine, parse_text as _parse
from replayscope.collector.importers.sglang_capture import unfinished_capture
from replayscope.collector.importers.sglang_capture import SectionCaptures, _Section
from replayscope.collector.importers.sglang_lines import (KV, MEM, STAGES, classify, from_the_http_server,
                                                          mem_in, server_args, timings_of)


SOURCE = "sglang-log"


class SglangRun(SectionCaptures, RunBuilder):
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
        self.http_server = False        # a line only a server prints (an offline sglang.Engine has none)
        self.timings_fact: Fact | None = None
        self.batches_after_timings = 0
        self.offline = False

    def observe(self, line) -> None:
        super().observe(line)
        if not self.http_server and from_the_http_server(line.text):
            self.http_server = True

    def _figure(self, name: str, fact: Fact, value: Any) -> None:
        self.figures.setdefault(name, {})[fact.line.rank_label] = (rank_order(fact.line.rank), value)

    # -- startup -----------------------------------------------------------------------
    def on_banner(self, fact: Fact) -> None:
        self.args.update(server_args(fact.data["text"]))

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
        e = KV["elapsed"].search(rest)
        load.update(end=True, fact=fact, elapsed=num(e.group(1)) if e else None, mem=mem_in(KV["mem_usage"], rest))
        self.stage = "kv_cache"

    def on_pool_end(self, fact: Fact) -> None:
        g = fact.data["groups"]
        self._figure("mem_pool_avail_bytes", fact, mem_bytes(g[0], g[1]))

    def on_kv(self, fact: Fact) -> None:
        rest = fact.data["rest"]
        total, found = 0, False
        for key in ("K size", "V size", "KV size"):
            m = re.search(r"\b" + re.escape(key) + r":\s*" + MEM, rest)
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
        m = re.search(r"available_gpu_mem=" + MEM, rest)
        if m:
            self._figure("available_gpu_mem_bytes", fact, mem_bytes(m.group(1), m.group(2)))

    def on_timings(self, fact: Fact) -> None:
        self.timings_fact = fact
        self.timings = timings_of(fact.data["rest"])
        if "scheduler_e2e" in self.timings:
            self.phase(fact, "engine_init", self.timings["scheduler_e2e"])

    # -- serving --------------------------------------------------------------------
    def on_ready(self, fact: Fact) -> None:
        self.mark_ready(fact)
        self.stage = "serving"
        self._release_startup()

    # -- steps -------------------------------------------------------------------------
    def on_batch(self, fact: Fact) -> None:
        if self.timings_fact is not None:
            self.batches_after_timings += 1
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
        if stage == "prefill" and tokens_m and raw_bs is not None and raw_bs >= 1 and tokens:
            raw_bs = tokens       # a prefill's batch is its tokens: SGLang keys prefill graphs by them, as the trace records it
        if raw_bs is None or raw_bs < 1:
            event = {"kind": "step_counts", "ts": fact.line.ts, "stage": stage, "count": 1,
                     "mode": "graph" if graph else "eager", "num_tokens": 0, "padded_tokens": 0}
            event.update({"reason": None} if graph else self._eager_cause(stage, None))
            self.emit(event)
            return
        base = {"kind": "step", "ts": fact.line.ts, "stage": stage, "duration_s": None, "raw_bs": raw_bs,
                "num_tokens": tokens or 0}
        if not graph:
            cause = self._eager_cause(stage, raw_bs, tokens)
            self.emit(dict(base, mode="eager", graph_bs=None, padded_tokens=0, reason=cause["reason"],
                           evidence=cause["evidence"]))
            return
        graph_bs = raw_bs
        sizes = self.decode_sizes() if stage == "decode" else self.prefill_sizes() if tokens_m else []
        i = bisect.bisect_left(sizes, raw_bs)
        if i < len(sizes):
            graph_bs = sizes[i]
        self.emit(dict(base, mode="padded" if graph_bs > raw_bs else "graph", graph_bs=graph_bs,
                       padded_tokens=graph_bs - raw_bs, reason=None))

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

    def _eager_cause(self, stage: str, raw_bs: int | None, tokens: int | None = None) -> dict[str, Any]:
        """Why a batch ran without a graph, from what the log shows; unknown otherwise."""
        if self.args.get("disable_cuda_graph"):
            return {"reason": "graphs_disabled", "provenance": "inferred",
                    "evidence": "the server runs with disable_cuda_graph=True"}
        if stage == "prefill":
            return self._eager_prefill_cause(tokens)
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

    def _eager_prefill_cause(self, tokens: int | None) -> dict[str, Any]:
        """A prefill without a graph: ``prefill`` where the target captured no prefill graphs;
        where it did (SGLang 0.5.17's prefill CUDA graphs, keyed by tokens), above the largest
        size is ``batch_too_large`` and else not known from the log."""
        sizes = self.prefill_sizes()
        if not sizes:
            return {"reason": "prefill", "provenance": "inferred",
                    "evidence": "a prefill batch (cuda graph: False): its variable-length input has no captured graph"}
        if tokens is not None and tokens > max(sizes):
            return {"reason": "batch_too_large", "provenance": "inferred",
                    "evidence": f"#new-token: {tokens} is above the largest captured prefill size ({max(sizes)} tokens)"}
        return {"reason": "unknown", "provenance": None, "evidence": None}

    def prefill_sizes(self) -> list[int]:
        """The token counts the target's prefill graphs were captured for (none: no such graphs)."""
        for s in self.sections:
            if s.role == "target" and STAGES.get(s.stage) == "prefill" and not s.failed:
                sizes = s.known_sizes()
                if sizes:
                    return sizes
        return []

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
        if not self.ready and self.timings_fact is not None and self.batches_after_timings \
                and not self.http_server and not self.failed():
            # an offline sglang.Engine: no server comes; its start-up ended at the timings line
            self.offline = True
            self.mark_ready(self.timings_fact)
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
        unfinished = [s for s in mine if not s.ended]
        if unfinished and not any(s.ended for s in mine):
            config["capture_unfinished"] = unfinished_capture(unfinished[-1], self.last_ts,
                                                             run_failed=self.failed())
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
        if self.offline:
            config["offline"] = True
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
