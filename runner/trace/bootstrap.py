"""Start tracing in this process: the settings from the environment, the tracer, and the hooks.

Called by the ``sitecustomize`` that ``replayscope trace`` puts on the ``PYTHONPATH`` of the
command it runs, so it runs in every Python process of that command (the program, its
``multiprocessing`` workers whether spawned, forked or forkserver'd, its subprocesses).
Nothing is imported from torch here: the hooks wait for their modules (see ``imports``).
Everything the tracer needs is imported with this module, while ``REPLAYSCOPE_TRACE_LIB`` is on
``sys.path`` (``_boot``); every name of ours is under ``replayscope``, so nothing is hidden.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from typing import Any

from replayscope.runner.trace import exits
from replayscope.runner.trace.graph_trees import GRAPH_TREE_HOOKS
from replayscope.runner.trace.hooks import TORCH_HOOKS, Patches
from replayscope.runner.trace.imports import PostImportHooks
from replayscope.runner.trace.recipes import RECIPES, catch_main_step, wrap_step_function
from replayscope.runner.trace.sglang_recipes import RECIPES as SGLANG_RECIPES
from replayscope.runner.trace.vllm_recipes import RECIPES as VLLM_RECIPES
from replayscope.runner.trace.settings import ENV_STEP, ENV_TIMINGS, TraceSettings
from replayscope.runner.trace.tracer import Tracer

ACTIVE: Tracer | None = None


def main_module_name() -> str | None:
    """The name the program's main module would have if imported (``python -m m`` or ``m.py``)."""
    argv = list(getattr(sys, "orig_argv", []) or [])
    for i, arg in enumerate(argv[1:], start=1):
        if arg == "-m" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:]
        if arg == "-c":
            return None
        if not arg.startswith("-"):
            stem = os.path.splitext(os.path.basename(arg))[0]
            return stem if arg.endswith(".py") else None
    return None


def say_timing(what: str, seconds: float) -> None:
    """One line of the tracer's own start-up work on stderr (with ``REPLAYSCOPE_TRACE_TIMINGS=1``):
    the wall-clock time, to line it up with the program's log, and how long it took."""
    if os.environ.get(ENV_TIMINGS) != "1":
        return
    now = time.time()
    clock = time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
    sys.stderr.write(f"replayscope trace timings: pid {os.getpid()} {clock} {what} took {seconds * 1e3:.1f} ms\n")


def install(settings: TraceSettings, *, make_sink: Any = None) -> tuple[Tracer, PostImportHooks, Patches]:
    """The tracer of this process with every hook registered (installed as modules load)."""
    tracer = Tracer(settings, make_sink=make_sink)
    patches = Patches()
    timed = (lambda name, seconds: say_timing(f"the hooks on {name}", seconds)) \
        if os.environ.get(ENV_TIMINGS) == "1" else None
    hooks = PostImportHooks(on_error=lambda name, error: tracer.hook_error(name, error), on_timed=timed)
    for name, installer in {**TORCH_HOOKS, **GRAPH_TREE_HOOKS, **RECIPES, **SGLANG_RECIPES, **VLLM_RECIPES}.items():
        hooks.watch(name, lambda module, installer=installer: installer(tracer, module, patches))
    if settings.step:
        module_name, qualname = settings.step.split(":", 1)
        if module_name != "__main__" and module_name == main_module_name():
            # The program runs that module as its script: for this process and the ones it
            # starts (whose main module is then __mp_main__ or another script), it is __main__.
            os.environ[ENV_STEP] = f"__main__:{qualname}"
            module_name = "__main__"
        tracer.step_unreached = (f"no function {qualname} was called in the program's script"
                                 if module_name == "__main__" else f"the program never imported {module_name}")
        if module_name == "__main__":
            catch_main_step(tracer, qualname, patches, settings.step)
        if module_name != "__main__":
            hooks.watch(module_name, lambda module: wrap_step_function(tracer, module, qualname, patches,
                                                                      settings.step))
    hooks.install()
    return tracer, hooks, patches


def install_from_environment() -> Tracer | None:
    """Trace this process if ``replayscope trace`` started it; else do nothing at all."""
    global ACTIVE
    settings = TraceSettings.from_environment()
    if settings is None or ACTIVE is not None:
        return ACTIVE
    tracer, _hooks, _patches = install(settings)
    ACTIVE = tracer
    atexit.register(exits.end_run, tracer)
    exits.watch_uncaught(tracer)
    exits.end_run_before_os_exit(tracer)
    exits.end_run_on_sigterm(tracer)
    exits.flush_before_the_programs_signal_handlers(tracer)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=tracer.after_fork_in_child)
    _hooks.watch("multiprocessing.util", lambda util: exits.end_runs_of_multiprocessing_workers(tracer, util))
    return tracer
