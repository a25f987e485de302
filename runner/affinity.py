"""The observer's own threads and processes keep off the CPUs the program pinned its loop to.

A thread inherits the CPU affinity of the thread that starts it, and a process that of the thread
that spawns it. The emitter's thread, the tracer's run-opening thread and the event writer
process are started from the program's thread at its first step; a program that pinned that
thread to one CPU (as serving loops and benchmarks do, to keep a host-bound loop on a core of its
own) would have them all share that CPU with it, their work taking turns with its steps.

So the CPUs this process may use are read once, when this module is imported (before the program
runs, under ``replayscope trace``); a thread or process of ours whose affinity was narrowed since
moves to those CPUs less the narrowed ones (all of them when nothing else is left); one started
from a thread of ours that moved already inherits its CPUs and keeps them. Where the affinity was
not narrowed (the common case), or on a system without affinity calls, nothing changes.
"""

from __future__ import annotations

import os

_CHOSEN: set[frozenset[int]] = set()     # the CPUs given to our threads and processes so far
_START: frozenset[int] | None
try:
    _START = frozenset(os.sched_getaffinity(0))
except (AttributeError, OSError):       # no affinity calls on this system
    _START = None


def cpus_for(narrowed: set[int] | frozenset[int]) -> frozenset[int] | None:
    """The CPUs for an observer thread or process that inherited ``narrowed``: the process's CPUs
    at start less ``narrowed``, or all of them when that leaves none; None when ``narrowed`` is
    not narrower than the start, or is what one of ours was given (nothing to change)."""
    if _START is None or not narrowed < _START or narrowed in _CHOSEN:
        return None
    cpus = (_START - narrowed) or _START
    _CHOSEN.add(cpus)
    return cpus


def keep_off_program_cpus(pid: int = 0) -> frozenset[int] | None:
    """Moves the calling thread (``pid`` 0) or an own child process off the CPUs it inherited
    when they are narrower than the process's at start; returns the CPUs it now has, or None when
    nothing changed (never raises: an observer's placement is not worth an error)."""
    try:
        cpus = cpus_for(frozenset(os.sched_getaffinity(pid)))
        if cpus is not None:
            os.sched_setaffinity(pid, cpus)
        return cpus
    except (AttributeError, OSError):
        return None
