"""replayscope trace: start tracing this Python process, then run the environment's own
sitecustomize (this file is copied as ``sitecustomize.py`` into a folder that
``replayscope trace`` puts first on the traced command's ``PYTHONPATH``).

The tracer is imported as ``replayscope.runner.trace`` from ``REPLAYSCOPE_TRACE_LIB`` (a folder
holding only the ``replayscope`` package), which is on ``sys.path`` only while it is imported:
every name of ours is under ``replayscope``, so the program's own modules (even ones named
``app``, ``runner`` or ``collector``) are found as they would be untraced. If tracing cannot
start, the process says so on stderr and runs untraced.
"""

import os
import sys


def _replayscope_trace_start():
    """Import replayscope's tracer from REPLAYSCOPE_TRACE_LIB and start it."""
    import time

    started = time.perf_counter()
    lib = os.environ.get("REPLAYSCOPE_TRACE_LIB")
    if not lib:
        raise RuntimeError("REPLAYSCOPE_TRACE_LIB is not set")
    sys.path.insert(0, lib)
    try:
        from replayscope.runner.trace.bootstrap import install_from_environment, say_timing

        install_from_environment()
    finally:
        sys.path.remove(lib)
    say_timing("the tracer's start (its imports and hooks)", time.perf_counter() - started)


def _replayscope_next_sitecustomize():
    """The sitecustomize this one shadows (e.g. a distribution's), run as it would have been."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if __name__ == "sitecustomize":     # only as the copy; importing this module does nothing
    try:
        _replayscope_trace_start()
    except Exception as _error:  # noqa: BLE001 (the program runs untraced, never broken)
        sys.stderr.write(f"replayscope trace: not tracing pid {os.getpid()}: {_error}\n")
    _replayscope_next_sitecustomize()
