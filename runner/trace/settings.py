"""What ``replayscope trace`` tells the processes it traces, through their environment.

The parent (torch-free) writes these variables; every Python process started under it reads
them at start-up (the ``sitecustomize`` on the temporary ``PYTHONPATH`` entry). Without
``REPLAYSCOPE_TRACE=1`` nothing is installed.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from replayscope.runner.timing import CUDA_TIME_EVERY

ENV_ON = "REPLAYSCOPE_TRACE"
ENV_ID = "REPLAYSCOPE_TRACE_ID"
ENV_NAME = "REPLAYSCOPE_TRACE_NAME"
ENV_STEP = "REPLAYSCOPE_TRACE_STEP"
ENV_EVENTS = "REPLAYSCOPE_TRACE_EVENTS"
ENV_COLLECTOR = "REPLAYSCOPE_TRACE_COLLECTOR"
ENV_TOKEN = "REPLAYSCOPE_TOKEN"           # the same variable every replayscope client reads
ENV_LIB = "REPLAYSCOPE_TRACE_LIB"         # a folder holding only the ``replayscope`` package
ENV_DIR = "REPLAYSCOPE_TRACE_DIR"         # the trace's working folder: the processes' registry
ENV_PARENT_PID = "REPLAYSCOPE_TRACE_PARENT_PID"
ENV_COMMAND = "REPLAYSCOPE_TRACE_COMMAND"
ENV_TIME_EVERY = "REPLAYSCOPE_TRACE_TIME_EVERY"
ENV_TIMINGS = "REPLAYSCOPE_TRACE_TIMINGS"  # "1": each process writes the tracer's own start-up work to stderr

STEP_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
REGISTRY_FILE = "runs.jsonl"


@dataclass(frozen=True)
class TraceSettings:
    trace_id: str
    name: str
    command: tuple[str, ...] = ()
    events: str | None = None
    collector: str | None = None
    token: str | None = None
    step: str | None = None           # MODULE:QUALNAME
    lib: str | None = None
    workdir: str | None = None
    parent_pid: int | None = None
    time_every: int = CUDA_TIME_EVERY   # on CUDA, steps timed with events: 1 in N per stage and batch size

    def environment(self) -> dict[str, str]:
        """The variables that carry these settings to the traced processes."""
        env = {ENV_ON: "1", ENV_ID: self.trace_id, ENV_NAME: self.name,
               ENV_COMMAND: json.dumps(list(self.command)), ENV_TIME_EVERY: str(self.time_every)}
        optional = {ENV_STEP: self.step, ENV_EVENTS: self.events, ENV_COLLECTOR: self.collector,
                    ENV_TOKEN: self.token, ENV_LIB: self.lib, ENV_DIR: self.workdir,
                    ENV_PARENT_PID: None if self.parent_pid is None else str(self.parent_pid)}
        env.update({key: value for key, value in optional.items() if value})
        return env

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None) -> "TraceSettings | None":
        """The settings of this process, or None when it is not being traced."""
        environ = os.environ if environ is None else environ
        if environ.get(ENV_ON) != "1" or not environ.get(ENV_ID):
            return None
        try:
            command = tuple(json.loads(environ.get(ENV_COMMAND, "[]")))
        except ValueError:
            command = ()
        parent = environ.get(ENV_PARENT_PID, "")
        every = environ.get(ENV_TIME_EVERY, "")
        return cls(trace_id=environ[ENV_ID], name=environ.get(ENV_NAME) or "trace", command=command,
                   events=environ.get(ENV_EVENTS) or None, collector=environ.get(ENV_COLLECTOR) or None,
                   token=environ.get(ENV_TOKEN) or None, step=environ.get(ENV_STEP) or None,
                   lib=environ.get(ENV_LIB) or None, workdir=environ.get(ENV_DIR) or None,
                   parent_pid=int(parent) if parent.isdigit() else None,
                   time_every=int(every) if every.isdigit() and int(every) >= 1 else CUDA_TIME_EVERY)


def events_path_for(events: str, pid: int, first: bool) -> str:
    """The events file of one traced process: FILE for the first, FILE-pidN.ext for the others."""
    if first:
        return events
    stem, ext = os.path.splitext(events)
    return f"{stem}-pid{pid}{ext or '.jsonl'}"


def claim_events_path(events: str, pid: int) -> str:
    """Claim FILE for this process if no other traced process has; else its own -pidN file."""
    try:
        os.close(os.open(events, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        return events
    except FileExistsError:
        return events_path_for(events, pid, first=False)
