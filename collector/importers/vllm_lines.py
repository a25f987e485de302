"""What a vLLM log line says: the patterns of vLLM's startup, compile, memory, capture,
``--cudagraph-metrics`` and failure lines, V0 to current V1, turned into facts
(``classify``), and the settings its config line states. ``replayscope.collector.importers.vllm_log``
builds runs of them.
"""

from __future__ import annotations

import re
from typing import Any

from replayscope.collector.importers.bars import bars
from replayscope.collector.importers.facts import BANNER, FATAL, LOAD, NUM, READY, Fact, int_list
from replayscope.collector.importers.failures import ENGINE_FATAL
from replayscope.collector.importers.lines import LogLine


MEM = NUM + r"\s*(GiB|GB|MiB|MB|TiB)"
SECS = NUM + r"\s*(?:seconds|secs|sec|s)\b"
# What a capture bar is of: "Capturing CUDA graph shapes" (V0, early V1), "Capturing CUDA graphs
# (decode, FULL)" / "(mixed prefill-decode, PIECEWISE)" (V1); the pass is what the parentheses say.
BAR_DESC = re.compile(r"Capturing (?:CUDA graphs?(?: shapes)?|cudagraphs?)\s*(?:\((?P<desc>[^)]*)\))?\s*$")
PATTERNS: list[tuple[str, re.Pattern]] = [
    ("cg_settings", re.compile(r"\*\*CUDAGraph Config Settings:\*\*")),
    ("cg_stats", re.compile(r"\*\*CUDAGraph Stats:\*\*")),
    ("cg_mode", re.compile(r"^- Mode:\s*(?P<mode>\S+)")),
    ("cg_sizes", re.compile(r"^- Capture sizes:\s*\[(?P<sizes>[^\]]*)\]")),
    ("row", re.compile(r"^\|(?P<cells>.*)\|\s*$")),
    ("capture_start", re.compile(r"Capturing the model for CUDA graphs|Capturing cudagraphs for decoding")),
    ("capture_done", re.compile(r"Graph capturing finished in " + SECS + r"(?:,\s*took " + MEM + ")?")),
    ("load_weights", re.compile(r"Loading weights took " + SECS)),
    ("weights_mem", re.compile(r"Loading model weights took " + MEM + r"(?: and " + SECS + ")?")),
    ("model_loading", re.compile(r"Model loading took (?:" + MEM + r"(?: memory)? and )?" + SECS)),
    ("graphs_off", re.compile(r"Cudagraph is disabled under eager mode|Skipping CUDA graph capture|"
                              r"Enforce eager set\b")),
    ("dynamo", re.compile(r"Dynamo bytecode transform time:\s*" + SECS)),
    ("compile_cache_hit", re.compile(r"Directly load (?:the compiled graph\(s\) for (?P<what>.+?) from the cache"
                                     r"(?:, took " + SECS + r")?|AOT compilation from path)")),
    ("compile_graph", re.compile(r"Compiling a graph for (?P<what>.+?) (?:takes|took) " + SECS)),
    ("compile_cache_save", re.compile(r"Cache the graph of (?:compile range |shape )?.+ for later use|"
                                      r"saved AOT compiled function")),
    ("compile_total", re.compile(r"torch\.compile (?:takes|took) " + SECS + r" in total")),
    ("profile", re.compile(r"Memory profiling takes " + SECS + r"|Initial profiling/warmup run took " + SECS)),
    ("kv_mem", re.compile(r"Available KV cache memory:\s*" + MEM)),
    ("kv_v0", re.compile(r"the rest of the memory reserved for KV Cache is\s*" + MEM)),
    ("kv_tokens", re.compile(r"GPU KV cache size:\s*(?P<tokens>[\d,]+) tokens")),
    # V0 "# GPU blocks: N, # CPU blocks: M" (later "# cuda blocks" / "# rocm blocks"), early V1 "# GPU blocks: N"
    ("blocks", re.compile(r"# (?!CPU\b)\w+ blocks:\s*(?P<gpu>\d+)(?:,\s*# CPU blocks:\s*(?P<cpu>\d+))?")),
    # V1's API server: "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: N"
    ("blocks", re.compile(r"\bnum_gpu_blocks is:?\s*(?P<gpu>\d+)")),
    ("concurrency", re.compile(r"Maximum concurrency for (?P<tokens>[\d,]+) tokens per request:\s*"
                               r"(?P<x>\d+(?:\.\d+)?)x")),
    ("graph_pool", re.compile(r"CUDA graph pool memory:\s*" + MEM + r"\s*\(actual\)(?:,\s*" + MEM +
                              r"\s*\(estimated\))?")),
    ("graph_estimate", re.compile(r"Estimated CUDA graph memory:\s*" + MEM)),
    ("graph_profile", re.compile(r"Profiling CUDA graph memory:\s*(?P<rest>.*)$")),
    ("capture_cap", re.compile(r"Capping cudagraph capture sizes from max (?P<old>\d+) to (?P<new>\d+)")),
    ("init_engine", re.compile(r"init engine (?:\(profile, create kv cache, warmup model\) )?took " + SECS +
                               r"(?:\s*\(compilation:\s*" + SECS + ")?")),
    ("args", re.compile(r"non-default args:\s*(?P<rest>\{.*)$")),
    # vllm/config/scheduler.py: "Chunked prefill is enabled with max_num_batched_tokens=8192."
    ("batched_tokens", re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(?P<tokens>\d+)")),
    (LOAD, re.compile(r"Starting to load model (?P<model>\S+?)(?:\.\.\.)?$")),
    (BANNER, re.compile(r"vLLM API server version|Initializing a V1 LLM engine|Initializing an LLM engine")),
    (READY, re.compile(r"Application startup complete|Starting vLLM API server\b.*\bon http|"
                       r"Uvicorn running on")),
    # a stop the server was asked for (Ctrl-C, SIGTERM, the end of an offline program): what it
    # prints while it goes down is not a failure of the run ("[shutdown] MPClient: engine core
    # exited unexpectedly" is not a request to stop: it is not here)
    ("shutdown", re.compile(r"\[shutdown\] (?:EngineCore: trigger received signal|API server: shutdown triggered)|"
                            r"received signal=SIG(?:INT|TERM)\b|Shutting down FastAPI HTTP server|"
                            r"Waiting for application shutdown|Application shutdown complete")),
    (FATAL, ENGINE_FATAL["vllm"]),
]


# Lines only a server (``vllm serve``, the OpenAI API server) prints; an offline ``LLM(...)``
# program prints none, and its start-up ends at "init engine ... took".
API_SERVER = re.compile(r"vLLM API server version|Starting vLLM API server|'model_tag':|^args: Namespace\(|"
                        r"api_server|Uvicorn running on|Application startup complete|Started server process")


def from_the_api_server(line: LogLine) -> bool:
    return line.process == "APIServer" or bool(API_SERVER.search(line.text))


def classify(line: LogLine) -> list[Fact]:
    text = line.text
    if "Capturing" in text and "%" in text:
        found = [Fact(line, "capture_progress", {"desc": m["desc"], "bar": bar})
                 for bar in bars(text) if bar.desc and (m := BAR_DESC.search(bar.desc))]
        if found:
            return found
    for kind, pattern in PATTERNS:
        m = pattern.search(text)
        if m:
            data = m.groupdict()
            data["groups"] = m.groups()
            data["text"] = text
            return [Fact(line, kind, data)]
    return []


def phase_slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
    return slug.removeprefix("compile_")[:48] or "graph"


# CUDAGraphMode as vLLM 0.10's JSON banner prints it (vllm/config/compilation.py).
MODE_NUMBERS = {"0": "NONE", "1": "PIECEWISE", "2": "FULL", "[2,0]": "FULL_DECODE_ONLY", "[2,1]": "FULL_AND_PIECEWISE"}


def config_line(text: str) -> dict[str, Any]:
    """What the startup banner (or the non-default args) says about the engine."""
    out: dict[str, Any] = {}
    m = re.search(r"\bmodel='([^']*)'", text) or re.search(r"['\"]model['\"]:\s*'([^']*)'", text)
    if m:
        out["model"] = m.group(1)
    m = re.search(r"\benforce_eager['\"]?[=:]\s*(True|False)", text)
    if m:
        out["enforce_eager"] = m.group(1) == "True"
    m = re.search(r"\bdevice_config=(?:DeviceConfig\(device='?)?(\w+)", text)
    if m:
        out["device"] = m.group(1)
    m = re.search(r"['\"]?cudagraph_capture_sizes['\"]?\s*[:=]\s*\[([^\]]*)\]", text)
    if m:
        out["capture_sizes"] = sorted(set(int_list(m.group(1))))
    m = re.search(r"['\"]?max_(?:cudagraph_)?capture_size['\"]?\s*[:=]\s*(\d+)", text)
    if m:
        out["max_capture_size"] = int(m.group(1))
    m = re.search(r"CUDAGraphMode\.(\w+)|['\"]cudagraph_mode['\"]:\s*(?:['\"](\w+)|(\[\s*\d\s*,\s*\d\s*\]|\d))", text)
    if m:
        mode = m.group(1) or m.group(2) or MODE_NUMBERS.get(re.sub(r"\s", "", m.group(3) or ""))
        if mode:
            out["cudagraph_mode"] = mode.upper()
    # torch.compile is on at any compilation level / mode above 0 (vllm/config/compilation.py)
    m = re.search(r"CompilationMode\.\w+:\s*(\d)|CompilationLevel\.\w+:\s*(\d)|['\"](?:level|mode)['\"]:\s*(\d)\b", text)
    if m:
        out["compile_level"] = int(next(g for g in m.groups() if g is not None))
    m = re.search(r"['\"]use_cudagraph['\"]:\s*(false|False)\b", text)
    if m:
        out["use_cudagraph"] = False
    m = re.search(r"['\"]?max_num_seqs['\"]?\s*[:=]\s*(\d+)", text)
    if m:
        out["max_num_seqs"] = int(m.group(1))
    m = re.search(r"['\"]?max_num_batched_tokens['\"]?\s*[:=]\s*(\d+)", text)
    if m:
        out["max_num_batched_tokens"] = int(m.group(1))
    m = re.search(r"(?:version|engine \(v)\s*v?(\d+\.\d+(?:\.\d+)?[\w.+-]*)", text)
    if m:
        out["vllm_version"] = m.group(1).rstrip(")")
    m = re.search(r"\b(?:tensor_parallel_size|tp)['\"]?\s*[:=]\s*(\d+)", text)
    if m:
        out["tensor_parallel_size"] = int(m.group(1))
    return out
