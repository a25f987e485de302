"""vLLM server logs -> replayscope runs, line by line.

Reads what vLLM prints about startup and graphs, V0 to current V1 (docs/importing.md has
the table): weight loading, torch.compile and its cache, memory profiling, the KV cache,
the capture-size list and its cap, graph-memory estimates and actuals, the capture
progress bars and total, engine init, failures (tracebacks through the capture code,
``EngineCore failed to start``, ``WorkerProc hit an exception``), and the
``--cudagraph-metrics`` tables. vLLM logs no per-size capture time: a finished capture pass
gives a capture event per size with no duration, of the pass's stage (``stages.vllm_pass_stage``).
An offline run (``LLM(...)``: no API-server line) is ready at "init engine ... took".
"""

from __future__ import annotations

import re
from typing import Any

from replayscope.collector.importers.builder import RunBuilder
from replayscope.collector.importers.facts import LOAD, Fact, clip, mem_bytes, num, rank_order, to_int
from replayscope.collector.importers.lines import LogLine
from replayscope.collector.importers.parser import Engine, parse_text as _parse
from replayscope.collector.importers.vllm_lines import classify, config_line, from_the_api_server, phase_slug
from replayscope.collector.importers.stages import vllm_pass_stage
from replayscope.collector.importers.vllm_tables import MetricsTables


SOURCE = "vllm-log"


class VllmRun(MetricsTables, RunBuilder):
    engine = "vllm"
    source = SOURCE

    def __init__(self, run_id: str, **kw):
        super().__init__(run_id, **kw)
        self.meta: dict[str, Any] = {}
        self.by_rank: dict[str, dict[Any, Any]] = {}        # figure -> {rank label: value}
        self.loads: dict[Any, dict[str, Any]] = {}          # rank -> the load being read
        self.passes: list[dict[str, Any]] = []
        self.capturing = False
        self.capture_began: float | None = None
        self.capture_took: dict[Any, int | None] = {}
        self.compile_seen = False
        self.table: dict[str, Any] | None = None
        self.table_mode: str | None = None
        self.table_sizes: list[int] = []
        self.last_table_ts: float | None = None
        self.step_tables = 0
        self.api_server = False       # a line only a server prints (an offline LLM(...) run has none)

    def observe(self, line: LogLine) -> None:
        super().observe(line)
        if not self.api_server and from_the_api_server(line):
            self.api_server = True

    def apply(self, fact: Fact) -> None:
        if fact.kind != "row":
            self.table = None if fact.kind != "cg_stats" else self.table
        if fact.kind not in ("load_weights", "weights_mem", "model_loading", LOAD):
            self._release_loads(fact.line.rank)
        super().apply(fact)

    def _figure(self, name: str, fact: Fact, value: Any) -> None:
        """A run-level figure as each rank printed it; the headline rank's goes in config."""
        self.by_rank.setdefault(name, {})[fact.line.rank_label] = (rank_order(fact.line.rank), value)

    def _headline_figure(self, name: str) -> Any:
        values = self.by_rank.get(name)
        if not values:
            return None
        return min(values.values(), key=lambda item: item[0])[1]

    # -- startup -----------------------------------------------------------------------
    def on_banner(self, fact: Fact) -> None:
        self.meta.update(config_line(fact.data["text"]))

    def on_args(self, fact: Fact) -> None:
        for key, value in config_line(fact.data["rest"]).items():
            self.meta.setdefault(key, value)

    def on_batched_tokens(self, fact: Fact) -> None:
        self.meta["max_num_batched_tokens"] = int(fact.data["tokens"])

    def on_load(self, fact: Fact) -> None:
        self.meta.setdefault("model", fact.data["model"])
        self.stage = "load_weights"

    def _load(self, fact: Fact) -> dict[str, Any]:
        self.stage = "load_weights"
        return self.loads.setdefault(fact.line.rank, {"fact": fact})

    def on_load_weights(self, fact: Fact) -> None:
        load = self._load(fact)
        load.setdefault("seconds", num(fact.data["groups"][0]))
        load["fact"] = fact

    def on_model_loading(self, fact: Fact) -> None:
        g = fact.data["groups"]
        load = self._load(fact)
        load.update(seconds=num(g[2]), fact=fact, total=True)
        if g[0] is not None:
            load["mem"] = mem_bytes(g[0], g[1])

    def on_weights_mem(self, fact: Fact) -> None:
        g = fact.data["groups"]
        load = self._load(fact)
        load["mem"] = mem_bytes(g[0], g[1])
        if g[2] is not None:
            load["seconds"] = num(g[2])
        load["fact"] = fact

    def on_graphs_off(self, fact: Fact) -> None:
        self.meta.setdefault("graphs_off", clip(fact.data["text"], 200))

    def _release_loads(self, rank: Any, every: bool = False) -> None:
        for key in list(self.loads):
            if every or key == rank:
                load = self.loads.pop(key)
                self.phase(load["fact"], "load_weights", load.get("seconds"), load.get("mem"))

    def on_dynamo(self, fact: Fact) -> None:
        self.stage, self.compile_seen = "compile", True
        self.phase(fact, "compile.dynamo", num(fact.data["groups"][0]))

    def on_compile_graph(self, fact: Fact) -> None:
        self.stage, self.compile_seen = "compile", True
        self.phase(fact, "compile." + phase_slug(fact.data["what"]), num(fact.data["groups"][1]))

    def on_compile_cache_hit(self, fact: Fact) -> None:
        self.stage, self.compile_seen = "compile", True
        self._count_cache(fact, 0)
        seconds = num(fact.data["groups"][1]) if fact.data.get("what") else None
        if seconds is not None:
            self.phase(fact, "compile.cache_load_" + phase_slug(fact.data["what"]), seconds)

    def on_compile_cache_save(self, fact: Fact) -> None:
        self.compile_seen = True
        self._count_cache(fact, 1)

    def _count_cache(self, fact: Fact, which: int) -> None:
        """Compile-cache hits (0) and saves (1) per rank: every rank compiles its own."""
        counts = self.by_rank.setdefault("compile_cache", {}).setdefault(
            fact.line.rank_label, (rank_order(fact.line.rank), [0, 0]))[1]
        counts[which] += 1

    def on_compile_total(self, fact: Fact) -> None:
        self.compile_seen = True
        self.phase(fact, "compile", num(fact.data["groups"][0]))

    def on_profile(self, fact: Fact) -> None:
        self.stage = "kv_cache"
        g = fact.data["groups"]
        self.phase(fact, "profile", num(g[0] if g[0] is not None else g[1]))

    def on_kv_mem(self, fact: Fact) -> None:
        self.stage = "kv_cache"
        g = fact.data["groups"]
        self.phase(fact, "kv_cache", None, mem_bytes(g[0], g[1]))   # vLLM does not time it

    def on_kv_v0(self, fact: Fact) -> None:
        self.on_kv_mem(fact)

    def on_kv_tokens(self, fact: Fact) -> None:
        self._figure("kv_tokens", fact, to_int(fact.data["tokens"]))

    def on_blocks(self, fact: Fact) -> None:
        self._figure("kv_blocks", fact, to_int(fact.data["gpu"]))
        if fact.data.get("cpu") is not None:
            self._figure("cpu_blocks", fact, to_int(fact.data["cpu"]))

    def on_concurrency(self, fact: Fact) -> None:
        self._figure("max_concurrency", fact, {"tokens_per_request": to_int(fact.data["tokens"]),
                                               "requests": num(fact.data["x"])})

    def on_graph_profile(self, fact: Fact) -> None:
        self.stage = "kv_cache"
        profile = {}
        for mode, count, largest in re.findall(r"(\w+)=(\d+)(?:\s*\(largest=(\d+)\))?", fact.data["rest"]):
            profile[mode] = {"graphs": int(count), "largest": int(largest) if largest else None}
        if profile:
            self._figure("graph_profile", fact, profile)

    def on_graph_estimate(self, fact: Fact) -> None:
        g = fact.data["groups"]
        self._figure("graph_mem_estimate", fact, mem_bytes(g[0], g[1]))

    def on_graph_pool(self, fact: Fact) -> None:
        g = fact.data["groups"]
        self._figure("graph_mem_actual", fact, mem_bytes(g[0], g[1]))
        if g[2] is not None:
            self._figure("graph_mem_estimate", fact, mem_bytes(g[2], g[3]))

    def on_capture_cap(self, fact: Fact) -> None:
        self.meta["capture_size_cap"] = {"from": int(fact.data["old"]), "to": int(fact.data["new"])}
        self.warn(fact, clip(fact.data["text"], 4000), "capture_sizes_capped")

    def on_capture_start(self, fact: Fact) -> None:
        self.stage = "capture"
        self.capturing = True
        if self.capture_began is None:
            self.capture_began = fact.line.ts

    def on_capture_progress(self, fact: Fact) -> None:
        bar = fact.data["bar"]
        desc = (fact.data["desc"] or "").strip()
        current = self.passes[-1] if self.passes else None
        # the same bar drawn again (a redraw of 100%) is the same pass; a new one starts lower
        if current is None or current["desc"] != desc or bar.n < current["n"]:
            current = {"desc": desc, "n": bar.n, "total": bar.total, "elapsed": None}
            self.passes.append(current)
        current["n"] = bar.n
        current["elapsed"] = bar.elapsed_s if bar.elapsed_s is not None else current["elapsed"]
        if bar.done:
            current["done"] = True
        self.stage = "capture"
        self.capturing = True

    def on_capture_done(self, fact: Fact) -> None:
        g = fact.data["groups"]
        took = mem_bytes(g[1], g[2]) if g[1] is not None else None
        self.capture_took[fact.line.rank_label] = (rank_order(fact.line.rank), took)
        self.phase(fact, "capture", num(g[0]), took)
        self._emit_passes(fact)
        self.capturing = False
        self.stage = "warmup"

    def on_init_engine(self, fact: Fact) -> None:
        g = fact.data["groups"]
        self.phase(fact, "engine_init", num(g[0]))
        compilation = num(g[1]) if g[1] is not None else None
        if compilation is not None and compilation > 0:
            self.meta["init_compilation_s"] = (compilation, fact)
        if self.saw_start and not self.api_server and not self.failed():
            # an offline run (LLM(...) in a program): no API server comes; its start-up ends here
            self.meta["offline"] = True
            self.on_ready(fact)

    def on_ready(self, fact: Fact) -> None:
        self.mark_ready(fact)
        self.stage = "serving"
        self.release()

    def capturing_bs(self) -> int | None:
        if not self.capturing:
            return None
        current = self.passes[-1] if self.passes else None
        sizes = self.capture_sizes()
        if current and sizes and current["total"] and current["n"] is not None and current["total"] <= len(sizes):
            # vLLM captures largest first; a decode-only pass covers the smallest sizes
            pass_sizes = sorted(sizes[:current["total"]], reverse=True)
            if current["n"] < len(pass_sizes):
                return pass_sizes[current["n"]]
        return None

    def unfinished_capture(self) -> dict[str, Any] | None:
        """A capture that never reached "Graph capturing finished" (failed, or the log stops
        inside it): how far its last pass got and its time so far, which is not a total."""
        if self.capture_took or not (self.capturing or self.passes):
            return None
        last = self.passes[-1] if self.passes else {}
        if last.get("done") and not self.capturing:
            return None
        elapsed = last.get("elapsed")
        if elapsed is None and self.capture_began is not None and self.last_ts is not None:
            elapsed = max(0.0, self.last_ts - self.capture_began)
        return {"elapsed_s": elapsed, "graphs_done": last.get("n"), "graphs": last.get("total"),
                "pass": last.get("desc") or "graphs", "status": "failed" if self.failed() else "incomplete"}

    def capture_stage(self) -> str:
        return vllm_pass_stage(self.meta.get("cudagraph_mode"), (self.passes[-1]["desc"] if self.passes else "") or "")

    def pass_sizes(self, graphs: int | None) -> list[int]:
        """The sizes a pass of ``graphs`` captures: the smallest of the list (a decode pass
        stops at the largest decode batch); [] when the log lists no sizes."""
        sizes = self.capture_sizes()
        return sorted(sizes)[:graphs] if sizes and graphs and graphs <= len(sizes) else []

    def _emit_passes(self, fact: Fact) -> None:
        """Each finished capture pass's sizes as captures of its stage (vLLM times no size)."""
        for p in self.passes:
            if p.get("emitted") or not p.get("done"):
                continue
            p["emitted"] = True
            stage = vllm_pass_stage(self.meta.get("cudagraph_mode"), p["desc"])
            for bs in self.pass_sizes(p["total"]):
                self.emit({"kind": "capture", "ts": fact.line.ts, "graph_bs": bs, "stage": stage, "duration_s": None,
                           "pool_bytes": None, "pool_delta_bytes": None, "status": "ok", "error": None,
                           "variant": None, "rank": fact.line.rank_label})
                self.note_headline("captures", fact.line)

    # -- the end -----------------------------------------------------------------------
    def close(self) -> None:
        self._release_loads(None, every=True)
        if "compile" not in self.headline and "init_compilation_s" in self.meta:
            seconds, fact = self.meta["init_compilation_s"]
            self.phase(fact, "compile", seconds)
        failure = self.headline_failure()
        if failure is not None and failure.phase == "capture" and not self.ready:
            bs = failure.graph_bs if failure.graph_bs is not None else self.capturing_bs()
            failure.graph_bs = bs
            if bs is not None:
                self.emit({"kind": "capture", "ts": failure.ts, "graph_bs": bs, "stage": self.capture_stage(),
                           "duration_s": None, "pool_bytes": None, "pool_delta_bytes": None, "status": "failed",
                           "error": clip(failure.error, 4000), "variant": None, "rank": failure.rank_label})
                self.note_headline("captures", _line_of(failure))
            else:
                self.warnings.append("a capture failed, but the log does not say at which size")
        elif self.capturing and failure is None:
            self.warnings.append("graph capture was still running where the log ends")
        super().close()

    def model(self) -> str | None:
        return self.meta.get("model")

    def engine_version(self) -> str | None:
        version = self.meta.get("vllm_version")
        return f"vllm {version}" if version else None

    def device(self) -> str | None:
        return self.meta.get("device") or ("cuda" if self.passes or "capture" in self.headline else None)

    def backend(self) -> str:
        if self.graphs_off():
            return "eager"
        mode = self.meta.get("cudagraph_mode") or self.table_mode
        if mode:
            return mode.lower()
        modes = sorted({p["desc"].split(",")[-1].strip().lower() for p in self.passes if "," in p["desc"]})
        if modes:
            return "_and_".join(modes)
        return "cuda_graph" if self.passes or "capture" in self.headline else "unknown"

    def capture_sizes(self) -> list[int]:
        """The capture sizes the log lists (banner, metrics table); a capping line drops those
        above its new maximum, as vLLM does (compilation.py keeps ``s <= blocks``)."""
        sizes = sorted(set(self.meta.get("capture_sizes") or self.table_sizes))
        cap = self.meta.get("capture_size_cap")
        return [s for s in sizes if s <= cap["to"]] if cap else sizes

    def planned_sizes(self) -> tuple[int | None, int | None]:
        """(how many sizes, the largest) as the log states them: the list; else the capture
        bars' totals (the pass over every size is the longest) and the graph-memory profile
        (``PIECEWISE=N (largest=B)``); a capping line's new maximum; the banner's maximum."""
        sizes = self.capture_sizes()
        profile = self._headline_figure("graph_profile") or {}
        cap = self.meta.get("capture_size_cap")
        count = (len(sizes) or max((p["total"] for p in self.passes), default=None)
                 or max((v["graphs"] for v in profile.values()), default=None))
        largest = (max(sizes) if sizes else (cap or {}).get("to")
                   or max((v["largest"] for v in profile.values() if v["largest"]), default=None)
                   or self.meta.get("max_capture_size"))
        return count, largest

    def config(self) -> dict[str, Any]:
        sizes = self.capture_sizes()
        took = min(self.capture_took.values(), key=lambda item: item[0])[1] if self.capture_took else None
        actual = self._headline_figure("graph_mem_actual")
        count, largest = self.planned_sizes()
        config: dict[str, Any] = {
            "engine": "vllm",
            "capture_sizes": sizes,
            "capture_count": count,
            "compile": (self.compile_seen or bool(self.meta.get("compile_level"))
                        or any(k == "compile" or k.startswith("compile.") for k in self.headline)),
            "graph_mem_bytes": actual if actual is not None else took,
            "graph_mem_estimate_bytes": self._headline_figure("graph_mem_estimate"),
            "capture_passes": [{"pass": p["desc"] or "graphs", "graphs_done": p["n"], "graphs": p["total"],
                                "stage": vllm_pass_stage(self.meta.get("cudagraph_mode"), p["desc"]),
                                "sizes": self.pass_sizes(p["total"]) or None}
                               for p in self.passes],
            "cudagraph_metrics_tables": self.step_tables,
        }
        for key in ("kv_tokens", "kv_blocks", "cpu_blocks", "max_concurrency", "graph_profile",
                    "graph_mem_estimate"):
            value = self._headline_figure(key)
            if value is not None and key != "graph_mem_estimate":
                config[key] = value
            ranks = self.by_rank.get(key) or {}
            if len([label for label in ranks if label]) > 1:
                config[key + "_by_rank"] = {label: value for label, (_, value) in ranks.items() if label}
        cache = self._headline_figure("compile_cache")
        if cache is not None:
            config["compile_cache_hits"], config["compile_cache_saves"] = cache
        for key in ("enforce_eager", "cudagraph_mode", "max_num_seqs", "max_num_batched_tokens", "vllm_version",
                    "tensor_parallel_size", "capture_size_cap", "offline"):
            if key in self.meta:
                config[key] = self.meta[key]
        if largest is not None:
            config["max_capture_size"] = largest
        unfinished = self.unfinished_capture()
        if unfinished is not None:
            config["capture_unfinished"] = unfinished
        if self.table_mode and "cudagraph_mode" not in config:
            config["cudagraph_mode"] = self.table_mode
        return config


def _line_of(failure) -> LogLine:
    return LogLine(0, "", failure.ts, failure.rank, failure.rank_label)


# The API server prints its arguments and what they switch off before the engine core's own
# banner: one start, not two.
# What only vLLM prints: its process tags, its "LEVEL MM-DD HH:MM:SS [file.py:N]" stamp, its
# startup lines and its source tree.
MARKERS = re.compile(
    r"\((?:APIServer|EngineCore(?:_DP\d+)?|VllmWorker(?:Process)?|Worker(?:_[A-Z]{2,4}\d+)+|RayWorkerWrapper)"
    r"\b[^)]*pid=\d+\)"
    r"|\b(?:DEBUG|INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./-]+\.py:\d+\]"
    r"|vLLM API server version|Initializing an? (?:V1 )?LLM engine|Graph capturing finished in|"
    r"Capturing CUDA graphs? ?\(|GPU KV cache size:|/vllm/(?:v1|worker|engine|executor|entrypoints)/")
ENGINE = Engine("vllm", SOURCE, "vLLM", classify, VllmRun, MARKERS,
                setup=frozenset({"args", "graphs_off", "capture_cap", "batched_tokens"}))


def parse_text(text: str, *, path: str = "vllm.log", mtime: float = 0.0, digest: str | None = None):
    """Parse a log's text; never raises."""
    return _parse(ENGINE, text, path=path, mtime=mtime, digest=digest)
