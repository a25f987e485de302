"""Which core a graph runner's step runs: the compiled one (``_runcore``, built from ``_runcore*.c``
beside this file when the package was installed with a C compiler, or with ``python3 setup.py
build_ext --inplace``) or the Python one (``GraphRunner.step`` and ``_run``, the reference). Both
make the same outputs, events and counts; the compiled one does a plain step of a route seen
before at a fraction of the host time (docs/internals.md). ``REPLAYSCOPE_PURE_PYTHON=1`` forces
the Python core.

``RunnerState`` is what ``GraphRunner`` inherits: with the compiled core built, ``_runcore``'s
struct of the fields a step reads (one place for each, whichever core a runner runs); without it,
a plain base, the fields then the runner's ordinary attributes.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Callable, Mapping

import torch

from replayscope.contract.errors import ReplayscopeError
from replayscope.runner.compiled import load_compiled
from replayscope.runner.fit_checks import fit_check_maker
from replayscope.runner.routes import Route, slice_rows

COMPILED_MODULE = "replayscope.runner._runcore"


def load(environ: Mapping[str, str] = os.environ,
         import_module: Callable[[str], ModuleType] = importlib.import_module) -> ModuleType | None:
    """The compiled core, configured; None when ``REPLAYSCOPE_PURE_PYTHON=1`` or it was not built."""
    module = load_compiled(COMPILED_MODULE, environ, import_module)
    if module is not None:
        configure(module)
    return module


def configure(module: ModuleType, fit_checks: bool = True) -> None:
    """What the compiled core calls: the stand-in's row cut, the routes' class (its fields read at
    their slots while it is unchanged), what makes a route's fit check (``fit_checks``; with
    ``fit_checks=False`` none: every step's inputs matched in full, as a benchmark compares) and
    the tensor type whose batch size it reads, and into which it copies, through torch's own C functions."""
    module.configure(slice_rows, Route, fit_check_maker() if fit_checks else None, torch.Tensor)


COMPILED = load()
CORE = "compiled" if COMPILED is not None else "python"    # what a runner of this process runs by default


class PythonRunnerState:
    """The base of a runner where the compiled core is not loaded: its step fields are attributes."""


RunnerState: type = COMPILED.RunnerState if COMPILED is not None else PythonRunnerState


def cores() -> tuple[str, ...]:
    """The cores a runner of this process can run."""
    return ("compiled", "python") if COMPILED is not None else ("python",)


def chosen(core: str | None) -> str:
    """``core`` checked ("compiled" or "python"), or this process's default for None."""
    if core is None:
        return CORE
    if core not in ("compiled", "python"):
        raise ReplayscopeError(f"step_core must be 'compiled' or 'python', got {core!r}")
    if core not in cores():
        raise ReplayscopeError("step_core 'compiled': the compiled runner core is not loaded here (not built: "
                               "python3 setup.py build_ext --inplace, or REPLAYSCOPE_PURE_PYTHON=1 is set)")
    return core
