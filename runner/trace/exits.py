"""How a traced process's run ends, whatever ends the process: its normal exit (``atexit``),
an uncaught exception, multiprocessing's workers (which leave through ``os._exit`` after
their finalizers), ``os._exit`` anywhere else, and SIGTERM where the program has no handler
of its own. What none of these sees (SIGKILL) is ended by ``replayscope trace`` from
outside (``replayscope.runner.trace.outside``). Nothing here runs on a step's path.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from replayscope.runner.trace.tracer import Tracer


def end_run(tracer: Tracer, status: str | None = None, error: str | None = None) -> None:
    try:
        tracer.close(status, error)
    except Exception as failure:  # noqa: BLE001
        print(f"replayscope trace: {failure!r}", file=sys.stderr)


def watch_uncaught(tracer: Tracer) -> None:
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        try:
            tracer.uncaught(exc_type, exc)
        finally:
            previous(exc_type, exc, tb)
    sys.excepthook = excepthook


def end_runs_of_multiprocessing_workers(tracer: Tracer, util) -> None:
    """multiprocessing's forked (and forkserver'd) workers leave through os._exit, past atexit:
    its finalizers are what runs there, so the worker's run ends in one. It clears the
    finalizers a fork inherits, then calls its after-fork callbacks: register it from one."""
    util.register_after_fork(tracer, lambda tracer: util.Finalize(None, end_run, args=(tracer,),
                                                                  exitpriority=-100))


def end_run_before_os_exit(tracer: Tracer) -> None:
    """``os._exit`` skips atexit: the run ends first (``failed`` for a status other than 0),
    with every event written, then the process leaves as it asked."""
    original = os._exit

    def _exit(status):
        try:
            if status == 0:
                end_run(tracer)
            else:
                end_run(tracer, "failed", f"the process left through os._exit({status})")
        except BaseException:  # noqa: BLE001 (the process leaves whatever happens)
            pass
        original(status)
    _exit.__replayscope_original__ = original
    _exit.__wrapped__ = original
    os._exit = _exit


def end_run_on_sigterm(tracer: Tracer) -> None:
    """SIGTERM, where the program has no handler of its own (a handler it sets later replaces
    this one): the run ends ``interrupted`` with every event written, then the process dies
    of the signal as it would have untraced (its exit status says SIGTERM)."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    ending = []

    def on_sigterm(signum, _frame):
        if ending:              # a second SIGTERM (one to the group and one passed on): once
            return
        ending.append(signum)
        end_run(tracer, "interrupted")
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    signal.signal(signal.SIGTERM, on_sigterm)


FLUSHED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def flush_before_the_programs_signal_handlers(tracer: Tracer) -> None:
    """A handler the program sets for SIGINT or SIGTERM runs after the tracer has written what
    its emitter holds. vLLM's engine core sets its own, and its API server SIGKILLs it moments
    after a Ctrl-C: without this, the steps of its last moments (up to the emitter's flush
    interval, more when the process is busy) died with it. ``signal.getsignal`` and the value
    ``signal.signal`` returns still give the program its own handlers."""
    original_signal, original_getsignal = signal.signal, signal.getsignal
    wrapped: dict[int, tuple] = {}          # signum -> (the wrapper installed, the program's handler)

    def program_handler(signum, current):
        entry = wrapped.get(signum)
        return entry[1] if entry is not None and current is entry[0] else current

    def set_handler(signum, handler):
        if signum in FLUSHED_SIGNALS and callable(handler):
            def flushing(sig, frame, handler=handler):
                try:
                    tracer.flush_events()
                except Exception:  # noqa: BLE001 (the program's handler runs whatever happens)
                    pass
                return handler(sig, frame)
            previous = original_signal(signum, flushing)
            result = program_handler(signum, previous)
            wrapped[signum] = (flushing, handler)
            return result
        previous = original_signal(signum, handler)
        result = program_handler(signum, previous)
        wrapped.pop(signum, None)
        return result

    def get_handler(signum):
        return program_handler(signum, original_getsignal(signum))

    set_handler.__wrapped__, get_handler.__wrapped__ = original_signal, original_getsignal
    signal.signal, signal.getsignal = set_handler, get_handler
