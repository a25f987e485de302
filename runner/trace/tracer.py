"""One traced process: its run, the graphs it captured, the step in progress, its events.

The hooks (``runner.trace.hooks``, ``runner.trace.recipes``) call into the one ``Tracer`` of
the process. The replay path is a counter and a list append; everything else (capture,
compile, a step's end) happens once per capture or per step. Events go through the runner's
``Emitter`` (a queue and a background thread: nothing blocks the program, nothing
synchronises the device). A process gets a run only when it has something to report: its
first capture, step, compile or warning.

One run per process: run ids share the trace's id (``<trace id>-<pid>``) and the run names
say which process (``rank N`` when torch.distributed or ``RANK`` says so, else ``pid N``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter
from typing import Any, Callable

from runner.emitter import Emitter
from runner.sinks import HttpSink, JsonlSink
from runner.timing import CudaClock, step_timing
from runner.trace import device
from runner.trace.causes import (Cause, StepFacts, decide, inductor_skip_evidence, inductor_skip_reason,
                                 replayed)
from runner.trace.no_graph import GraphIntent, no_graph_cause, skip_count
from runner.trace.settings import REGISTRY_FILE, TraceSettings, claim_events_path
from runner.trace.tree_state import AUTO_STEPS, GraphTrees, limit_message

# Names under which programs keep the batch size they are capturing (SGLang ``bs``, vLLM
# ``num_tokens``, most hand-written loops ``bs`` or ``batch_size``), looked up in the frames
# that led to a capture when no recipe said which size it was.
SIZE_NAMES = ("bs", "batch_size", "num_tokens", "graph_bs", "padded_bs", "capture_bs", "num_seqs")
# ... and the objects vLLM describes a captured size with: its forward context's batch descriptor,
# the model runner V2's BatchExecutionDescriptor (``desc``) and CudaGraphKey.
SIZE_HOLDERS = (("batch_descriptor", "num_tokens"), ("desc", "num_tokens"), ("cudagraph_key", "total_num_tokens"))
_STACK_DEPTH = 40


def _is_size(value: Any) -> bool:
    return type(value) is int and value >= 1


def capture_size_from_stack(frame: Any) -> int | None:
    """The batch size a program is capturing, read from the frames that led to the capture."""
    for _ in range(_STACK_DEPTH):
        if frame is None:
            break
        module = frame.f_globals.get("__name__", "") or ""
        if not (module == "torch" or module.startswith(("torch.", "runner.trace"))):
            names = frame.f_locals
            for name in SIZE_NAMES:
                if _is_size(names.get(name)):
                    return names[name]
            for holder, attribute in SIZE_HOLDERS:
                size = getattr(names.get(holder), attribute, None)
                if _is_size(size):
                    return size
            if "capture" in frame.f_code.co_name and _is_size(names.get("size")):
                return names["size"]
        frame = frame.f_back
    return None


def describe_error(error: BaseException) -> str:
    """The error and, for CUDA's 'previous error during capture', the original cause."""
    text = f"{type(error).__name__}: {error}".strip()
    cause = error.__cause__ or error.__context__
    if cause is not None and str(cause) not in text:
        text += f" (caused by {type(cause).__name__}: {cause})"
    return text[:4000]


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


class _Capture:
    """One CUDA-graph capture in progress."""

    __slots__ = ("started", "started_ts", "reserved", "size", "variant", "context", "stage", "body_error")

    def __init__(self):
        self.started = time.perf_counter()
        self.started_ts = time.time()
        self.reserved = device.reserved_bytes()
        self.size: int | None = None
        self.variant = "cudagraph"
        self.context: CaptureContext | None = None
        self.stage = "decode"
        self.body_error: BaseException | None = None


class CaptureContext:
    """A recipe's capture of one size (e.g. SGLang's ``capture_one_batch_size(bs)``, vLLM's
    ``_dummy_run(num_tokens)``): the graphs captured inside are one capture event of that size,
    timed from the context's start (warm-up runs included, as the engines time it)."""

    def __init__(self, tracer: "Tracer", size: int, stage: str, label: str):
        self.tracer = tracer
        self.size = size
        self.stage = stage
        self.label = label
        self.graphs = 0
        self.errors: list[str] = []
        self.pool_delta: int | None = None
        self.pool: Any = None
        self.started = 0.0

    def __enter__(self) -> "CaptureContext":
        self.started = time.perf_counter()
        self.tracer.capture_contexts.append(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.tracer.capture_contexts.remove(self)
        except ValueError:
            pass
        if self.graphs == 0:
            return          # no graph captured in it: a warm-up or profile run, not a capture
        if exc is not None:
            self.errors.append(describe_error(exc))
        self.tracer.capture_context_done(self, time.perf_counter() - self.started)

    def add(self, delta: int | None, error: str | None, pool: Any) -> None:
        self.graphs += 1
        if delta is not None:
            self.pool_delta = (self.pool_delta or 0) + delta
        if error:
            self.errors.append(error)
        if pool is not None:
            self.pool = pool


class Tracer:
    """The state of one traced process. See the module docstring."""

    def __init__(self, settings: TraceSettings, *, make_sink: Callable[[str], Any] | None = None):
        self.settings = settings
        self._make_sink = make_sink
        self._reset()

    # -- state ------------------------------------------------------------------
    def _reset(self) -> None:
        self.pid = os.getpid()
        self.started_at = time.time()
        self.lock = threading.RLock()
        self.emitter: Any = None
        self._starter: threading.Thread | None = None
        self.run: dict[str, Any] | None = None
        self.label: str | None = None
        self.model: str | None = None
        self.hooks: list[str] = []
        self.recipes: list[str] = []
        self._pending_warnings: list[tuple[str, str]] = []
        self._warned: set[str] = set()
        self.status: str | None = None
        self.error: str | None = None
        self.closed = False
        # captures
        self.ignore_captures = 0
        self.capture_contexts: list[CaptureContext] = []
        self.inductor_recording: tuple[Any, bool] | None = None
        self._inductor_recorded: set[Any] = set()
        self._open: dict[int, _Capture] = {}
        self._pools: dict[tuple, int] = {}
        self.captured_sizes: tuple[int, ...] = ()
        self.captured_by_stage: dict[str, tuple[int, ...]] = {}    # capture stage -> its sizes
        self.captures = 0
        self.failed_captures = 0
        self._capture_first_ts: float | None = None
        self._capture_last_ts: float | None = None
        self._capture_mem: int | None = None
        self._capture_phase_sent = False
        self._unsized: list[Any] = []          # graphs captured without a known size
        # Inductor
        self.inductor_calls: list[Any] = []    # function ids the graph-tree manager is running
        self.inductor_skipped: dict[Any, Cause] = {}
        self.compile_skip: Cause | None = None
        self.compile_depth = 0
        self.graph_trees = GraphTrees()
        self.graph_intent = GraphIntent()       # what the Inductor compiles asked for (no_graph)
        self.skip_messages = 0                  # Inductor's skip messages heard
        self.inductor_recordings = 0            # recordings of compiled functions so far
        # steps
        self.in_step = False
        self.step_stage = "decode"
        self.step_bs: int | None = None
        self.step_tokens = 0
        self.step_hint: Cause | None = None
        self.step_timing: Any = None
        self._cuda_clock: CudaClock | None = None     # once the process uses CUDA
        self._replayed: dict[tuple[int, int], Any] = {}
        self.step_graphs: list[Any] = []       # the graphs replayed in the step so far, in order
        self.step_inductor: Cause | None = None
        self.step_captures = 0
        self.total_replays = 0
        self.step_replays_total = 0             # replays inside steps (the others were outside any)
        self.steps = 0
        self.modes: Counter = Counter()
        self.reasons: Counter = Counter()

    def after_fork_in_child(self) -> None:
        """A forked child is a process of its own: a fresh state (and run), the same hooks."""
        self._reset()

    # -- the run ----------------------------------------------------------------
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
               "config": {"trace": {"trace_id": self.settings.trace_id, "pid": self.pid,
                                    "ppid": os.getppid(), "process": self.label,
                                    "command": list(self.settings.command), "step": self.settings.step,
                                    "recipes": list(self.recipes), "hooks": list(self.hooks),
                                    "auto_steps": AUTO_STEPS if self.settings.step is None else None,
                                    "step_timing": step_timing(device.cuda_in_use(), self.settings.time_every)}}}
        sink, target = self._sink()
        emitter = Emitter(sink, run)
        self.run, self.emitter = run, emitter
        # Opening a sink may post to a collector: never on the program's thread.
        self._starter = threading.Thread(target=self._start_emitter, name="replayscope-trace-open",
                                         daemon=True)
        self._starter.start()
        self._register({"event": "open", "run_id": self.run_id, "pid": self.pid, "process": self.label,
                        "name": name, "target": target})
        for code, message in self._pending_warnings:
            self._emit_warning(code, message)
        self._pending_warnings.clear()

    def _start_emitter(self) -> None:
        try:
            self.emitter.start()
        except Exception as error:  # noqa: BLE001 (telemetry never takes the program down)
            self._stop_tracing(error)

    def _stop_tracing(self, error: BaseException) -> None:
        print(f"replayscope trace: cannot write the run of pid {self.pid}: {error!r}; this process "
              f"is not traced any further", file=sys.stderr)
        self.closed, self.emitter = True, None     # and nothing piles up in memory

    def _sink(self) -> tuple[Any, str]:
        if self._make_sink is not None:
            return self._make_sink(self.run_id), "test"
        if self.settings.collector:
            return HttpSink(self.settings.collector, token=self.settings.token), self.settings.collector
        if self.settings.events:
            path = claim_events_path(self.settings.events, self.pid)
            return JsonlSink(path), path
        raise RuntimeError("no --collector or --events given")

    def _program(self) -> str:
        command = self.settings.command
        return " ".join(command[:3]) if command else (sys.argv[0] if sys.argv else "python")

    def _register(self, record: dict[str, Any]) -> None:
        """A line in the trace's registry, for the summary ``replayscope trace`` prints."""
        if not self.settings.workdir:
            return
        try:
            with open(os.path.join(self.settings.workdir, REGISTRY_FILE), "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        except OSError:
            pass   # the trace already ended (a process that outlived it)

    def set_model(self, model: str) -> None:
        if model and self.model is None:
            self.model = str(model)

    def emit(self, kind: str, **fields: Any) -> None:
        emitter = self._ensure_run()
        if emitter is not None:
            emitter.emit(kind, **fields)

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

    # -- captures ---------------------------------------------------------------
    def capture_begin(self, graph: Any) -> None:
        if self.ignore_captures:
            return
        capture = _Capture()
        context = self.capture_contexts[-1] if self.capture_contexts else None
        recording = self.inductor_recording
        if recording is not None:
            capture.variant = "inductor re-record" if recording[1] else "inductor"
            if self.in_step and self.step_bs:
                capture.size = self.step_bs          # Inductor records the shape it is called with
        if capture.size is None and context is not None:
            capture.size, capture.context, capture.stage = context.size, context, context.stage
        if capture.size is None:
            capture.size = capture_size_from_stack(sys._getframe(2))
        if capture.size is None and self.in_step and self.step_bs:
            capture.size = self.step_bs              # the batch of the step it was captured in
        if self._capture_first_ts is None:
            self._capture_first_ts = capture.started_ts
        self._open[id(graph)] = capture

    def capture_body_error(self, graph: Any, error: BaseException) -> None:
        capture = self._open.get(id(graph))
        if capture is not None:
            capture.body_error = error

    def capture_end(self, graph: Any, error: BaseException | None) -> None:
        capture = self._open.pop(id(graph), None)
        if capture is None:
            return
        duration = time.perf_counter() - capture.started
        after = device.reserved_bytes()
        delta = None if after is None or capture.reserved is None else after - capture.reserved
        failure = capture.body_error or error
        message = describe_error(failure) if failure is not None else None
        pool = None
        if failure is None:
            try:
                pool = tuple(graph.pool())
            except Exception:  # noqa: BLE001
                pool = None
        self._capture_last_ts = time.time()
        if delta is not None:
            self._capture_mem = (self._capture_mem or 0) + delta
        if self.in_step:
            self.step_captures += 1
        if recording := self.inductor_recording:
            self._inductor_recorded.add(recording[0])
        if capture.context is not None:
            capture.context.add(delta, message, pool)
            if failure is None:
                graph._replayscope_bs = capture.size
            return
        if capture.size is None:
            graph._replayscope_bs = 0
            if failure is not None:
                self.warn("capture_failed", f"a CUDA graph capture of unknown batch size failed: {message}")
                self.failed_captures += 1
            else:
                graph._replayscope_pending = (capture, duration, delta, pool)
                self._unsized.append(graph)
            return
        if failure is None:
            graph._replayscope_bs = capture.size
        self._emit_capture(capture.size, capture.stage, duration, delta, pool, message,
                           self._variant(capture.variant, pool))

    def capture_context(self, size: int, stage: str = "decode", label: str = "cudagraph") -> CaptureContext:
        return CaptureContext(self, size, stage, label)

    def capture_context_done(self, context: CaptureContext, duration: float) -> None:
        error = "; ".join(dict.fromkeys(context.errors)) or None
        graphs = f", {context.graphs} graphs" if context.graphs > 1 else ""
        self._emit_capture(context.size, context.stage, duration, context.pool_delta, context.pool,
                           error, self._variant(f"{context.label}{graphs}", context.pool))

    def _variant(self, capturer: str, pool: Any) -> str:
        if pool is None:
            return capturer[:64]
        number = self._pools.setdefault(pool, len(self._pools) + 1)
        return f"{capturer}, pool {number}"[:64]

    def _emit_capture(self, size: int, stage: str, duration: float, delta: int | None, pool: Any,
                      error: str | None, variant: str) -> None:
        status = "failed" if error else "ok"
        self.captures += 1
        if error:
            self.failed_captures += 1
        else:
            if size not in self.captured_sizes:
                self.captured_sizes = tuple(sorted(self.captured_sizes + (size,)))
            sizes = self.captured_by_stage.get(stage, ())
            if size not in sizes:
                self.captured_by_stage[stage] = tuple(sorted(sizes + (size,)))
        self.emit("capture", graph_bs=size, stage=stage, duration_s=duration,
                  pool_bytes=device.pool_bytes(pool), pool_delta_bytes=delta, status=status, error=error,
                  variant=variant, rank=self._label())

    def _label(self) -> str | None:
        """The process's label for an event's ``rank`` (opening the run, which names it)."""
        self._ensure_run()
        return self.label

    def _bind_unsized(self, graph: Any, size: int) -> None:
        """A graph captured without a known size takes the batch of the first step that replays it."""
        pending = graph.__dict__.pop("_replayscope_pending", None)
        if pending is None:
            return
        capture, duration, delta, pool = pending
        graph._replayscope_bs = size
        try:
            self._unsized.remove(graph)
        except ValueError:
            pass
        self._emit_capture(size, capture.stage, duration, delta, pool, None,
                           self._variant(f"{capture.variant}, size from first replay", pool))

    def _maybe_capture_phase(self, final: bool = False) -> None:
        """First capture to last, once: when a step runs without capturing, or at the end."""
        if self._capture_phase_sent or self._capture_first_ts is None or self._capture_last_ts is None:
            return
        if not final and self.step_captures:
            return
        self._capture_phase_sent = True
        self.emit("phase", phase="capture", start_ts=self._capture_first_ts,
                  duration_s=max(0.0, self._capture_last_ts - self._capture_first_ts),
                  mem_bytes=self._capture_mem, rank=self._label())

    # -- Inductor and Dynamo ----------------------------------------------------
    def inductor_skip(self, message: str) -> None:
        """Inductor decided to run a compiled function without CUDA graphs, and said why."""
        cause = Cause(inductor_skip_reason(message), inductor_skip_evidence(message))
        self.skip_messages += 1
        if self.inductor_calls:
            self.inductor_skipped[self.inductor_calls[-1]] = cause
            if cause.reason == "rerecord_limit":
                self.warn("rerecord_limit", limit_message(self.graph_trees, self.inductor_calls[-1], message))
        else:
            self.compile_skip = cause
        self.warn("cudagraph_skipped", cause.evidence or message)

    def inductor_record_begin(self, function_id: Any) -> tuple[Any, bool, int] | None:
        previous = self.inductor_recording
        self.inductor_recording = (function_id, function_id in self._inductor_recorded, len(self.step_graphs))
        return previous

    def inductor_record_end(self, previous: tuple[Any, bool, int] | None) -> None:
        recording = self.inductor_recording
        self.inductor_recording = previous
        self.inductor_recordings += 1
        if recording is not None and self.in_step:
            # Inductor replays a graph right after recording it: part of the recording, not a replay
            # of the step's (the step is a recording step, eager graph_warmup).
            kept = recording[2]
            self.step_replays_total += len(self.step_graphs) - kept
            del self.step_graphs[kept:]

    def recording(self, function: str, cause: str, evidence: str | None, recordings: int,
                  rerecords: int | None, limit: int | None) -> None:
        """Inductor recorded a CUDA graph of a compiled function: one ``recording`` event."""
        self.emit("recording", function=function, cause=cause, evidence=evidence and evidence[:500],
                  graph_bs=self.step_bs if self.in_step and self.step_bs else None, recordings=recordings,
                  rerecords=rerecords, rerecord_limit=limit, rank=self._label())

    def inductor_call_end(self, function_id: Any, replays_before: int, recordings_before: int) -> None:
        """One call of a compiled function through Inductor's graph trees has returned."""
        self.inductor_calls.pop()
        if not self.in_step:
            return
        number = getattr(function_id, "id", function_id)
        if self.inductor_recordings != recordings_before:
            cause = Cause("graph_warmup", f"Inductor recorded the CUDA graph of compiled function {number} "
                                          f"in this call; the calls after it replay the graph")
        elif self.total_replays != replays_before:
            return
        else:
            cause = self.inductor_skipped.get(function_id) or Cause(
                "graph_warmup", f"Inductor ran compiled function {number} without a graph "
                                f"(warm-up before recording)")
        current = self.step_inductor
        if current is None or (current.reason == "graph_warmup" and cause.reason != "graph_warmup"):
            self.step_inductor = cause

    def compile_done(self, started_ts: float, duration: float, skips_before: int | None = None,
                     heard_before: int | None = None) -> None:
        """A Dynamo compile ended: its phase, and the CUDA-graph skips Inductor counted in it
        without a message (no_graph)."""
        skips = skip_count()
        if skips is not None and skips_before is not None and heard_before is not None:
            silent = (skips - skips_before) - (self.skip_messages - heard_before)
            if silent > 0:
                self.graph_intent.silent_skips += silent
        self.emit("phase", phase="compile", start_ts=started_ts, duration_s=duration, rank=self._label())

    def inductor_compiled(self, with_graphs: bool) -> None:
        """Inductor compiles a graph, with its CUDA graphs on or off (its config when called)."""
        self.graph_intent.compiles += 1
        if with_graphs:
            self.graph_intent.with_graphs += 1

    # -- replays and steps ------------------------------------------------------
    def step_begin(self, stage: str, raw_bs: int | None, num_tokens: int | None = None,
                   hint: Cause | None = None) -> bool:
        """A step starts. False when one is already running (the call is part of it)."""
        if self.in_step or self.closed:
            return False
        try:
            self.in_step = True
            self.step_stage = stage
            self.step_bs = raw_bs
            self.step_tokens = num_tokens if num_tokens is not None else (raw_bs or 0)
            self.step_hint = hint
            self.step_captures = 0
            self.step_inductor = None
            self.step_timing = self._start_timing(stage, raw_bs)
        except Exception as error:  # noqa: BLE001
            self.in_step = False
            self.hook_error("step", error)
            return False
        return True

    def _start_timing(self, stage: str, raw_bs: int | None) -> Any:
        """Host time while the process has not used CUDA; then CUDA events on a sample of steps
        (``runner.timing``: the first of each stage and batch size, then every Nth), never while
        the stream is capturing (an event recorded there would break the capture)."""
        if self._cuda_clock is None:
            if not device.cuda_in_use():
                return time.perf_counter()
            self._cuda_clock = CudaClock(None, self.settings.time_every)
        clock = self._cuda_clock
        if not clock.due((stage, raw_bs)) or device.capturing():
            return None
        return clock.record_start()

    def step_abort(self) -> None:
        """The step raised: the program's error ends the run; the step is not recorded."""
        if self.in_step:
            self.in_step = False
            CudaClock.drop(self.step_timing)
            self.step_timing = None
            self.step_replays_total += len(self.step_graphs)
            self.step_graphs.clear()

    def step_end(self) -> None:
        if not self.in_step:
            return
        try:
            self._step_end()
        except Exception as error:  # noqa: BLE001
            self.in_step = False
            self.hook_error("step", error)

    def _step_end(self) -> None:
        timing = self.step_timing
        if timing is not None:
            if type(timing) is float:
                timing = time.perf_counter() - timing
            else:
                timing.end.record(timing.stream)        # the end, on the stream the start was recorded on
        self.in_step = False
        self.step_timing = None
        raw_bs = self.step_bs
        graphs = self.step_graphs
        replays = len(graphs)
        max_bs = 0
        if replays:
            self.step_replays_total += replays
            unknown = []
            for graph in graphs:
                size = getattr(graph, "_replayscope_bs", 0)
                if size > max_bs:
                    max_bs = size
                elif not size:
                    unknown.append(graph)
            graphs.clear()
            if unknown and raw_bs:
                for graph in unknown:
                    if "_replayscope_pending" in graph.__dict__:
                        self._bind_unsized(graph, raw_bs)
                        max_bs = max(max_bs, raw_bs)
        if raw_bs is None:
            raw_bs = max_bs or 1
            self.warn("step_batch_unknown", "a step's arguments hold no tensor to read its batch size "
                                            "from; such steps are recorded with the size of the graph "
                                            "they replayed (or 1)", once="step_batch_unknown")
        outcome = None
        if replays and self.step_inductor is None:
            # The common case, decided at once (and kept per batch and graph size).
            key = (raw_bs, max_bs)
            outcome = self._replayed.get(key)
            if outcome is None:
                outcome = self._replayed[key] = replayed(raw_bs, max_bs)
        if outcome is None:
            outcome = decide(StepFacts(
                stage=self.step_stage, raw_bs=raw_bs, replays=replays, replayed_bs=max_bs,
                inductor_eager=self.step_inductor, recipe_hint=self.step_hint, compile_skip=self.compile_skip,
                no_graph=self._no_graph() if not replays and self.step_inductor is None else None,
                captured_sizes=self.captured_by_stage.get(self.step_stage) or self.captured_sizes))
        mode, graph_bs, reason = outcome.mode, outcome.graph_bs, outcome.reason
        tokens = self.step_tokens
        padded = (graph_bs - raw_bs) * max(tokens // raw_bs, 1) if mode == "padded" else 0
        emitter = self.emitter if self.emitter is not None else self._ensure_run()
        self.steps += 1
        self.modes[mode] += 1
        if reason is not None:
            self.reasons[reason] += 1
        if emitter is not None:
            emitter.step(self.step_stage, mode, raw_bs, graph_bs, tokens, padded, reason, timing, outcome.evidence)
        if not self._capture_phase_sent:
            self._maybe_capture_phase()

    def _no_graph(self) -> Cause | None:
        """Why no graph could serve a step when none exists in the process (the device, Inductor's
        config, its silent skips); None when graphs exist or nothing explains it."""
        if self.captured_sizes or "torch" not in sys.modules:
            return None
        return no_graph_cause(self.graph_intent, device.cuda_state())

    # -- the end ----------------------------------------------------------------
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
                        "captures": self.captures, "failed_captures": self.failed_captures})
