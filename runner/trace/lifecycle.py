"""A traced process's run: opened when the process first has something to report (its
first capture, step, compile or warning), its warnings, and its end (the last phase, what
was left unsaid, ``run_end``, a flush).

One run per process: run ids share the trace's id (``<trace id>-<pid>``) and the run names
say which process (``rank N`` when torch.distributed or ``RANK`` says so, else ``pid N``).
Events go through the runner's ``Emitter`` (a queue and a background thread: nothing blocks
the program, nothing synchronises the device).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable

from replayscope.runner.affinity import keep_off_program_cpus
from replayscope.runner.emitter import Emitter
from replayscope.contract.errors import describe_error
from replayscope.contract.sinks import HttpSink, JsonlSink
from replayscope.runner.timing import step_timing
from replayscope.runner.trace import device
from replayscope.runner.trace.outside import register
from replayscope.runner.trace.settings import TraceSettings, claim_events_path
from replayscope.runner.trace.tree_state import AUTO_STEPS


def process_label() -> str:
    """How the process is named in its run: its distributed rank when known, else its pid."""
    torch_distributed = sys.modules.get("torch.distributed")
    try:
        if torch_distributed is not None and torch_distributed.is_available() \
                and torch_distributed.is_initialized():
            return f"rank {torch_distributed.get_rank()}"
    except Exception:  # noqa: BLE001
        pass
    rank = os.environ.get("RANK")
    if rank is not None and rank.isdigit():
        return f"rank {rank}"
    return f"pid {os.getpid()}"


class RunLifecycle:
    """The run of one traced process, its warnings and its end. Part of ``Tracer``: ``close``
    reads what the captures (``replayscope.runner.trace.captures``) and steps (``replayscope.runner.trace.steps``) counted."""

    settings: TraceSettings
    _make_sink: Callable[[str], Any] | None

    def _reset_run(self) -> None:
        self.pid = os.getpid()
        self.started_at = time.time()
        self.lock = threading.RLock()
        self.emitter: Any = None
        self._starter: threading.Thread | None = None
        self.run: dict[str, Any] | None = None
        self.label: str | None = None
        self.model: str | None = None
        self.engine_version: str | None = None     # the traced engine's version (its recipe reads it)
        self.hooks: list[str] = []
        self.recipes: list[str] = []
        self.step_unreached: str | None = None    # why --step is not found if nothing reports (bootstrap)
        self._step_reported = False
        self.engine_init_started: float | None = None   # when an engine's init began (its phase ends after warm-up)
        self._pending_warnings: list[tuple[str, str]] = []
        self._warned: set[str] = set()
        self.status: str | None = None
        self.error: str | None = None
        self.closed = False

    @property
    def run_id(self) -> str:
        return f"{self.settings.trace_id}-{self.pid}"

    def is_root(self) -> bool:
        """The process ``replayscope trace`` started itself (not one of its children)."""
        return self.settings.parent_pid is not None and os.getppid() == self.settings.parent_pid

    def _ensure_run(self) -> Any:
        if self.emitter is not None or self.closed:
            return self.emitter
        with self.lock:
            if self.emitter is None and not self.closed:
                try:
                    self._open_run()
                except Exception as error:  # noqa: BLE001 (telemetry never takes the program down)
                    self._stop_tracing(error)
        return self.emitter

    def _open_run(self) -> None:
        self.label = process_label()
        name = f"{self.settings.name} [{self.label}]"[:200]
        run = {"run_id": self.run_id, "name": name, "source": "trace", "started_at": self.started_at,
               "backend": "trace", "model": (self.model or self._program())[:300],
               "device": device.device_name()[:200], "torch_version": device.torch_version(),
               **({"version": self.engine_version} if self.engine_version else {}),
               "config": {"trace": {"trace_id": self.settings.trace_id, "pid": self.pid,
                                    "ppid": os.getppid(), "process": self.label,
                                    "command": list(self.settings.command), "step": self.settings.step,
                                    "recipes": list(self.recipes), "hooks": list(self.hooks),
                                    "auto_steps": AUTO_STEPS if self.settings.step is None else None,
                                    "step_timing": step_timing(device.cuda_in_use(), self.settings.time_every),
                                    "step_core": self.step_core}}}
        sink, target = self._sink()
        emitter = Emitter(sink, run, opening=True)     # started on its own thread, below
        self.run, self.emitter = run, emitter
        # Opening a sink may post to a collector: never on the program's thread.
        self._starter = threading.Thread(target=self._start_emitter, name="replayscope-trace-open",
                                         daemon=True)
        self._starter.start()
        self._register({"event": "open", "run_id": self.run_id, "pid": self.pid, "process": self.label,
                        "name": name, "target": target, "spool": getattr(sink, "spool_path", None),
                        "flush_interval_s": emitter.flush_interval_s})
        for code, message in self._pending_warnings:
            self._emit_warning(code, message)
        self._pending_warnings.clear()

    def _start_emitter(self) -> None:
        keep_off_program_cpus()      # the writer it starts and the emitter's thread inherit this thread's CPUs
        try:
            self.emitter.start()
        except Exception as error:  # noqa: BLE001 (telemetry never takes the program down)
            self._stop_tracing(error)
            return
        writer = getattr(self.emitter, "writer_pid", None)
        if writer is not None:      # the trace ends this run only once its writer wrote everything
            self._register({"event": "writer", "run_id": self.run_id, "pid": self.pid, "writer_pid": writer})

    def _stop_tracing(self, error: BaseException) -> None:
        print(f"replayscope trace: cannot write the run of pid {self.pid}: {error!r}; this process "
              f"is not traced any further", file=sys.stderr)
        self.closed, self.emitter = True, None     # and nothing piles up in memory

    def _sink(self) -> tuple[Any, str]:
        if self._make_sink is not None:
            return self._make_sink(self.run_id), "test"
        if self.settings.collector:
            spool = os.path.abspath(f"replayscope-spool-{self.run_id}.jsonl")
            return (HttpSink(self.settings.collector, token=self.settings.token, spool_path=spool),
                    self.settings.collector)
        if self.settings.events:
            path = claim_events_path(self.settings.events, self.pid)
            return JsonlSink(path), path
        raise RuntimeError("no --collector or --events given")

    def _program(self) -> str:
        command = self.settings.command
        return " ".join(command[:3]) if command else (sys.argv[0] if sys.argv else "python")

    def step_target(self, found: bool, why: str | None = None) -> None:
        """Whether this process found the ``--step`` function (``why`` not): the trace's summary
        says so when no process found it (a typo is an error the user sees, not silence)."""
        self._step_reported = True
        self._register({"event": "step_target", "pid": self.pid, "found": found, "why": why})

    def _step_never_found(self) -> None:
        """At the end: a ``--step`` whose module this process never imported (or, for a script,
        whose function was never called) was neither found nor missed; say which."""
        if not self.settings.step or self._step_reported or self.step_unreached is None:
            return
        why = f"--step {self.settings.step}: {self.step_unreached}"
        self.step_target(False, why)
        # On the run too (the program's first process gets one for it, as for any warning).
        self.warn("step_missing", f"{why}; no steps are recorded", once="step_missing")

    def stopping_children(self, note: str) -> None:
        """This process is about to stop its child processes as its engine's normal shutdown does
        (SGLang's ``Engine.shutdown`` SIGKILLs its scheduler): ``replayscope trace`` then ends the
        runs of the children alive now ``finished``, with ``note``, instead of ``interrupted``. Only
        when the program is not ending on an error or Ctrl-C (an exception in flight, one that went
        uncaught, or a run already ended otherwise): then the children were stopped early."""
        import multiprocessing

        uncaught = getattr(sys, "last_exc", None) or getattr(sys, "last_type", None)
        clean = sys.exc_info()[0] is None and uncaught is None and self.status in (None, "finished")
        children = sorted(child.pid for child in multiprocessing.active_children() if child.pid)
        self._register({"event": "stopping_children", "pid": self.pid, "note": note,
                        "clean": clean, "children": children, "ts": time.time()})

    def _register(self, record: dict[str, Any]) -> None:
        """A line in the trace's registry, for the summary ``replayscope trace`` prints."""
        if not self.settings.workdir:
            return
        try:
            register(self.settings.workdir, record)
        except OSError:
            pass   # the trace already ended (a process that outlived it)

    def set_model(self, model: str) -> None:
        if model and self.model is None:
            self.model = str(model)

    def emit(self, kind: str, **fields: Any) -> None:
        emitter = self._ensure_run()
        if emitter is not None:
            emitter.emit(kind, **fields)

    def engine_phase(self, name: str, start_ts: float, duration_s: float, mem_bytes: int | None) -> None:
        """A start-up phase an engine recipe timed (its worker's load, profile, KV cache, warm-up)."""
        self.emit("phase", phase=name, start_ts=start_ts, duration_s=max(0.0, duration_s),
                  mem_bytes=mem_bytes, rank=self._label())

    def _label(self) -> str | None:
        """The process's label for an event's ``rank`` (opening the run, which names it)."""
        self._ensure_run()
        return self.label

    # -- warnings ---------------------------------------------------------------
    def warn(self, code: str, message: str, *, once: str | None = None) -> None:
        """A warning on the run (pending until the process has a run)."""
        key = once or f"{code}:{message}"
        if key in self._warned:
            return
        self._warned.add(key)
        message = message[:4000]
        if self.emitter is None:
            self._pending_warnings.append((code, message))
        else:
            self._emit_warning(code, message)

    def _emit_warning(self, code: str, message: str) -> None:
        self.emitter.emit("warning", message=message, code=code, rank=self.label)

    def hook_error(self, where: str, error: BaseException) -> None:
        self.warn("hook_failed", f"replayscope's {where} hook failed ({describe_error(error)}); "
                                 f"what it would have recorded is missing", once=f"hook_failed:{where}")

    # -- the end ----------------------------------------------------------------
    def flush_events(self, wait_for_gpu: bool = True) -> None:
        """Write what the run's emitter holds now (a signal handler calls this: never blocks
        on a flush the interrupted code is in the middle of). ``wait_for_gpu=False``: only what
        is ready, never waiting for a step's GPU timing."""
        if self.emitter is None:
            return
        starter = getattr(self, "_starter", None)
        if starter is not None and starter.is_alive():
            starter.join(timeout=2.0)          # the sink opens on its own thread: the run record first
            if starter.is_alive():
                return
        self.emitter.flush_unless_busy(wait_for_gpu=wait_for_gpu)

    def uncaught(self, exc_type: type, exc: BaseException) -> None:
        """The program ends with an exception: the run ends failed (or interrupted) with it."""
        if issubclass(exc_type, KeyboardInterrupt):
            self.status = "interrupted"
        else:
            self.status, self.error = "failed", describe_error(exc)

    def close(self, status: str | None = None, error: str | None = None) -> None:
        """End the run (at exit): the last phase, what was left unsaid, run_end; flush."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
        status = status or self.status or "finished"
        error = error or self.error
        self.step_abort()
        self._step_never_found()
        if not self.captures and not self._unsized and (self.steps or self.graph_intent.compiles
                                                         or self.graph_intent.silent_skips):
            cause = self._no_graph()
            if cause is not None:
                self.warn("no_cuda_graphs", f"no CUDA graph was captured in this process: {cause.evidence}")
        if self.emitter is None:
            worth_a_run = self._pending_warnings and (self.is_root() or device.cuda_in_use())
            if not (worth_a_run or self._unsized):
                return
            self.closed = False
            self._ensure_run()
            self.closed = True
        self._maybe_capture_phase(final=True)
        outside_replays = self.total_replays - self.step_replays_total
        if self.steps == 0 and outside_replays:
            self.warn("no_step_function",
                      f"{outside_replays} graph replays were seen outside any step: name the "
                      f"program's step function with --step MODULE:QUALNAME to get per-step modes")
        if self._unsized:
            self.warn("graph_size_unknown",
                      f"{len(self._unsized)} CUDA graphs were captured without a batch size replayscope "
                      f"could read and never replayed in a step; their time is in the capture phase")
        if self._starter is not None:
            self._starter.join(timeout=30)
        device.allow_synchronisation()
        try:
            self.emitter.close(status, error)
        except Exception as failure:  # noqa: BLE001
            print(f"replayscope trace: closing the run of pid {self.pid} failed: {failure!r}", file=sys.stderr)
        self._register({"event": "close", "run_id": self.run_id, "pid": self.pid, "status": status,
                        "steps": self.steps, "modes": dict(self.modes), "reasons": dict(self.reasons),
                        "captures": self.captures, "failed_captures": self.failed_captures,
                        "lost": self.emitter.lost, "unsent": getattr(self.emitter.sink, "spooled", 0),
                        "spool": getattr(self.emitter.sink, "spool_path", None)})
