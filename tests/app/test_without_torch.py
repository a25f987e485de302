"""Without torch (``pip install replayscope``, no extras) every command but ``run`` and
``demo`` works, and those two say in one line which extra to install.

Each case runs the real command line in a subprocess whose import system refuses torch
and reports every attempt, so an import that something swallows is caught too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.live_server import free_port

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "importers" / "fixtures"
TRIED = "TRIED TO IMPORT TORCH"

BLOCKED = f"""
import runpy, sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            print({TRIED!r}, name, file=sys.stderr, flush=True)
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NoTorch())
sys.argv = ["replayscope", *sys.argv[1:]]
runpy.run_module("replayscope.app.cli", run_name="__main__", alter_sys=True)
"""


def replayscope(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKED, *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_help_and_every_subcommands_help_need_no_torch():
    for argv in (["--help"], ["--version"], ["serve", "--help"], ["import", "vllm", "--help"],
                 ["db", "upgrade", "--help"], ["advise", "--help"], ["run", "--help"]):
        done = replayscope(*argv)
        assert done.returncode == 0, (argv, done.stderr)
        assert TRIED not in done.stderr, argv


def test_db_upgrade_needs_no_torch(tmp_path):
    done = replayscope("db", "upgrade", "--db", f"sqlite:///{tmp_path / 'store.db'}")
    assert done.returncode == 0, done.stderr
    assert TRIED not in done.stderr and "upgraded" in done.stdout


def test_import_needs_no_torch(tmp_path):
    done = replayscope("import", "vllm", str(FIXTURES / "vllm_new.log"), "--db", f"sqlite:///{tmp_path / 'store.db'}")
    assert done.returncode == 0, done.stderr
    assert TRIED not in done.stderr and "written to" in done.stdout


def test_serve_starts_and_answers_healthz_without_torch(tmp_path):
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", BLOCKED, "serve", "--port", str(port),
                               "--db", f"sqlite:///{tmp_path / 'store.db'}"],
                              cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        health = None
        deadline = time.monotonic() + 60
        while health is None and time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                    health = json.loads(response.read())
            except OSError:
                time.sleep(0.1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
            assert response.status == 200                      # the dashboard is served too
    finally:
        server.terminate()
        _out, err = server.communicate(timeout=30)
    assert health == {"status": "ok", "db": "sqlite"}, err
    assert TRIED not in err


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    """stderr without the blocker's own reports (run and demo are expected to try torch)."""
    return [line for line in done.stderr.splitlines() if not line.startswith(TRIED)]


def test_run_without_torch_names_the_extra_in_one_line(tmp_path):
    done = replayscope("run", "--steps", "1", "--events", str(tmp_path / "run.jsonl"))
    assert done.returncode == 2
    [line] = error_lines(done)
    assert line.startswith("replayscope run: error: ") and "pip install 'replayscope[runner]'" in line
    assert not (tmp_path / "run.jsonl").exists()


def test_demo_without_torch_names_the_extra_in_one_line(tmp_path):
    done = replayscope("demo", "--port", str(free_port()), "--db", f"sqlite:///{tmp_path / 'demo.db'}")
    assert done.returncode == 2
    [line] = error_lines(done)
    assert line.startswith("replayscope demo: error: ") and "pip install 'replayscope[runner]'" in line
    assert not (tmp_path / "demo.db").exists()
