"""Which step core a traced process runs: the compiled one (``_stepcore``, built from
``_stepcore*.c`` beside this file when the package was installed with a C compiler, or with
``python3 setup.py build_ext --inplace``) or the Python one (``replayscope.runner.trace.steps``, the
reference). Both make the same events; the compiled one does a step's common case at a fraction of
the host time (docs/trace.md "Costs"). ``REPLAYSCOPE_PURE_PYTHON=1`` forces the Python core.

``CompiledSteps`` is ``StepTracking`` with its fields and its ``step_begin`` / ``step_end`` /
``step_abort`` in C (``_stepcore.StepState``): every other method, and the rare cases of those,
are ``StepTracking``'s own.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any, Callable, Mapping

from replayscope.runner.compiled import load_compiled
from replayscope.runner.trace import device, steps
from replayscope.runner.trace.steps import StepTracking

COMPILED_MODULE = "replayscope.runner.trace._stepcore"


def load(environ: Mapping[str, str] = os.environ,
         import_module: Callable[[str], ModuleType] = importlib.import_module) -> ModuleType | None:
    """The compiled core, configured; None when ``REPLAYSCOPE_PURE_PYTHON=1`` or it was not built."""
    module = load_compiled(COMPILED_MODULE, environ, import_module)
    if module is None:
        return None
    module.configure(steps, device)
    return module


COMPILED = load()
CORE = "compiled" if COMPILED is not None else "python"    # what this process runs by default

if COMPILED is not None:
    class CompiledSteps(COMPILED.StepState, StepTracking):
        """``StepTracking`` with its state and its per-step methods compiled."""

        step_core = "compiled"
else:
    CompiledSteps = None    # type: ignore[assignment,misc]


def steps_class(core: str = CORE) -> type:
    """The steps part of a tracer for ``core`` ("compiled" or "python")."""
    if core == "python":
        return StepTracking
    if core != "compiled" or CompiledSteps is None:
        raise ValueError(f"no step core {core!r} here (this process has: {', '.join(cores())})")
    return CompiledSteps


def cores() -> tuple[str, ...]:
    """The step cores this process can run."""
    return ("compiled", "python") if CompiledSteps is not None else ("python",)


def compiled_for(tracer: Any) -> ModuleType | None:
    """The compiled core when ``tracer`` runs it (its wrappers then take it), else None."""
    if COMPILED is not None and isinstance(tracer, COMPILED.StepState):
        return COMPILED
    return None
