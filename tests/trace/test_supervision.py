"""``replayscope.runner.trace.supervision`` where the sender of a signal cannot be read (macOS has no
``sigtimedwait``): SIGTERM and, off a terminal, SIGINT to the trace are still passed on."""

from __future__ import annotations

import os
import signal
import sys
import threading

import pytest

from replayscope.runner.trace import supervision

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_without_siginfo_a_signal_to_the_trace_is_passed_on_to_the_command(monkeypatch, signum):
    monkeypatch.setattr(supervision, "SIGINFO", False)
    monkeypatch.setattr(supervision, "on_terminal_foreground", lambda: False)
    child, own_group = supervision.start(SLEEPER, dict(os.environ))
    assert own_group
    watched = []
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signum))
    timer.start()
    try:
        assert supervision.wait(child, own_group, watch=lambda: watched.append(1)) == -signum
    finally:
        timer.cancel()
        if child.poll() is None:
            child.kill()
            child.wait()
    assert watched                                   # the runs were looked at while it waited
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
