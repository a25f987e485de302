"""``replayscope trace``: run a command unmodified, with the tracer started in its Python processes.

This side imports no torch: it prepares a temporary folder (a ``sitecustomize.py`` that starts
the tracer, and a link to replayscope's ``runner`` package), puts the folder first on the
command's ``PYTHONPATH`` with the trace's settings in the environment, runs the command, waits
for it, and prints what each traced process recorded. Processes started by the command
inherit the environment, so they are traced too; nothing outside the command is touched.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import replayscope
from replayscope.contract.errors import EXIT_INCOMPLETE, ReplayscopeError
from replayscope.contract.formats import plural
from replayscope.runner.compiled import ENV_PURE_PYTHON
from replayscope.runner.timing import CUDA_TIME_EVERY
from replayscope.runner.trace import supervision
from replayscope.runner.trace.outside import OutsideEnds, read_registry, registry_records
from replayscope.runner.trace.settings import STEP_SPEC, TraceSettings

RUNNER_PACKAGE = Path(__file__).resolve().parent.parent
# the package the traced processes import (in a checkout its __init__ adds the checkout's folders)
REPLAYSCOPE_PACKAGE = Path(replayscope.__file__).resolve().parent


def check_arguments(command: list[str], collector: str | None, events: str | None, step: str | None,
                    time_every: int = CUDA_TIME_EVERY) -> None:
    """Every argument checked before anything runs or is written."""
    if not command:
        raise ReplayscopeError("give the command to trace after --, e.g. "
                               "replayscope trace --events trace.jsonl -- python generate.py")
    if (collector is None) == (events is None):
        raise ReplayscopeError("give one of --collector URL or --events FILE")
    if collector is not None and not collector.startswith(("http://", "https://")):
        raise ReplayscopeError(f"--collector {collector!r} is not an http(s) URL")
    if events is not None:
        if os.path.isdir(events):
            raise ReplayscopeError(f"--events {events} is a directory")
        if not os.path.isdir(os.path.dirname(os.path.abspath(events))):
            raise ReplayscopeError(f"--events {events}: its directory does not exist")
    if time_every < 1:
        raise ReplayscopeError(f"--time-every must be at least 1, got {time_every}")
    pure = os.environ.get(ENV_PURE_PYTHON, "")
    if pure not in ("", "0", "1"):
        raise ReplayscopeError(f"{ENV_PURE_PYTHON}={pure!r}: set it to 1 to trace with the Python step core, "
                               f"or to 0 or nothing for the compiled one")
    if step is not None and not STEP_SPEC.match(step):
        raise ReplayscopeError(f"--step {step!r}: name the step function as MODULE:QUALNAME, e.g. "
                               f"mypkg.engine:Engine.decode_step (or __main__:step for a script)")


def prepare_workdir(workdir: str) -> tuple[str, str]:
    """The folder put on PYTHONPATH (holding sitecustomize.py) and the folder holding only the
    ``replayscope`` package (a link to it; a copy laid out as installed where links fail)."""
    boot = os.path.join(workdir, "boot")
    lib = os.path.join(workdir, "lib")
    os.makedirs(boot)
    os.makedirs(lib)
    shutil.copyfile(RUNNER_PACKAGE / "trace" / "_boot.py", os.path.join(boot, "sitecustomize.py"))
    package = os.path.join(lib, "replayscope")
    try:
        os.symlink(REPLAYSCOPE_PACKAGE, package, target_is_directory=True)
    except OSError:
        skip = shutil.ignore_patterns("__pycache__")
        shutil.copytree(REPLAYSCOPE_PACKAGE, package, ignore=skip)
        if not os.path.isdir(os.path.join(package, "runner")):     # a source checkout's folders
            shutil.copytree(RUNNER_PACKAGE, os.path.join(package, "runner"), ignore=skip)
    return boot, lib


def child_environment(settings: TraceSettings, boot: str, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update(settings.environment())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (boot, env.get("PYTHONPATH", "")) if p)
    return env


def default_name(command: list[str]) -> str:
    return shlex.join(command)[:160]


def run_traced(command: list[str], *, collector: str | None = None, events: str | None = None,
               token: str | None = None, name: str | None = None, step: str | None = None,
               time_every: int = CUDA_TIME_EVERY, out=sys.stderr) -> int:
    """Run ``command`` traced; returns its exit status (128 + N when a signal N ended it)."""
    if command and command[0] == "--":
        command = command[1:]
    check_arguments(command, collector, events, step, time_every)
    workdir = tempfile.mkdtemp(prefix="replayscope-trace-")
    try:
        boot, lib = prepare_workdir(workdir)
        events_path = os.path.abspath(events) if events else None
        if events_path and os.path.exists(events_path):
            os.remove(events_path)        # the trace writes it anew, as `replayscope run --events` does
        settings = TraceSettings(trace_id=uuid.uuid4().hex[:12], name=name or default_name(command),
                                 command=tuple(command), events=events_path, collector=collector,
                                 token=token, step=step, lib=lib, workdir=workdir, parent_pid=os.getpid(),
                                 time_every=time_every)
        code = _run(command, child_environment(settings, boot),
                    OutsideEnds(workdir, collector=collector, token=token))
        runs = read_registry(workdir)
        incomplete = incomplete_line(runs)
        lines = summary_lines(runs, collector) + step_target_lines(workdir, step)
        for line in lines + ([incomplete] if incomplete else []):
            print(line, file=out)
        return EXIT_INCOMPLETE if code == 0 and incomplete else code
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run(command: list[str], env: dict[str, str], ends: OutsideEnds) -> int:
    try:
        child, own_group = supervision.start(command, env)
    except FileNotFoundError:
        raise ReplayscopeError(f"command not found: {command[0]}") from None
    except PermissionError:
        raise ReplayscopeError(f"cannot run {command[0]}: permission denied") from None
    code = supervision.wait(child, own_group, watch=lambda: ends.end_gone(waiting_for=child.pid),
                            received=ends.command_signalled)
    ends.end_gone({child.pid: code}, final=True)
    return 128 - code if code < 0 else code


def step_target_lines(workdir: str, step: str | None) -> list[str]:
    """An error line when ``--step`` named a function no traced process found (a typo in the
    module or the function): why, per distinct reason. Nothing when one process found it."""
    if step is None:
        return []
    reports = [r for r in registry_records(workdir) if r.get("event") == "step_target"]
    if any(r.get("found") for r in reports):
        return []
    whys = list(dict.fromkeys(r["why"] for r in reports if r.get("why"))) or \
        [f"--step {step}: no traced process reached it"]
    return [f"replayscope trace: error: {'; '.join(whys)}; no steps were recorded through --step "
            f"(check the MODULE:QUALNAME; the program's exit status is its own)"]


def summary_lines(runs: dict[str, dict], collector: str | None) -> list[str]:
    """One line per traced process that recorded something, from the processes' registry."""
    if not runs:
        return ["replayscope trace: no process of the command captured a CUDA graph, ran a step or "
                "compiled (is it a Python program using PyTorch? see docs/trace.md)"]
    where = f"collector {collector}" if collector else "events files"
    lines = [f"replayscope trace: {len(runs)} traced process{'es' if len(runs) > 1 else ''} ({where}):"]
    for run_id, run in runs.items():
        lines.append(f"  {run_id} ({run.get('process', '?')}): " + _run_text(run, collector))
    return lines


def _run_text(run: dict, collector: str | None) -> str:
    where = f"; {run['target']}" if not collector and run.get("target") else ""
    if "status" not in run:
        return "still running: its process outlived the command" + where
    if run.get("ended_by") == "trace":
        return (f"{_trace_counts_text(run)}{run['status']}: {run.get('error') or run.get('note')}"
                + _losses(run) + where)
    return _counts_text(run) + _losses(run) + where


def _trace_counts_text(run: dict) -> str:
    """A run the trace ended: what its events file or the collector holds, or why that is unknown."""
    if "steps" in run:
        return f"{_counts_text(run)}; "
    if run.get("counts_unavailable"):
        return f"counts not available: {run['counts_unavailable']}; "
    return ""


def _counts_text(run: dict) -> str:
    modes = run.get("modes") or {}
    reasons = ", ".join(f"{r} {n}" for r, n in sorted((run.get("reasons") or {}).items(),
                                                      key=lambda item: -item[1]))
    return (f"{plural(run.get('steps', 0), 'step')}: graph {modes.get('graph', 0)}, padded {modes.get('padded', 0)}, "
            f"eager {modes.get('eager', 0)}"
            + (f" (eager: {reasons})" if reasons else "")
            + f"; {run.get('captures', 0)} captures"
            + (f", {run['failed_captures']} failed" if run.get("failed_captures") else ""))


def _losses(run: dict) -> str:
    lost, unsent = run.get("lost") or 0, run.get("unsent") or 0
    return ((f"; {plural(lost, 'event')} lost (not written or sent)" if lost else "")
            + (f"; {plural(unsent, 'event')} not sent, kept in {run.get('spool')}" if unsent else ""))


def incomplete_line(runs: dict[str, dict]) -> str | None:
    """What did not get where it was going, when something did not: the summary's last line."""
    lost = sum(run.get("lost") or 0 for run in runs.values())
    unsent = sum(run.get("unsent") or 0 for run in runs.values())
    if not lost and not unsent:
        return None
    spools = " ".join(shlex.quote(run["spool"]) for run in runs.values() if run.get("unsent") and run.get("spool"))
    parts = ([f"{plural(lost, 'event')} lost"] if lost else []) + \
        ([f"{plural(unsent, 'event')} not sent (re-send them with `replayscope import events {spools}`)"]
         if unsent else [])
    return "replayscope trace: incomplete: " + "; ".join(parts)
