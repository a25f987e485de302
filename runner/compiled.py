"""What replayscope's compiled cores share: the variable that turns them off, and how one is loaded.

Three parts of replayscope are compiled, each a small C extension doing the common case of a
step, with the Python it mirrors as the reference and the fallback: the graph runner's step
(``replayscope.runner.runner_core``), the step of ``replayscope trace``
(``replayscope.runner.trace.step_core``) and the emitter's step recorder (``Emitter.step`` /
``step_fields``, ``replayscope.runner.emitter``). Each is built when the package is installed with a C
compiler (or ``python3 setup.py build_ext --inplace``); without it, or with
``REPLAYSCOPE_PURE_PYTHON=1``, all run their Python. Torch-free: the tracer loads it before the
program imports torch.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Callable, Mapping

ENV_PURE_PYTHON = "REPLAYSCOPE_PURE_PYTHON"  # "1": the Python cores, even where the compiled ones are built


def load_compiled(name: str, environ: Mapping[str, str] = os.environ,
                  import_module: Callable[[str], ModuleType] = importlib.import_module) -> ModuleType | None:
    """The compiled module ``name``; None when ``REPLAYSCOPE_PURE_PYTHON=1`` or it was not built."""
    if environ.get(ENV_PURE_PYTHON) == "1":        # another value: `replayscope trace` refuses it
        return None
    try:
        return import_module(name)
    except ImportError:
        return None
