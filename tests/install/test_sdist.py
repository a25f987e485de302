"""The source distribution carries the compiled cores whole (the trace's step core, the runner's
step core): every .c and .h file of the checkout is in it (the headers too, which no Extension
source names), and a wheel built from it alone — as pip builds one from PyPI's sdist — compiles
cores that load."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.install.test_fresh_venv import copy_source

REPO = Path(__file__).resolve().parents[2]
HEADERS = Path(sysconfig.get_paths()["include"]) / "Python.h"
CORE_LOADS = """import importlib, replayscope, sys
print(replayscope.__file__)
from replayscope.runner import runner_core
from replayscope.runner.trace import step_core
for core in (step_core, runner_core):
    importlib.import_module(core.COMPILED_MODULE)      # raises with the reason where it does not load
sys.exit(0 if step_core.CORE == runner_core.CORE == "compiled" else 1)
"""


def _checkout_c_files() -> set[str]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z", "--", "*.c", "*.h"], cwd=REPO,
                            capture_output=True, check=True)
    return {name for name in listed.stdout.decode().split("\0") if name}


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("sdist")
    copy_source(tmp / "src")
    done = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
                           "print(b.build_sdist(sys.argv[1]))", str(tmp / "dist")], cwd=tmp / "src",
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    [built] = (tmp / "dist").glob("replayscope-*.tar.gz")
    return built


@pytest.mark.skipif(shutil.which("git") is None, reason="no git: the checkout's files are not listed")
def test_the_sdist_carries_every_c_and_h_file(sdist):
    with tarfile.open(sdist) as archive:
        inside = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    expected = _checkout_c_files()
    assert {"runner/trace/_stepcore.h", "runner/_runcore.h"} <= expected
    assert not expected - inside, f"not in the sdist: {sorted(expected - inside)}"


@pytest.mark.skipif(shutil.which("gcc") is None or not HEADERS.is_file(), reason="no gcc or Python headers here")
def test_a_wheel_built_from_the_sdist_runs_the_compiled_core(sdist, tmp_path):
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path / "dist"), str(sdist)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("replayscope-*.whl")
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "REPLAYSCOPE_PURE_PYTHON")},
           "PYTHONPATH": str(tmp_path / "site")}
    ran = subprocess.run([sys.executable, "-c", CORE_LOADS], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert ran.stdout.startswith(str(tmp_path / "site")), ran.stdout + ran.stderr
    assert ran.returncode == 0, f"the wheel's compiled cores did not load: {ran.stderr[-3000:]}"
