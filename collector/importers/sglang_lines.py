"""What an SGLang log line says: the patterns of SGLang's startup, capture, batch and
failure lines, 0.3 to current, turned into facts (``classify``), and the server arguments
and startup timings a line states. ``replayscope.collector.importers.sglang_log`` builds runs of them.
"""

from __future__ import annotations

import re
from typing import Any

from replayscope.collector.importers.bars import bars
from replayscope.collector.importers.facts import (BANNER, FATAL, LOAD, NUM, READY, Fact, int_list, mem_bytes,
                                                   num, to_int)
from replayscope.collector.importers.failures import ENGINE_FATAL
from replayscope.collector.importers.lines import LogLine


MEM = NUM + r"\s*(GB|GiB|MB|MiB)"
GRAPH = r"(?P<dev>cuda|cpu|npu|CUDA|CPU|NPU|musa|MUSA|hpu|HPU|xpu|XPU)"
SECTION = (r"Capture (?:(?P<role>target|draft) )?(?:(?P<stage>decode|verify|prefill|extend|idle|piecewise) )?"
            + GRAPH)
PATTERNS = {
    "banner": re.compile(r"server_args=ServerArgs\("),
    "load_begin": re.compile(r"Load weight begin\b(?P<rest>.*)$"),
    "load_end": re.compile(r"Load weight end\b(?P<rest>.*)$"),
    "pool_end": re.compile(r"Memory pool end\.\s*avail mem=" + MEM),
    "kv": re.compile(r"KV Cache is allocated\.(?P<rest>.*)$"),
    "token_budget": re.compile(r"max_total_num_tokens=(?P<rest>\d+.*)$"),
    "timings": re.compile(r"Engine startup timings \(s\):\s*(?P<rest>.*)$"),
    "capture_failed": re.compile(SECTION + r" graph failed\b:?\s*(?P<error>.*)$", re.I),
    "capture_begin": re.compile(SECTION + r" graph begin\b(?P<rest>.*)$", re.I),
    "capture_end": re.compile(SECTION + r" graph end\b(?P<rest>.*)$", re.I),
    "capture_bs": re.compile(r"Capture " + GRAPH + r" graph (?P<what>bs|num tokens) \[(?P<bs>[^\]]*)\]", re.I),
    "batch": re.compile(r"\b(?P<stage>Decode|Prefill) batch\b(?P<mixed>\s*\(mixed #running-req:\s*\d+\))?"
                        r"(?P<rest>.*)$"),
    "ready": re.compile(r"The server is fired up and ready to roll|Uvicorn running on|Application startup complete"),
    "fatal": ENGINE_FATAL["sglang"],
}
# What a capture bar is of: "Capturing batches (bs=8 avail_mem=12.30 GB)", "(bs=8, avail_mem=...)",
# "(avail_mem=...)" without the size, the piecewise "Capturing num tokens (num_tokens=N avail_mem=...)";
# a bar without a description is one too while a capture section is open.
# lines only a server prints (uvicorn, the HTTP server, its access log): an offline sglang.Engine has none
HTTP_SERVER = re.compile(r"Uvicorn running on|Started server process|Waiting for application startup|"
                         r"Application startup complete|fired up and ready to roll|\"(?:GET|POST) /")


def from_the_http_server(text: str) -> bool:
    return bool(HTTP_SERVER.search(text))


BAR_DESC = re.compile(r"Capturing [\w ]*?\((?:(?:bs|num_tokens)=(?P<bs>\d+),?\s*)?avail_mem=" + NUM +
                       r"\s*(?P<unit>GB|GiB)\)")
KV = {
    "elapsed": re.compile(r"(?:Time )?elapsed(?:=|:\s*)" + NUM + r"\s*s\b"),
    "mem_usage": re.compile(r"mem usage=" + MEM),
    "avail": re.compile(r"avail mem=" + MEM),
    "backend": re.compile(r"backend=([\w.-]+)"),
    "bs": re.compile(r"\bbs=\[([^\]]*)\]"),
    "num_tokens": re.compile(r"\bnum_tokens=\[([^\]]*)\]"),
    "type": re.compile(r"\btype=([\w.]+)"),
}
# A section's stage as a capture event's: piecewise graphs serve prefill/extend batches.
STAGES = {"decode": "decode", "verify": "verify", "prefill": "prefill", "extend": "prefill", "idle": "decode",
           "piecewise": "prefill"}


def mem_in(pattern: re.Pattern, text: str) -> int | None:
    m = pattern.search(text)
    return mem_bytes(m.group(1), m.group(2)) if m else None


def classify(line: LogLine) -> list[Fact]:
    text = line.text
    if "raph" in text or "RAPH" in text:
        for kind in ("capture_failed", "capture_begin", "capture_end", "capture_bs"):
            m = PATTERNS[kind].search(text)
            if m:
                return [Fact(line, kind, m.groupdict())]
    if "batch" in text:
        m = PATTERNS["batch"].search(text)
        if m:
            return [Fact(line, "batch", m.groupdict())]
    if "%" in text:
        found = []
        for bar in bars(text):
            m = BAR_DESC.search(bar.desc) if bar.desc else None
            if bar.desc is not None and m is None:
                continue                          # some other bar (a download, a checkpoint, a compile)
            found.append(Fact(line, "tqdm", {"bs": to_int(m["bs"]) if m and m["bs"] else None, "n": bar.n,
                                             "total": bar.total, "elapsed_s": bar.elapsed_s,
                                             "avail": mem_bytes(m.group(2), m["unit"]) if m else None,
                                             "named": m is not None}))
        if found:
            return found
    for kind in ("load_begin", "load_end", "pool_end", "kv", "token_budget", "timings"):
        m = PATTERNS[kind].search(text)
        if m:
            return [Fact(line, LOAD if kind == "load_begin" else kind, m.groupdict() | {"groups": m.groups()})]
    if PATTERNS["banner"].search(text):
        return [Fact(line, BANNER, {"text": text})]
    if PATTERNS["ready"].search(text):
        return [Fact(line, READY)]
    m = PATTERNS["fatal"].search(text)
    if m:
        return [Fact(line, FATAL, {"text": text, "error": m.groupdict().get("error")})]
    return []


def server_args(text: str) -> dict[str, Any]:
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


def timings_of(text: str) -> dict[str, Any]:
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
