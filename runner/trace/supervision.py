"""The traced command as ``replayscope trace``'s child: started so that it ends with the trace,
signals to the trace passed on to it, waited for while its processes' runs are watched.

- Off a terminal's foreground (a supervisor, CI, ``docker stop``, a script), the command runs in
  a process group of its own: a signal to the trace's group reaches the trace alone, which
  passes it on once. On a terminal's foreground the command stays in the trace's group, where
  Ctrl-C reaches it from the terminal (that SIGINT is not passed on again).
- SIGINT and SIGTERM sent to the trace (its PID or its group) are passed on to the command.
- A trace started with SIGINT ignored (a script's background job inherits that) still takes
  SIGINT, and its command starts with SIGINT's default: SIGINT to the trace stops it.
- On Linux the command gets SIGTERM when the trace dies, even by SIGKILL
  (``PR_SET_PDEATHSIG``), so it never outlives the trace unnoticed.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from typing import Callable

PASSED_ON = (signal.SIGINT, signal.SIGTERM)
WAITED = {*PASSED_ON, signal.SIGCHLD}
SI_KERNEL = 0x80                 # si_code of a signal the kernel sent: the terminal's Ctrl-C
PR_SET_PDEATHSIG = 1
PARENT_DEATH_SIGNAL = signal.SIGTERM
WATCH_EVERY_S = 0.5              # how often the processes' runs are looked at while the command runs
SIGINFO = hasattr(signal, "sigtimedwait")   # who sent a signal can be read (not on macOS: handlers there)


def on_terminal_foreground() -> bool:
    """Whether this process is in its terminal's foreground group (Ctrl-C reaches its group)."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                return True
        except OSError:
            continue
    return False


def _prctl() -> Callable | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def start(command: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, bool]:
    """The command started (the signals passed on stay blocked here until ``wait``); and
    whether it has a process group of its own."""
    own_group = not on_terminal_foreground()
    parent = os.getpid()
    prctl = _prctl()
    sigint_ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN

    def in_the_child() -> None:             # between fork and exec: no imports, no allocations to speak of
        if sigint_ignored:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, WAITED)
        if own_group:
            os.setpgid(0, 0)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(PARENT_DEATH_SIGNAL), 0, 0, 0)
            if os.getppid() != parent:      # the trace died before that
                os.kill(os.getpid(), PARENT_DEATH_SIGNAL)

    if SIGINFO:
        signal.pthread_sigmask(signal.SIG_BLOCK, WAITED)
    if sigint_ignored:                      # an ignored signal is never queued, blocked or not
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(command, env=env, preexec_fn=in_the_child), own_group
    except BaseException:
        _unblock()
        raise


def _unblock() -> None:
    if SIGINFO:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, WAITED)


def wait(child: subprocess.Popen, own_group: bool, watch: Callable[[], None] = lambda: None,
         received: Callable[[int], None] = lambda signo: None) -> int:
    """Wait for the command, passing SIGINT and SIGTERM on to it (each told to ``received``, the
    terminal's Ctrl-C too) and calling ``watch`` every ``WATCH_EVERY_S``; its exit status
    (negative: the signal that ended it)."""
    if not SIGINFO:
        return _wait_with_handlers(child, own_group, watch, received)
    try:
        next_watch = time.monotonic() + WATCH_EVERY_S
        while (code := child.poll()) is None:
            info = signal.sigtimedwait(WAITED, WATCH_EVERY_S)
            if info is not None and info.si_signo in PASSED_ON:
                received(info.si_signo)
                pass_on(child, info, own_group)
            if time.monotonic() >= next_watch:
                watch()
                next_watch = time.monotonic() + WATCH_EVERY_S
        return code
    finally:
        while signal.sigtimedwait(WAITED, 0) is not None:
            pass                            # what came as the command ended: it ended
        _unblock()


def pass_on(child: subprocess.Popen, info, own_group: bool) -> None:
    if not own_group and info.si_code == SI_KERNEL:
        return                              # the terminal's Ctrl-C: the command's group has it already
    try:
        child.send_signal(info.si_signo)
    except ProcessLookupError:
        pass


def _wait_with_handlers(child: subprocess.Popen, own_group: bool, watch: Callable[[], None],
                        received: Callable[[int], None]) -> int:
    """``wait`` where the sender of a signal cannot be read: on a terminal's foreground a SIGINT
    is taken to be the terminal's (the command has it already), elsewhere it is passed on."""
    def forward(signum, _frame):
        received(signum)
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    def noted(signum, _frame):
        received(signum)

    previous = {signal.SIGINT: signal.signal(signal.SIGINT, forward if own_group else noted),
                signal.SIGTERM: signal.signal(signal.SIGTERM, forward)}
    try:
        while True:
            try:
                return child.wait(WATCH_EVERY_S)
            except subprocess.TimeoutExpired:
                watch()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
