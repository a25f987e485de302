"""Run a real SGLang (0.5.17) on a GPU, traced by replayscope or not, and read what the engine says
about itself: its log lines (each capture pass, "Capture target decode CUDA graph begin. backend=full,
num_tokens_per_req=1, bs=[...]" and its "... end. elapsed=T s, mem usage=M GB"; one "Prefill batch"
line per prefill batch with its "#new-token" and "#cached-token") and, when serving with
--enable-metrics, its counters (``sglang:cuda_graph_passes_total``: one increment per forward pass,
by mode decode/prefill × graph/none; ``sglang:realtime_tokens_total`` by mode; prompt and generation
token totals), next to what the program asked for. The GPU tests (tests/engines/test_sglang_gpu.py)
use it; the model is the small random Llama of benchmarks.engine_harness (no download, no tokenizer).

SGLang is brought to the device machine as a folder of wheels on PYTHONPATH (docs/engines.md).

    python -m benchmarks.sglang_harness record OUT_DIR     # the runs that record SGLang's own shapes
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import engine_harness
from benchmarks.engine_harness import REPO, EngineRun, busy_run, free_port, healthy, make_model, stop_group, \
    trace_prefix, traced_runs

PROGRAMS = Path(__file__).resolve().parent / "sglang_programs"
ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
       # FlashAttention 3 from sgl-kernel itself, not fetched from the Hugging Face kernel hub
       "SGLANG_USE_SGL_FA3_KERNEL": "1",
       # /health would otherwise generate one token per poll: forwards no program asked for
       "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0",
       "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), str(REPO)) if p)}
__all__ = ["make_model", "traced_runs", "sglang_available", "log_facts", "metrics_facts", "run_offline",
           "run_serve", "scheduler_run"]


def sglang_available() -> bool:
    return engine_harness.engine_available("sglang")


# -- what the engine says about itself -------------------------------------------------------------
_BEGIN = re.compile(r"Capture (?P<name>\w+ \w+) (?:CUDA|CPU|NPU|XPU) graph begin\. backend=(?P<backend>[\w-]+), "
                    r"(?:num_tokens_per_req=\d+, bs=\[(?P<bs>[^\]]*)\]|num_tokens=\[(?P<tokens>[^\]]*)\])")
_END = re.compile(r"Capture (?P<name>\w+ \w+) (?:CUDA|CPU|NPU|XPU) graph end\. elapsed=(?P<secs>[\d.]+) s, "
                  r"mem usage=(?P<gb>[\d.]+) GB")
_DECODE = re.compile(r"Decode batch(?: \[\d+\])?, #running-req: (?P<rows>\d+),")
_PREFILL = re.compile(r"Prefill batch(?: \[\d+\])?, #new-seq: (?P<seqs>\d+), #new-token: (?P<new>\d+), "
                      r"#cached-token: (?P<cached>\d+)")


def _sizes(text: str | None) -> list[int]:
    return [int(part) for part in (text or "").split(",") if part.strip()]


def log_facts(text: str) -> dict:
    """Each capture pass the log states (name, backend, sizes, elapsed seconds, memory in GB; None
    where its end line is missing) and its prefill batches (count, new and cached tokens, new
    requests) and the decode batches it logged (one line every ``decode_log_interval`` decode
    batches, each with its rows, ``#running-req``: the offline program sets the interval to 1, so
    every decode batch)."""
    passes: dict[str, dict] = {}
    for match in _BEGIN.finditer(text):
        sizes = _sizes(match["bs"]) if match["bs"] is not None else _sizes(match["tokens"])
        passes[match["name"]] = {"backend": match["backend"], "sizes": sizes,
                                 "unit": "requests" if match["bs"] is not None else "tokens",
                                 "elapsed_s": None, "mem_gb": None}
    for match in _END.finditer(text):
        if match["name"] in passes:
            passes[match["name"]].update(elapsed_s=float(match["secs"]), mem_gb=float(match["gb"]))
    prefills = [(int(m["seqs"]), int(m["new"]), int(m["cached"])) for m in _PREFILL.finditer(text)]
    decodes = [int(m["rows"]) for m in _DECODE.finditer(text)]
    return {"capture_passes": passes,
            "decode_batches": len(decodes), "decode_rows": sum(decodes),
            "prefill_batches": len(prefills),
            "prefill_new_tokens": sum(new for _, new, _ in prefills),
            "prefill_cached_tokens": sum(cached for _, _, cached in prefills),
            "prefill_new_requests": sum(seqs for seqs, _, _ in prefills)}


_SAMPLE = re.compile(r'^(?P<name>[\w:]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>[-+\d.eE]+|NaN)$')


def metrics_facts(text: str) -> dict:
    """SGLang's own counters, summed over its label sets: forward passes by mode
    (``cuda_graph_passes_total``: decode_cuda_graph, decode_none, prefill_cuda_graph, prefill_none),
    tokens by mode (``realtime_tokens_total``: prefill_compute, prefill_cache, decode), prompt and
    generation tokens, requests. A counter the text does not have is None, not 0."""
    passes: dict[str, int] = {}
    tokens: dict[str, int] = {}
    totals: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if not match or match["value"] == "NaN":
            continue
        name, value = match["name"], float(match["value"])
        mode = re.search(r'mode="([^"]*)"', match["labels"] or "")
        if name == "sglang:cuda_graph_passes_total" and mode:
            passes[mode[1]] = passes.get(mode[1], 0) + int(value)
        elif name == "sglang:realtime_tokens_total" and mode:
            tokens[mode[1]] = tokens.get(mode[1], 0) + int(value)
        elif name in ("sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:num_requests_total"):
            totals[name] = totals.get(name, 0) + value

    def total(name: str) -> int | None:
        return int(totals[name]) if name in totals else None
    return {"passes": passes or None, "steps": sum(passes.values()) if passes else None, "tokens": tokens or None,
            "prompt_tokens": total("sglang:prompt_tokens_total"),
            "generation_tokens": total("sglang:generation_tokens_total"),
            "requests": total("sglang:num_requests_total")}


def metrics_delta(before: dict, after: dict) -> dict:
    """What the counters counted between two scrapes: None where either scrape lacks the counter."""
    def minus(a, b):
        if isinstance(a, dict) and isinstance(b, dict):
            return {key: value - b.get(key, 0) for key, value in a.items()}
        if isinstance(a, int) and isinstance(b, int):
            return a - b
        if isinstance(a, dict) and b is None:     # a labelled counter shows only once incremented
            return dict(a)
        return None
    delta = {key: minus(after[key], before.get(key)) for key in after}
    if isinstance(delta["passes"], dict):
        delta["steps"] = sum(delta["passes"].values())
    return delta


# -- runs ------------------------------------------------------------------------------------------
def run_offline(model: Path, out: Path, name: str, traced: bool, *options: str, timeout: float = 420) -> EngineRun:
    return engine_harness.run_offline(PROGRAMS / "offline.py", ENV, log_facts, model, out, name, traced, *options,
                                      timeout=timeout)


def run_serve(model: Path, out: Path, name: str, traced: bool, *options: str, requests: int = 24, later: int = 8,
              ready_timeout: float = 300) -> EngineRun:
    """``python -m sglang.launch_server`` in its own process group (as a terminal runs it), the
    client's requests with ``/metrics`` before and after, then Ctrl-C (SIGINT to the group)."""
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    events = out / f"{name}.jsonl" if traced else None
    command = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model), "--port", str(port),
               "--skip-tokenizer-init", "--attention-backend", "fa3", "--sampling-backend", "pytorch",
               "--mem-fraction-static", "0.3", "--max-running-requests", "16", "--enable-metrics",
               "--random-seed", "0", *options]
    if traced:
        command = trace_prefix(events) + command
    log = out / f"{name}.log"
    run = EngineRun(name, traced, log, events)
    started = time.time()
    with open(log, "w") as stream:
        server = subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, env=ENV, cwd=out,
                                  start_new_session=True)
        try:
            while not healthy(url):
                if server.poll() is not None or time.time() - started > ready_timeout:
                    stream.flush()
                    raise RuntimeError(f"sglang.launch_server did not become healthy (exit {server.poll()}); "
                                       f"its log ends: {_last_line(log)}")
                time.sleep(0.25)
            run.seconds["to_healthy"] = time.time() - started
            client = subprocess.run([sys.executable, str(PROGRAMS / "client.py"), url, str(out),
                                     "--requests", str(requests), "--later", str(later)],
                                    capture_output=True, text=True, env=ENV, timeout=300)
            report = json.loads((out / "client.json").read_text()) if (out / "client.json").exists() else {}
            for part in ("client.json", "metrics-before.txt", "metrics.txt"):
                if (out / part).exists():
                    (out / part).rename(out / f"{name}.{part}")
            before = metrics_facts(_read(out / f"{name}.metrics-before.txt"))
            after = metrics_facts(_read(out / f"{name}.metrics.txt"))
            run.report = {**report, "engine": after, "engine_for_client": metrics_delta(before, after),
                          "client_stderr": client.stderr[-2000:]}
        finally:
            stopped = time.time()
            run.returncode = stop_group(server)
            run.seconds["stop"] = time.time() - stopped
    run.log_facts = log_facts(log.read_text(errors="replace"))
    return run


def _last_line(log: Path) -> str:
    """The last non-empty line of a log that is not the tracer's own ending (the error's)."""
    lines = [line for line in _read(log).splitlines() if line.strip() and not line.startswith("replayscope trace")]
    return lines[-1].strip() if lines else f"(empty: {log})"


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def scheduler_run(events: Path) -> tuple[dict, list[dict]]:
    """The traced run of SGLang's scheduler: the one process that captured graphs or ran steps."""
    return busy_run(events, "scheduler")


def record(out: Path) -> list[dict]:
    """The recorder's run and one offline run untraced, one traced, one traced server."""
    return engine_harness.record(out, PROGRAMS / "recorder.py", ENV, run_offline, run_serve, prefix="sglang-")


if __name__ == "__main__":
    engine_harness.main(record, __doc__)
