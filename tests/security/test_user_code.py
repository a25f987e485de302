"""Our child processes never import from the user's working directory. The audit: in a folder
with its own ``app/`` package (common in FastAPI projects), ``replayscope demo`` crash-looped
(its runner child ran ``python -m replayscope`` with the working directory importable:
``cannot import name '__version__' from 'app'``, nine times) and exited 0, and a ``timeit.py``
in that folder was executed by the child. Here the installed ``replayscope`` (a virtualenv
made with ``pip install .``, torch from the system) runs the demo in such a folder."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.install.test_fresh_venv import copy_source
from tests.live_server import free_port

USER_APP = """import pathlib
pathlib.Path(__file__).resolve().parent.parent.joinpath("USER-APP-IMPORTED").write_text("the user's app/ ran")
"""
USER_TIMEIT = """import pathlib
pathlib.Path(__file__).resolve().parent.joinpath("USER-TIMEIT-RAN").write_text("the user's timeit.py ran")
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """``replayscope`` installed (not editable) into a virtualenv that sees the system's torch."""
    tmp = tmp_path_factory.mktemp("installed")
    source, env_dir = tmp / "src", tmp / "venv"
    copy_source(source)
    # Without a pip of its own: the system's pip builds it, with the system's setuptools when
    # that can build a wheel by itself (offline), else in pip's isolated build environment.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)],
                   check=True, timeout=300)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps"]
    done = subprocess.run(pip + ["--no-build-isolation", str(source)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        done = subprocess.run(pip + [str(source)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return env_dir / "bin"


def user_project(root: Path) -> Path:
    (root / "app").mkdir(parents=True)
    (root / "app" / "__init__.py").write_text(USER_APP)
    (root / "timeit.py").write_text(USER_TIMEIT)
    return root


def test_the_demo_in_a_project_with_its_own_app_package_runs_none_of_its_code(installed, tmp_path):
    project = user_project(tmp_path / "my-fastapi-project")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONSAFEPATH")}
    env["PATH"] = f"{installed}{os.pathsep}{env['PATH']}"
    env["OMP_NUM_THREADS"] = "1"
    whose = subprocess.run([str(installed / "python"), "-c", "import replayscope, sys; print(replayscope.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert str(installed.parent) in whose.stdout, f"the venv's own replayscope: {whose.stdout}{whose.stderr}"
    port = free_port()
    done = subprocess.run([str(installed / "replayscope"), "demo", "--port", str(port), "--duration", "25"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert not (project / "USER-APP-IMPORTED").exists(), "the user's app/ package was imported"
    assert not (project / "USER-TIMEIT-RAN").exists(), "the user's timeit.py was run"
    assert "cannot import name" not in done.stderr
    with sqlite3.connect(project / "replayscope-demo.db") as conn:
        [(name, steps)] = conn.execute(
            "SELECT r.name, sum(s.steps) FROM runs r JOIN step_rollups s ON s.run_pk = r.id AND s.bucket_s = 0 "
            "GROUP BY r.id").fetchall()
    assert name == "demo" and steps > 0, "the runner streamed into the demo's store"


def test_a_runner_that_keeps_failing_stops_the_demo_with_a_nonzero_exit(tmp_path, monkeypatch, capsys):
    import argparse

    from replayscope.app.cli import serve as commands

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(commands._Demo, "runner_command",
                        lambda self, url, seconds: [sys.executable, "-c", "raise SystemExit(3)"])
    args = argparse.Namespace(db=None, port=free_port(), duration=60.0, log_level="warning")
    assert commands._Demo(args).run() == 1
    assert "the runner exited with code 3 (see above); stopping" in capsys.readouterr().err
