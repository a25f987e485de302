"""Runs ended by ``replayscope trace`` from outside: a traced process that disappeared without
ending its run (SIGKILL, as vLLM's API server stops its engine core; a crash of the
interpreter) gets its ``run_end``, ``interrupted``, written by the trace; ``finished``, with a
warning that says so, where its parent announced it would stop it at the program's normal end
(SGLang's ``Engine.shutdown``, see ``Tracer.stopping_children``).

Each traced process reports its run to the trace through the registry in the trace's
temporary folder (``runs.jsonl``: an ``open`` line with its run id, pid and where its events
go, a ``close`` line once it ended its run). The trace looks at the open runs while the
command runs and when it ends; a run whose process is gone and that has no ``close`` line
is ended here, and a ``close`` line with ``ended_by: trace`` says so to the summary. What the
process wrote or sent stays; what its emitter had not flushed yet (its last
``flush_interval_s``, 0.2 s) died with it, and the run's error says so. What it had handed to
its event writer (``replayscope.runner.event_writer``, a process of its own that outlives it; a
``writer`` line names its pid) is still being written: the run is ended only once that writer
is gone (waited for up to ``WRITER_WAIT_S`` when the command ended), so the ``run_end`` comes
after the run's last event.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

from replayscope.contract.events_file import append_events
from replayscope.contract.http import HttpError, post_json
from replayscope.contract.wire import MAX_SEQ
from replayscope.runner.trace.run_counts import collector_counts, counts_unavailable, events_file_counts
from replayscope.runner.trace.settings import REGISTRY_FILE

TAIL_BYTES = 1 << 16
WRITER_WAIT_S = 75.0     # a writer keeps trying a collector for 60 s at its end (HttpSink.drain_timeout_s)
WRITER_POLL_S = 0.05


def registry_records(workdir: str) -> list[dict[str, Any]]:
    """Every record the processes wrote in the registry, in order (a line cut off is skipped)."""
    records: list[dict[str, Any]] = []
    try:
        with open(os.path.join(workdir, REGISTRY_FILE), encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    records.append(record)
    except OSError:
        pass                # no registry yet (no process reported a run), or it cannot be read
    return records


def read_registry(workdir: str) -> dict[str, dict[str, Any]]:
    """Each run the processes reported, its lines merged (the ``close`` line over the ``open`` one)."""
    return runs_of(registry_records(workdir))


def runs_of(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``read_registry`` of records already read."""
    runs: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.get("event") in ("open", "close"):
            runs.setdefault(str(record.get("run_id", "?")), {}).update(record)
    return runs


def writers_of(records: list[dict[str, Any]]) -> dict[str, int]:
    """run id -> the pid of the process writing that run's events (its ``writer`` line)."""
    return {str(record.get("run_id")): record["writer_pid"] for record in records
            if record.get("event") == "writer" and isinstance(record.get("writer_pid"), int)}


def wait_gone(pid: int, timeout_s: float) -> bool:
    """Whether ``pid`` went within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not process_gone(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(WRITER_POLL_S)
    return True


def register(workdir: str, record: dict[str, Any]) -> None:
    with open(os.path.join(workdir, REGISTRY_FILE), "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def process_gone(pid: int) -> bool:
    """No such process, or only its zombie (dead, not yet waited for by its parent)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def how_it_ended(exit_status: int | None, signalled: str | None = None) -> str:
    """The process's end as the trace knows it: its exit status for the command's own process;
    ``signalled``: the signal the command got before the process went (e.g. SIGINT, Ctrl-C)."""
    if exit_status is None and signalled:
        return (f"the process disappeared without ending its run after the command got {signalled}: killed "
                f"while the command shut down (e.g. SIGKILLed by its parent, as vLLM and SGLang stop their "
                f"engine processes), or it crashed")
    if exit_status is None:
        return "the process disappeared without ending its run (killed, e.g. by SIGKILL, or it crashed)"
    if exit_status < 0:
        try:
            name = signal.Signals(-exit_status).name
        except ValueError:
            name = f"signal {-exit_status}"
        return f"the process was killed by {name}"
    return f"the process left with exit status {exit_status} without ending its run"


class OutsideEnds:
    """Ends, from the trace, the runs of the processes that disappeared without ending them."""

    def __init__(self, workdir: str, *, collector: str | None = None, token: str | None = None):
        self.workdir = workdir
        self.collector = collector
        self.token = token
        self.signalled: str | None = None        # the first signal the command got, as the trace saw it

    def command_signalled(self, signo: int) -> None:
        """The trace got a signal for the command (passed on, or the terminal's Ctrl-C it has too)."""
        if self.signalled is None:
            self.signalled = signal.Signals(signo).name

    def end_gone(self, exit_statuses: dict[int, int] | None = None, waiting_for: int | None = None,
                 final: bool = False) -> None:
        """End every open run whose process is gone. ``exit_statuses``: how the trace's own
        child ended, by pid; ``waiting_for``: that child while it is waited for (its run is
        left until its exit status is known). A run whose event writer is still writing is left
        for the next look; ``final`` (the command ended): waited for, up to ``WRITER_WAIT_S``."""
        exit_statuses = exit_statuses or {}
        candidates = [run for run in read_registry(self.workdir).values()
                      if "status" not in run and isinstance(run.get("pid"), int) and run["pid"] != waiting_for]
        gone = [run for run in candidates if run["pid"] in exit_statuses or process_gone(run["pid"])]
        if not gone:
            return
        records = registry_records(self.workdir)    # read again: a process that closed its run just before it went
        now, stops, writers = runs_of(records), stopped_by_parents(records), writers_of(records)
        for run in gone:
            writer = writers.get(run["run_id"])
            if writer is not None and not process_gone(writer):
                if not final:
                    continue            # still writing what the process handed it: the next look
                if not wait_gone(writer, WRITER_WAIT_S):
                    print(f"replayscope trace: the event writer (pid {writer}) of pid {run['pid']}'s run was "
                          f"still writing after {WRITER_WAIT_S:g}s; its run is ended without waiting for it",
                          file=sys.stderr)
            if "status" not in now.get(run["run_id"], {}):
                self._end(run, exit_statuses.get(run["pid"]), stops.get(run["pid"]))

    def _end(self, run: dict[str, Any], exit_status: int | None, stop: dict[str, Any] | None = None) -> None:
        """``run_end`` for a process that went without one: ``interrupted``; or ``finished``, with a
        warning saying how, where its parent announced it would stop it at the program's normal end
        (``stop``: the parent's ``stopping_children`` record naming this process)."""
        flush_s = run.get("flush_interval_s") or 0.2
        missing = f"events of its last {flush_s:g} s, not yet written, may be missing"
        if stop is not None and exit_status is None:
            status, error = "finished", None
            note = (f"stopped by its parent process (pid {stop['pid']}) at the program's end: {stop['note']}; "
                    f"replayscope trace ended its run ({missing})")
            events = [{"kind": "warning", "ts": time.time(), "code": "stopped_by_parent", "message": note[:4000]},
                      {"kind": "run_end", "ts": time.time(), "status": status}]
        else:
            status, note = "interrupted", None
            error = f"{how_it_ended(exit_status, self.signalled)}; replayscope trace ended its run ({missing})"
            events = [{"kind": "run_end", "ts": time.time(), "status": status, "error": error}]
        lost, unanswered = 0, None
        try:
            if self.collector:
                unanswered = self._send(run, events)
            else:
                end_events_file(run["target"], *events)
        except (OSError, HttpError, ValueError, KeyError) as failure:
            lost = len(events)
            error = (error or "") + f"; its run_end could not be written: {failure}"
            unanswered = failure if isinstance(failure, HttpError) else None
        counts = self._counts(run, unanswered)
        try:
            register(self.workdir, {"event": "close", "run_id": run["run_id"], "pid": run["pid"],
                                    "status": status, "ended_by": "trace", "error": error, "note": note,
                                    "lost": lost, **counts})
        except OSError:
            pass

    def _send(self, run: dict[str, Any], events: list[dict[str, Any]]) -> HttpError | None:
        """To the collector, with the largest seqs (after any of the process's); else into the
        process's spool, which ``replayscope import events`` re-sends with the rest (then the
        collector's failure is returned)."""
        numbered = [{"seq": MAX_SEQ - len(events) + 1 + i, **event} for i, event in enumerate(events)]
        try:
            post_json(f"{self.collector.rstrip('/')}/v1/runs/{run['run_id']}/events",
                      {"events": numbered}, token=self.token, timeout=10.0)
        except HttpError as failure:
            spool = run.get("spool")
            if not spool or not os.path.exists(spool):
                raise
            end_events_file(spool, *events)
            return failure
        return None

    def _counts(self, run: dict[str, Any], unanswered: HttpError | None) -> dict[str, Any]:
        """The run's counts for the summary (``run_counts``): from its events file, or from what
        the collector stored; not asked again of a collector that did not answer the run_end."""
        if not self.collector:
            return events_file_counts(run.get("target"))
        if unanswered is not None and unanswered.status is None:
            return counts_unavailable(unanswered)
        return collector_counts(self.collector, str(run["run_id"]), self.token)


def stopped_by_parents(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """pid -> the ``stopping_children`` record of the parent that announced it would stop that
    process at the program's normal end (only clean announcements; a child it listed)."""
    stops: dict[int, dict[str, Any]] = {}
    for record in records:
        if record.get("event") == "stopping_children" and record.get("clean") is True:
            for pid in record.get("children") or ():
                if isinstance(pid, int):
                    stops[pid] = record
    return stops


def end_events_file(path: str, *events: dict[str, Any]) -> None:
    """Append ``events`` with the seqs after the file's last one. A last line cut off mid-write
    (the process died writing it) is removed first; a file already ended is left as it is."""
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        start = max(0, size - TAIL_BYTES)
        f.seek(start)
        tail = f.read()
        cut = tail.rfind(b"\n")
        if cut < 0:
            raise ValueError(f"{path} has no complete line")
        if cut + 1 < len(tail):
            f.truncate(start + cut + 1)
        last = json.loads(tail[tail.rfind(b"\n", 0, cut) + 1:cut])
    if last.get("kind") == "run_end":
        return
    seq = last["seq"] + 1 if last.get("kind") != "run" else 0
    append_events(path, {}, [{"seq": seq + i, **event} for i, event in enumerate(events)])
