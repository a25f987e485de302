"""replayscope trace: start tracing this Python process, then run the environment's own
sitecustomize (this file is copied as ``sitecustomize.py`` into a folder that
``replayscope trace`` puts first on the traced command's ``PYTHONPATH``).

replayscope's ``runner`` package is imported from ``REPLAYSCOPE_TRACE_LIB`` and hidden again, so
it never shadows the program's own modules. If tracing cannot start, the process says so on
stderr and runs untraced.
"""

import os
import sys


def _replayscope_trace_start():
    """Import replayscope's tracer from REPLAYSCOPE_TRACE_LIB and start it, then hide its
    package again: the program finds its own modules (even one named ``runner``) as it
    would untraced; the tracer keeps the module objects it already holds."""
    lib = os.environ.get("REPLAYSCOPE_TRACE_LIB")
    if not lib:
        raise RuntimeError("REPLAYSCOPE_TRACE_LIB is not set")

    def ours():
        return [name for name in sys.modules if name == "runner" or name.startswith("runner.")]

    saved = {name: sys.modules.pop(name) for name in ours()}
    sys.path.insert(0, lib)
    try:
        from runner.trace.bootstrap import install_from_environment

        install_from_environment()
    finally:
        sys.path.remove(lib)
        for name in ours():
            del sys.modules[name]
        sys.modules.update(saved)


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
