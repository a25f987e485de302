"""The emitter's end of its writer process (``replayscope.runner.event_writer``): started, told the
sink over its stdin, handed frames of queued values, asked to flush and to close.

The writer is started without the trace's environment (``REPLAYSCOPE_TRACE*``, the
``sitecustomize`` folder on ``PYTHONPATH``, ``REPLAYSCOPE_TOKEN``): it is never traced, and the
sink's spec (its token too) reaches it only through the pipe, never on its command line. It
runs in a session of its own (the terminal's Ctrl-C to the program's group does not reach it)
and outlives the program to write what it was handed. A forked child closes its copy of the
pipe at once (``os.register_at_fork``): it never writes into its parent's writer, and the
writer still sees the end of its stdin when the parent goes.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import replayscope
from replayscope.runner.affinity import keep_off_program_cpus
from replayscope.runner.event_writer import CLOSE, EVENTS, FLUSH, OPEN, FrameReader, frame
from replayscope.runner.trace.settings import ENV_DIR, ENV_ON, ENV_TOKEN

if TYPE_CHECKING:
    import subprocess       # imported when a writer starts (on the emitter's starting thread), not at import

ENV_IN_PROCESS = "REPLAYSCOPE_EVENTS_IN_PROCESS"   # "1": the emitter's own thread writes the events
START_TIMEOUT_S = 30.0
NO_SIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)     # Linux; elsewhere Python's own SIGPIPE ignoring is relied on
# where the writer imports replayscope from: the folder holding the package this process imported
PACKAGE_ROOT = str(Path(replayscope.__file__).parent.parent)

_links: "weakref.WeakSet[WriterLink]" = weakref.WeakSet()


class WriterUnavailable(Exception):
    """The writer process could not be started or did not answer."""


def writer_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The program's environment without what would trace the writer or tell it the token."""
    environ = dict(os.environ if environ is None else environ)
    trace_dir = environ.get(ENV_DIR)
    env = {key: value for key, value in environ.items() if not key.startswith(ENV_ON) and key != ENV_TOKEN}
    inside = os.path.join(os.path.abspath(trace_dir), "") if trace_dir else None
    paths = [path for path in environ.get("PYTHONPATH", "").split(os.pathsep)
             if path and not (inside and os.path.join(os.path.abspath(path), "").startswith(inside))]
    env["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT, *paths])
    return env


class WriterLink:
    """One run's writer process, seen from the program."""

    def __init__(self, process: subprocess.Popen, to_writer: socket.socket):
        self.process = process
        self._to = to_writer
        self._answers = FrameReader(process.stdout.fileno())
        self.broken = False
        self._asked = 0                  # questions (flush, close) asked: each answer names its own
        _links.add(self)

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(cls, spec: dict[str, Any], run: dict[str, Any], graph_sample: int,
              flush_interval_s: float) -> "WriterLink":
        """A writer with the sink open; ``WriterUnavailable`` when it could not be had, or the
        sink's own error (``str``) raised as ``SinkRefused`` when the writer could not open it."""
        import subprocess

        ours, theirs = socket.socketpair()
        try:
            process = subprocess.Popen([sys.executable, "-m", "replayscope.runner.event_writer"],
                                       stdin=theirs.fileno(), stdout=subprocess.PIPE, env=writer_environment(),
                                       start_new_session=True, close_fds=True)
        except OSError as error:
            ours.close()
            raise WriterUnavailable(f"cannot start {sys.executable}: {error}") from None
        finally:
            theirs.close()
        keep_off_program_cpus(process.pid)     # spawned from the program's thread: off a CPU it pinned itself to
        ours.shutdown(socket.SHUT_RD)        # nothing comes back this way (answers come on its stdout)
        link = cls(process, ours)
        try:
            # the run record as its JSON (what the sink writes or posts of it; any JSON-able value goes)
            link._send(frame(OPEN, (spec, json.dumps(run), graph_sample, flush_interval_s)))
            answer = link._answers.next(START_TIMEOUT_S)
        except (TypeError, ValueError) as error:      # a run record JSON cannot write
            link.abandon()
            raise WriterUnavailable(f"the run record cannot be handed over: {error}") from None
        except OSError as error:
            link.abandon()
            raise WriterUnavailable(f"it went at its start: {error}") from None
        if answer is None or answer[0] != OPEN:
            link.abandon()
            raise WriterUnavailable(f"it did not answer within {START_TIMEOUT_S:g}s (exit status "
                                    f"{process.poll()})")
        if answer[1] is not None:
            link.abandon()
            raise SinkRefused(answer[1])
        return link

    def send(self, items: list) -> None:
        """Hand queued values over (``ValueError`` for a value marshal cannot write, nothing sent)."""
        self._send(frame(EVENTS, items))

    def _send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self._to.send(view, NO_SIGNAL):]

    def ask(self, what: bytes, timeout_s: float) -> tuple | None:
        """``FLUSH`` or ``CLOSE``: the writer's report once everything sent before is written; None
        when it did not answer within ``timeout_s`` (its answer, when it comes, is skipped by the
        next question) or is gone."""
        self._asked += 1
        try:
            self._send(frame(what, self._asked))
            deadline = time.monotonic() + timeout_s
            while True:
                answer = self._answers.next(max(0.0, deadline - time.monotonic()))
                if answer is None:
                    if self._answers.ended:
                        self.broken = True
                    return None
                asked, report = answer[1]
                if asked == self._asked:
                    return report
        except OSError:
            self.broken = True
            return None

    def end(self) -> None:
        """The run is over: the writer's stdin closed (it exits once it wrote everything)."""
        import subprocess

        self.forget()
        if self.process.poll() is None:
            try:
                self.process.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass                     # still writing; it ends on its own

    def abandon(self) -> None:
        """A writer not used after all: stopped."""
        import subprocess

        self.forget()
        try:
            self.process.kill()
            self.process.wait(timeout=5.0)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def forget(self) -> None:
        """This process's ends of the pipes closed (a forked child's, or at the end)."""
        for stream in (self._to, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.broken = True


class SinkRefused(Exception):
    """The writer could not open the sink: its error, as the sink said it."""


def _forget_in_child() -> None:
    for link in list(_links):
        link.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


__all__ = ["CLOSE", "ENV_IN_PROCESS", "FLUSH", "SinkRefused", "WriterLink", "WriterUnavailable",
           "writer_environment"]
