"""replayscope trace: start tracing this Python process, then run the environment's own
sitecustomize (this file is copied as ``sitecustomize.py`` into a folder that
``replayscope trace`` puts first on the traced command's ``PYTHONPATH``).

replayscope's ``runner`` package is made importable from ``REPLAYSCOPE_TRACE_LIB``, appended
at the end of ``sys.path`` so it never shadows the program's own modules. If tracing cannot
start, the process says so on stderr and runs untraced.
"""

import os
import sys


def _replayscope_trace_start():
    import importlib.util

    lib = os.environ.get("REPLAYSCOPE_TRACE_LIB")
    ours = os.path.realpath(os.path.join(lib, "runner")) if lib else None
    found = importlib.util.find_spec("runner")
    if found is None:
        if lib:
            sys.path.append(lib)
    else:
        theirs = os.path.dirname(os.path.realpath(found.origin or ""))
        replayscope = os.path.exists(os.path.join(theirs, "trace", "bootstrap.py"))
        if theirs != ours and not replayscope:
            raise RuntimeError(f"this program has its own module named 'runner' ({theirs}), which "
                               f"is also the name of replayscope's package")
    from runner.trace.bootstrap import install_from_environment

    install_from_environment()


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
