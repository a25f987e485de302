"""What the real-engine harnesses (``benchmarks.vllm_harness``, ``benchmarks.sglang_harness``) do
the same way: the small random Llama they both serve (made here, no download), a run's record
(``EngineRun``), the offline program's run, the trace's command prefix, a free port, ``/health``,
stopping a server's process group, the runs a trace wrote and the one that did the work, and the
``record OUT_DIR`` runs with their ``summary.json``. What each engine is asked and what it says
about itself (its command, endpoints, log lines, metrics) stays in the engine's own harness.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]


def engine_available(module: str) -> bool:
    """Whether the engine's package (``vllm``, ``sglang``) is importable here."""
    try:
        import importlib.util
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def make_model(path: Path) -> Path:
    """A random 4-layer Llama in bfloat16 (head size 64, as FlashAttention wants), no tokenizer."""
    if (path / "config.json").exists():
        return path
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
                         num_key_value_heads=2, vocab_size=4096, max_position_embeddings=2048)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(path, safe_serialization=True)
    config_path = path / "config.json"
    data = json.loads(config_path.read_text())
    data["torch_dtype"] = "bfloat16"
    config_path.write_text(json.dumps(data, indent=1))
    return path


@dataclass
class EngineRun:
    name: str
    traced: bool
    log: Path
    events: Path | None
    report: dict = field(default_factory=dict)
    log_facts: dict = field(default_factory=dict)
    returncode: int | None = None
    seconds: dict = field(default_factory=dict)

    def summary(self) -> dict:
        return {"name": self.name, "traced": self.traced, "returncode": self.returncode, "report": self.report,
                "log_facts": self.log_facts, "seconds": self.seconds,
                "events": str(self.events) if self.events else None}


def trace_prefix(events: Path) -> list[str]:
    return [sys.executable, "-m", "replayscope.runner.trace", "--events", str(events), "--"]


def run_offline(program: Path, env: dict, read_log: Callable[[str], dict], model: Path, out: Path, name: str,
                traced: bool, *options: str, timeout: float = 420) -> EngineRun:
    """The engine's offline ``program`` (``MODEL REPORT_JSON *options``) in ``out``, traced or not:
    its log ``name``.log (what ``read_log`` reads from it), its report ``name``.report.json, its
    events ``name``.jsonl when traced."""
    out.mkdir(parents=True, exist_ok=True)
    events = out / f"{name}.jsonl" if traced else None
    report_path = out / f"{name}.report.json"
    command = [sys.executable, str(program), str(model), str(report_path), *options]
    if traced:
        command = trace_prefix(events) + command
    log = out / f"{name}.log"
    started = time.time()
    with open(log, "w") as stream:
        result = subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT, env=env, timeout=timeout, cwd=out)
    run = EngineRun(name, traced, log, events, returncode=result.returncode)
    run.seconds["command"] = time.time() - started
    run.report = json.loads(report_path.read_text()) if report_path.exists() else {}
    run.log_facts = read_log(log.read_text(errors="replace"))
    return run


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
            return answer.status == 200
    except Exception:  # noqa: BLE001
        return False


def stop_group(server: subprocess.Popen, grace_s: float = 90) -> int:
    """Ctrl-C to the server's process group, SIGKILL after ``grace_s``; its exit status. A server
    that is already gone (it died during start-up) is not an error here: its status is returned
    and whatever ended the run (the caller's exception) is what the test reports."""
    if server.poll() is not None:
        return server.returncode
    try:
        os.killpg(server.pid, signal.SIGINT)                # Ctrl-C
        return server.wait(timeout=grace_s)
    except ProcessLookupError:                              # the group ended meanwhile
        return server.wait()
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        return server.wait()


def traced_runs(events: Path) -> list[tuple[dict, list[dict]]]:
    """Every run a trace wrote for ``events`` (the first traced process writes the file itself,
    every other one ``<file>-pidN.jsonl``), as (run record, events)."""
    from replayscope.contract.events_file import read_events_file
    paths = [events] if events.exists() else []
    paths += sorted(events.parent.glob(f"{events.name}-pid*.jsonl"))
    runs = []
    for path in paths:
        read = read_events_file(path)
        runs.append((read.run, read.events))
    return runs


def busy_run(events: Path, what: str) -> tuple[dict, list[dict]]:
    """The one traced run that captured graphs or ran steps (``what`` names it in the error)."""
    busy = [(run, evs) for run, evs in traced_runs(events) if any(e["kind"] in ("step", "capture") for e in evs)]
    if len(busy) != 1:
        raise AssertionError(f"expected one {what} run in {events}, found {len(busy)}")
    return busy[0]


def record(out: Path, recorder: Path, recorder_env: dict, run_offline: Callable[..., EngineRun],
           run_serve: Callable[..., EngineRun], prefix: str = "") -> list[dict]:
    """The model in ``out``/model, the ``recorder`` program's run (``recorder.log``), then the
    engine's runs ``{prefix}offline`` (untraced), ``{prefix}offline-traced`` and ``{prefix}serve-traced``
    (each one's summary, or the error that ended it, printed as it ends); all of them into
    ``summary.json``."""
    model = make_model(out / "model")
    runners = (lambda: run_offline(model, out, f"{prefix}offline", False),
               lambda: run_offline(model, out, f"{prefix}offline-traced", True),
               lambda: run_serve(model, out, f"{prefix}serve-traced", True))
    results = []
    completed = subprocess.run([sys.executable, str(recorder), str(model), str(out / "recorded.jsonl")],
                               capture_output=True, text=True, env=recorder_env, timeout=400, cwd=out)
    (out / "recorder.log").write_text(completed.stdout + completed.stderr)
    results.append({"name": "recorder", "returncode": completed.returncode})
    for runner in runners:
        try:
            results.append(runner().summary())
        except Exception as error:  # noqa: BLE001
            results.append({"error": repr(error)})
        print(json.dumps(results[-1], default=str)[:1500], flush=True)
    (out / "summary.json").write_text(json.dumps(results, indent=1, default=str))
    return results


def main(record_runs: Callable[[Path], list[dict]], usage: str) -> None:
    """``python -m benchmarks.<engine>_harness record OUT_DIR``; anything else exits with ``usage``."""
    if len(sys.argv) == 3 and sys.argv[1] == "record":
        record_runs(Path(sys.argv[2]))
    else:
        sys.exit(usage)
