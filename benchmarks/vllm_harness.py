"""Run a real vLLM on a GPU, traced by replayscope or not, and read what the engine says about
itself: its log lines (capture passes and counts, "Graph capturing finished in N secs, took X GiB",
compile and init times) and its own step counts (``vllm:iteration_tokens_total``: one observation
per engine step, from ``/metrics`` when serving and ``LLM.get_metrics()`` offline), next to what
the program asked for. The GPU tests (tests/engines/) and ``benchmarks.vllm_bench`` use it; the
model is the small random Llama of ``benchmarks.engine_harness`` (no download).

    python -m benchmarks.vllm_harness record OUT_DIR      # the runs that record vLLM's own shapes
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

__all__ = ["EngineRun", "make_model", "stop_group", "traced_runs", "vllm_available", "log_facts", "metrics_facts",
           "run_offline", "Server", "run_serve", "engine_core_run"]

PROGRAMS = Path(__file__).resolve().parent / "vllm_programs"
ENV = {**os.environ, "VLLM_USE_FLASHINFER_SAMPLER": "0", "TOKENIZERS_PARALLELISM": "false",
       "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}


def vllm_available() -> bool:
    return engine_harness.engine_available("vllm")


# -- what the engine says about itself -------------------------------------------------------------
_CAPTURE_BAR = re.compile(r"Capturing CUDA graphs \((?P<mode>[A-Z_]+)\)[^\r\n]*?(?P<done>\d+)/(?P<total>\d+)")
_FINISHED = re.compile(r"Graph capturing finished in (?P<secs>[\d.]+) secs?, took (?P<gib>[\d.]+) GiB")
_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took (?P<secs>[\d.]+) s")
_COMPILE = re.compile(r"torch\.compile takes (?P<secs>[\d.]+) s in total")
_MODEL_LOADING = re.compile(r"Model loading took [\d.]+ GiB and (?P<secs>[\d.]+) seconds")


def log_facts(text: str) -> dict:
    """The capture passes (mode -> sizes captured, the bar's last count), the capture's time and
    memory, the engine's init and compile times, as the log states them; None where it does not."""
    passes: dict[str, int] = {}
    for match in _CAPTURE_BAR.finditer(text):
        passes[match["mode"]] = max(passes.get(match["mode"], 0), int(match["done"]))
    finished = _FINISHED.search(text)
    init = _INIT.search(text)
    compiled = _COMPILE.search(text)
    loading = _MODEL_LOADING.search(text)
    return {"capture_passes": passes,
            "capture_secs": float(finished["secs"]) if finished else None,
            "capture_gib": float(finished["gib"]) if finished else None,
            "init_engine_s": float(init["secs"]) if init else None,
            "compile_s": float(compiled["secs"]) if compiled else None,
            "model_loading_s": float(loading["secs"]) if loading else None}


def metrics_facts(text: str) -> dict:
    """``vllm:iteration_tokens_total`` (``_count``: engine steps; ``_sum``: the tokens they ran) and
    the prompt and generation token counters, summed over engines."""
    def total(name: str) -> float | None:
        values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                  if line.startswith(name) and (line[len(name)] in " {")]
        return sum(values) if values else None
    steps = total("vllm:iteration_tokens_total_count")
    tokens = total("vllm:iteration_tokens_total_sum")
    prompt = total("vllm:prompt_tokens_total")
    generated = total("vllm:generation_tokens_total")
    return {"iteration_steps": None if steps is None else int(steps),
            "iteration_tokens": None if tokens is None else int(tokens),
            "prompt_tokens": None if prompt is None else int(prompt),
            "generation_tokens": None if generated is None else int(generated)}


# -- runs ------------------------------------------------------------------------------------------
def run_offline(model: Path, out: Path, name: str, traced: bool, *options: str, timeout: float = 420) -> EngineRun:
    return engine_harness.run_offline(PROGRAMS / "offline.py", ENV, log_facts, model, out, name, traced, *options,
                                      timeout=timeout)


class Server:
    """One ``vllm serve`` (its own process group, as a terminal runs it), traced or not: start it,
    wait for ``/health``, send rounds of requests, read ``/metrics``, Ctrl-C it."""

    def __init__(self, model: Path, out: Path, name: str, traced: bool, *options: str):
        out.mkdir(parents=True, exist_ok=True)
        self.out, self.name, self.traced = out, name, traced
        self.url = f"http://127.0.0.1:{free_port()}"
        self.run = EngineRun(name, traced, out / f"{name}.log", out / f"{name}.jsonl" if traced else None)
        self.command = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model),
                        "--port", self.url.rsplit(":", 1)[1], "--skip-tokenizer-init", "--max-num-seqs", "16",
                        "--gpu-memory-utilization", "0.25", "--max-model-len", "1024", "--served-model-name", "m",
                        *options]
        if traced:
            self.command = trace_prefix(self.run.events) + self.command
        self.process: subprocess.Popen | None = None
        self.started = 0.0

    def start(self) -> "Server":
        self.started = time.time()
        with open(self.run.log, "w") as stream:
            self.process = subprocess.Popen(self.command, stdout=stream, stderr=subprocess.STDOUT, env=ENV,
                                            cwd=self.out, start_new_session=True)
        return self

    def check_healthy(self, ready_timeout: float = 300) -> bool:
        """True once healthy (its time to healthy noted); raises if it died or took too long."""
        if "to_healthy" in self.run.seconds:
            return True
        if healthy(self.url):
            self.run.seconds["to_healthy"] = time.time() - self.started
            return True
        if self.process.poll() is not None or time.time() - self.started > ready_timeout:
            raise RuntimeError(f"vllm serve did not become healthy (exit {self.process.poll()}); see {self.run.log}")
        return False

    def wait_healthy(self, ready_timeout: float = 300) -> float:
        while not self.check_healthy(ready_timeout):
            time.sleep(0.1)
        return self.run.seconds["to_healthy"]

    def round(self, requests: int, later: int) -> dict:
        """One round of requests (some at once, some while they run), then ``/metrics``."""
        client = subprocess.run([sys.executable, str(PROGRAMS / "client.py"), self.url, "m", str(self.out),
                                 "--requests", str(requests), "--later", str(later)],
                                capture_output=True, text=True, env=ENV, timeout=300)
        report = json.loads((self.out / "client.json").read_text()) if (self.out / "client.json").exists() else {}
        self.run.seconds.setdefault("rounds", []).append(report.get("requests_per_s"))
        exact = self.run.report.get("produced", {}).get("exact", True) and report.get("produced", {}).get("exact")
        metrics = (self.out / "metrics.txt").read_text() if (self.out / "metrics.txt").exists() else ""
        self.run.report = {**report, "produced": {**report.get("produced", {}), "exact": exact},
                           "engine": metrics_facts(metrics), "client_stderr": client.stderr[-2000:]}
        for produced in ("client.json", "metrics.txt"):
            if (self.out / produced).exists():
                (self.out / produced).rename(self.out / f"{self.name}.{produced}")
        return report

    def stop(self) -> EngineRun:
        """Ctrl-C (SIGINT to the group) and the wait for it to end (SIGKILL after 90 s)."""
        stopped = time.time()
        self.run.returncode = stop_group(self.process)
        self.run.seconds["stop"] = time.time() - stopped
        self.run.log_facts = log_facts(self.run.log.read_text(errors="replace"))
        return self.run


def run_serve(model: Path, out: Path, name: str, traced: bool, *options: str, requests: int = 24, later: int = 8,
              ready_timeout: float = 300, rounds: int = 1) -> EngineRun:
    """``vllm serve``, ``rounds`` of requests (each round's requests per second in
    ``seconds["rounds"]``), ``/metrics``, then Ctrl-C and the wait for it to end."""
    server = Server(model, out, name, traced, *options).start()
    try:
        server.wait_healthy(ready_timeout)
        for _ in range(rounds):
            server.round(requests, later)
    finally:
        run = server.stop()
    return run


def engine_core_run(events: Path) -> tuple[dict, list[dict]]:
    """The traced run of vLLM's engine core: the process that captured graphs or ran steps."""
    return busy_run(events, "engine-core")


def record(out: Path) -> list[dict]:
    """The runs that record vLLM's own shapes and logs (see the module docstring)."""
    recorder_env = {**ENV, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    return engine_harness.record(out, PROGRAMS / "recorder.py", recorder_env, run_offline, run_serve)


if __name__ == "__main__":
    engine_harness.main(record, __doc__)
