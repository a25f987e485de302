"""A stock install works: a fresh virtualenv, ``pip install .`` with no extras, and the
installed ``replayscope`` command driven the way a new user drives it. A rule fires and a
local webhook receiver gets the notification; ``import``, ``scrape`` and ``advise`` work.

Nothing from the test environment leaks in (no PYTHONPATH, no system site-packages, the
source copied out of the repository). The base install has no torch (``replayscope[runner]``
adds it): the test proves every one of these paths runs without it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from tests.live_server import free_port, wait_answering
from tests.receiver import LOOPBACK_ALLOW, Receiver
from tests.stub_server import QuietHandler, start_server, stop_server

pytestmark = pytest.mark.venv

REPO = Path(__file__).resolve().parents[2]
TOKEN = "venv-token"
FIXTURES = REPO / "tests" / "importers" / "fixtures"
T0 = time.time() - 600


def base_dependencies() -> list[str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]


def copy_source(dest: Path) -> None:
    """The files git would ship (tracked, and new ones not ignored), without build leftovers;
    without git, the tree less caches and build output."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                            capture_output=True) if shutil.which("git") else None
    if listed is None or listed.returncode != 0:
        shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__",
                                                                  "*.db", ".venv*"))
        return
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def run(command: list[str], env: dict, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("venv")
    source, env_dir = tmp / "src", tmp / "venv"
    copy_source(source)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True, timeout=300)
    bin_dir = env_dir / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(source)], env, tmp, timeout=900)
    print(f"fresh venv with `pip install .` in {time.monotonic() - started:.0f}s", file=sys.stderr)
    yield {"bin": bin_dir, "env": env, "tmp": tmp}


def http(method: str, url: str, payload=None, token: str | None = TOKEN):
    request = urllib.request.Request(url, method=method, data=None if payload is None else json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {token}"} if token else {})})
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
        return json.loads(raw) if raw else None


@pytest.fixture(scope="module")
def served(venv):
    """``replayscope serve`` from the venv, with a webhook receiver as its default receiver."""
    tmp, bin_dir = venv["tmp"], venv["bin"]
    db = f"sqlite:///{tmp / 'store.db'}"
    run([str(bin_dir / "replayscope"), "db", "upgrade", "--db", db], venv["env"], tmp)
    receiver = Receiver().start()
    port = free_port()
    env = {**venv["env"], "REPLAYSCOPE_TOKEN": TOKEN, "REPLAYSCOPE_ALERT_WEBHOOK": receiver.url,
           "REPLAYSCOPE_WEBHOOK_ALLOW": LOOPBACK_ALLOW,
           "REPLAYSCOPE_EVALUATE_EVERY_S": "0.5", "REPLAYSCOPE_NOTIFY_EVERY_S": "0.2",
           "REPLAYSCOPE_EXTERNAL_URL": f"http://127.0.0.1:{port}"}
    log = open(tmp / "serve.log", "wb")
    proc = subprocess.Popen([str(bin_dir / "replayscope"), "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--db", db], env=env, cwd=tmp, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_answering(url + "/healthz", proc, 120, "replayscope serve",
                       exited=lambda: (tmp / "serve.log").read_text()[-3000:], interval_s=0.2)
        yield {**venv, "url": url, "db": db, "receiver": receiver}
    finally:
        proc.terminate()
        proc.wait(20)
        receiver.stop()
        log.close()


def steps(seq0: int, n: int, eager: bool) -> list[dict]:
    return [{"seq": seq0 + i, "ts": T0 + i * 0.1, "kind": "step", "stage": "decode",
             "mode": "eager" if eager and i % 2 else "graph", "raw_bs": 8, "graph_bs": None if eager and i % 2 else 8,
             "num_tokens": 8, "padded_tokens": 0, "reason": "batch_too_large" if eager and i % 2 else None,
             "duration_s": 0.001} for i in range(n)]


def test_the_base_install_has_no_torch(venv):
    assert not [d for d in base_dependencies() if d.replace(" ", "").lower().startswith("torch")]
    probe = subprocess.run([str(venv["bin"] / "python"), "-c", "import torch"], env=venv["env"],
                           capture_output=True, text=True)
    assert probe.returncode != 0, "the base install pulled torch in"


def test_a_rule_fires_and_the_webhook_receiver_gets_the_notification(served):
    url = served["url"]
    http("POST", url + "/v1/alert-rules", {"name": "venv-rule", "threshold": 0.3, "window_s": 60, "min_steps": 20,
                                          "for_s": 0})
    http("POST", url + "/v1/runs", {"run_id": "venv-run", "name": "venv run", "source": "runner",
                                    "started_at": T0, "backend": "static", "model": "tiny", "device": "cpu"})
    http("POST", url + "/v1/runs/venv-run/events", {"events": steps(0, 400, eager=True)})
    deadline = time.monotonic() + 60
    while not served["receiver"].received and time.monotonic() < deadline:
        time.sleep(0.2)
    [payload] = served["receiver"].received
    [alert] = payload["alerts"]
    assert payload["status"] == "firing" and alert["labels"]["run_id"] == "venv-run"
    assert alert["generatorURL"] == f"{url}/run/venv-run"


def test_import_events_and_a_vllm_log_through_the_collector(served):
    bin_dir, tmp, env = served["bin"], served["tmp"], served["env"]
    events = tmp / "events.jsonl"
    record = {"kind": "run", "run_id": "file-run", "name": "from a file", "source": "runner", "started_at": T0,
              "backend": "static", "model": "tiny", "device": "cpu"}
    events.write_text("\n".join(json.dumps(e) for e in [record] + steps(0, 50, eager=False)) + "\n")
    target = ["--collector", served["url"], "--token", TOKEN]
    out = run([str(bin_dir / "replayscope"), "import", "events", str(events), *target], env, tmp).stdout
    assert "50 events new" in out
    out = run([str(bin_dir / "replayscope"), "import", "vllm", str(FIXTURES / "vllm_cudagraph_metrics.log"),
               *target], env, tmp).stdout
    assert "written to collector" in out
    runs = http("GET", served["url"] + "/v1/runs", token=None)
    assert {"file-run"} <= {r["run_id"] for r in runs} and any(r["source"] == "vllm-log" for r in runs)


def test_scrape_an_sglang_metrics_endpoint_into_the_collector(served):
    passes = {"n": 0}

    class Metrics(QuietHandler):
        def do_GET(self):
            passes["n"] += 100
            body = ("# HELP sglang:cuda_graph_passes_total Forward passes by CUDA-graph mode\n"
                    "# TYPE sglang:cuda_graph_passes_total counter\n"
                    f'sglang:cuda_graph_passes_total{{mode="decode_cuda_graph",model_name="m"}} {passes["n"]}\n'
                    f'sglang:cuda_graph_passes_total{{mode="decode_none",model_name="m"}} {passes["n"] // 10}\n')
            self.answer(200, body.encode(), "text/plain; version=0.0.4")

    server = start_server(Metrics)
    try:
        metrics_url = f"http://127.0.0.1:{server.server_port}/metrics"
        out = run([str(served["bin"] / "replayscope"), "scrape", metrics_url, "--count", "3", "--interval", "0.2",
                   "--collector", served["url"], "--token", TOKEN], served["env"], served["tmp"]).stdout
    finally:
        stop_server(server)
    assert "poll 3" in out
    runs = http("GET", served["url"] + "/v1/runs", token=None)
    assert any(r["source"] == "sglang-metrics" and r["steps"] > 0 for r in runs)


def test_advise_on_a_stored_run_and_through_the_collector(served):
    replayscope = str(served["bin"] / "replayscope")
    out = run([replayscope, "advise", "venv-run", "--db", served["db"], "--budget", "2"],
              served["env"], served["tmp"]).stdout
    assert out.startswith("Capture sizes for venv-run (") and "budget 2 graphs (given), 1 used" in out
    proposed = next(line for line in out.splitlines() if line.strip().startswith("proposed"))
    assert proposed.split()[1] == "8", "every step had batch size 8: one graph of 8 covers them"
    assert "Validity:" in out and "Flags:" in out
    through = run([replayscope, "advise", "venv-run", "--collector", served["url"], "--token", TOKEN, "--budget", "2"],
                  served["env"], served["tmp"]).stdout
    assert through == out
