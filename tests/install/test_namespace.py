"""One installed name: the wheel puts only ``replayscope`` into site-packages, and a user's own
``app``, ``runner`` and ``collector`` packages (a FastAPI project's, a serving repo's) neither
break replayscope nor are hidden from the user's program. The wheel is installed into a new
virtualenv that sees the system's dependencies (torch included) but takes replayscope only from
the wheel; every command runs from a folder holding those packages, each of which raises when
imported by anyone but the program that asks for it."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.install.test_fresh_venv import copy_source
from tests.live_server import free_port

pytestmark = pytest.mark.venv

REPO = Path(__file__).resolve().parents[2]
USER_PACKAGE = """import os
if not os.environ.get("USER_PACKAGES_OK"):
    raise ImportError("the user's own {name}/ was imported by someone else")
WHOSE = "user"
"""
TRACED_PROGRAM = """import os
import torch


def step(x):
    return x @ x.T


for _ in range(3):
    print("sum", float(step(torch.ones(4, 3)).sum()))
os.environ["USER_PACKAGES_OK"] = "1"
import app, collector, runner
print("whose:", app.WHOSE, collector.WHOSE, runner.WHOSE)
"""
LIBRARY = """import torch
from replayscope import CapturePlan, GraphRunner, StaticInput, open_emitter
emitter = open_emitter("events.jsonl", name="lib", model="toy", backend="static")
runner = GraphRunner(lambda x: x * 2, [StaticInput("x", (3,), torch.float32)], CapturePlan((1, 2, 4)),
                     backend="static", emitter=emitter, progress=False)
runner.capture()
out = runner.step({"x": torch.ones(3, 3)})
emitter.close("finished")
print("rows", out.shape[0], float(out.sum()))
"""


WHERE = """import os, replayscope, replayscope.runner, replayscope.collector
print(*(os.path.dirname(m.__file__) for m in (replayscope, replayscope.runner, replayscope.collector)),
      len(replayscope.__path__))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    copy_source(source)
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp / "dist")]
    done = subprocess.run(pip + ["--no-build-isolation", str(source)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        done = subprocess.run(pip + [str(source)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    [built] = (tmp / "dist").glob("replayscope-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The venv's bin folder: the wheel installed, the system's site-packages for the rest."""
    env_dir = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)],
                   check=True, timeout=300)
    # --ignore-installed: a replayscope the system has (an editable checkout) is not this wheel
    done = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps",
                           "--ignore-installed", str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return env_dir / "bin"


@pytest.fixture
def project(tmp_path) -> Path:
    """A user's folder with its own ``app``, ``runner`` and ``collector`` packages."""
    root = tmp_path / "my-project"
    for name in ("app", "runner", "collector"):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(USER_PACKAGE.format(name=name))
    return root


@pytest.fixture
def env(installed) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONSAFEPATH", "USER_PACKAGES_OK")}
    env["PATH"] = f"{installed}{os.pathsep}{env['PATH']}"
    env["OMP_NUM_THREADS"] = "1"
    return env


def test_the_wheel_installs_one_top_level_package(wheel):
    tops = {name.split("/", 1)[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"replayscope"}
    names = set(zipfile.ZipFile(wheel).namelist())
    for inside in ("replayscope/runner/graphs.py", "replayscope/collector/ingest.py", "replayscope/app/server.py",
                   "replayscope/contract/wire/schema.py", "replayscope/migrations/env.py",
                   "replayscope/migrations/alembic.ini", "replayscope/migrations/script.py.mako"):
        assert inside in names, inside
    assert any(n.startswith("replayscope/app/assets/") for n in names), "the dashboard's assets"
    if shutil.which("gcc") and (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        assert any(re.match(r"replayscope/runner/trace/_stepcore\..*(so|pyd)$", n) for n in names), \
            "the compiled step core, built where a C compiler and Python's headers are"
        assert any(re.match(r"replayscope/runner/_runcore\..*(so|pyd)$", n) for n in names), \
            "the compiled runner core, built where a C compiler and Python's headers are"
        assert any(re.match(r"replayscope/runner/_recordcore\..*(so|pyd)$", n) for n in names), \
            "the emitter's compiled recorder, likewise"
    assert any(re.match(r"replayscope/migrations/versions/\w+\.py$", n) for n in names), "the migrations"
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    [command] = re.findall(r"^replayscope = ([\w.]+):main$", zipfile.ZipFile(wheel).read(entry_points).decode(), re.M)
    module = command.replace(".", "/")
    assert command.startswith("replayscope.app.") and ({f"{module}.py", f"{module}/__init__.py"} & names), command


def test_every_package_folder_is_in_the_wheel_list():
    """pyproject lists the packages (package-dir maps the folders under replayscope): a new
    subpackage missing from the list would be left out of the wheel."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {"replayscope." + ".".join(init.parent.relative_to(REPO).parts)
               for top in ("runner", "collector", "app", "migrations") for init in (REPO / top).rglob("__init__.py")}
    folders |= {".".join(init.parent.relative_to(REPO).parts) for init in (REPO / "replayscope").rglob("__init__.py")}
    assert folders <= listed, sorted(folders - listed)


def test_the_library_imports_from_replayscope_beside_the_users_packages(installed, project, env):
    done = subprocess.run([str(installed / "python"), "-c", LIBRARY], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows 3 18.0" in done.stdout
    whose = subprocess.run([str(installed / "python"), "-c", WHERE], cwd=project, env=env,
                           capture_output=True, text=True, timeout=60)
    package = whose.stdout.split()[0]
    assert package.startswith(str(installed.parent)), "replayscope from the wheel, nowhere else"
    assert whose.stdout.split() == [package, f"{package}/runner", f"{package}/collector", "1"], \
        "installed, the subpackages are inside the package and its __path__ is its own folder only"
    events = [json.loads(line) for line in (project / "events.jsonl").read_text().splitlines()]
    assert events[0]["name"] == "lib" and any(e.get("kind") == "step" for e in events[1:])


def test_trace_runs_the_users_program_with_its_own_packages(wheel, installed, project, env):
    (project / "prog.py").write_text(TRACED_PROGRAM)
    command = [str(installed / "replayscope"), "trace", "--events", "traced.jsonl", "--step", "__main__:step",
               "--", str(installed / "python"), "prog.py"]
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "whose: user user user" in done.stdout, "the program got its own app, collector and runner"
    assert "not tracing" not in done.stderr, done.stderr[-2000:]
    lines = [json.loads(line) for line in (project / "traced.jsonl").read_text().splitlines()]
    assert lines[0]["source"] == "trace", "the traced process recorded its run"
    assert sum(line.get("kind") == "step" for line in lines) == 3, "and its three steps"
    compiled = any(re.match(r"replayscope/runner/trace/_stepcore\..*(so|pyd)$", n)
                   for n in zipfile.ZipFile(wheel).namelist())
    assert lines[0]["config"]["trace"]["step_core"] == ("compiled" if compiled else "python")


def test_the_demo_runs_beside_the_users_packages(installed, project, env):
    done = subprocess.run([str(installed / "replayscope"), "demo", "--port", str(free_port()), "--duration", "8"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    with sqlite3.connect(project / "replayscope-demo.db") as conn:
        [(steps,)] = conn.execute("SELECT sum(steps) FROM step_rollups WHERE bucket_s = 0").fetchall()
    assert steps and steps > 0, "the demo's runner streamed steps into its store"


def test_in_a_checkout_replayscope_is_the_checkouts_folders(tmp_path):
    """From the source tree (PYTHONPATH=checkout), replayscope's subpackages are the folders
    beside replayscope/, whatever an editable install of another checkout maps."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    env["PYTHONPATH"] = str(REPO)
    whose = subprocess.run([sys.executable, "-c", WHERE], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=60)
    assert whose.stdout.split() == [str(REPO / "replayscope"), str(REPO / "runner"), str(REPO / "collector"), "2"], \
        whose.stdout + whose.stderr
