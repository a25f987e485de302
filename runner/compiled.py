"""The compiled parts of replayscope: which are built, and whether this process uses them.

Each compiled module has a Python reference that makes the same events (the trace's step core:
``replayscope.runner.trace.step_core``; the emitter's recorder: ``replayscope.runner.emitter``). They are
built by ``pip install`` where a C compiler and Python's headers are (setup.py), or in a source
tree by ``python3 setup.py build_ext --inplace``. ``REPLAYSCOPE_PURE_PYTHON=1`` makes every part run
its Python reference.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Callable, Mapping

ENV_PURE_PYTHON = "REPLAYSCOPE_PURE_PYTHON"  # "1": the Python references, even where the compiled parts are built


def load(name: str, environ: Mapping[str, str] = os.environ,
         import_module: Callable[[str], ModuleType] = importlib.import_module) -> ModuleType | None:
    """The compiled module ``name``; None when ``REPLAYSCOPE_PURE_PYTHON=1`` or it was not built."""
    if environ.get(ENV_PURE_PYTHON) == "1":        # another value: `replayscope trace` refuses it
        return None
    try:
        return import_module(name)
    except ImportError:
        return None
