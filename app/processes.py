"""Our own child processes: a replayscope command in a new interpreter that imports only
replayscope and what it depends on, never the user's working directory.

Every name of ours is under ``replayscope``, so a project's own ``app/`` or ``runner/`` is
no longer ours to collide with; but ``python -m`` still puts the working directory first on
``sys.path``, and a ``timeit.py`` there would shadow the standard library's in the child.
``replayscope_command`` starts the child with ``-c`` and drops that entry before anything is
imported (``-P`` does the same from Python 3.11 on; this works on 3.10 too, and keeps
PYTHONPATH and site-packages).
"""

from __future__ import annotations

import sys

BOOT = ("import sys\n"
        "if sys.path[:1] == ['']: del sys.path[0]     # the working directory: never ours to import\n"
        "from replayscope.app.cli import main\n"
        "sys.exit(main())\n")


def replayscope_command(*args: str) -> list[str]:
    """The argv that runs ``replayscope ARGS...`` with this interpreter."""
    return [sys.executable, "-c", BOOT, *args]
