"""A traced process's steps: each one's stage, batch, time and the graphs it replayed,
decided into a mode and cause (``replayscope.runner.trace.causes.decide``) and sent as a ``step`` event.
The replay path itself (a counter and a list append) is in ``replayscope.runner.trace.hooks``.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any

from replayscope.runner.timing import CudaClock
from replayscope.runner.trace import device
from replayscope.runner.trace.causes import Cause, StepFacts, decide, replayed
from replayscope.runner.trace.no_graph import no_graph_cause


DECISIONS_KEPT = 4096     # outcomes kept of steps that are not a plain replay; beyond, decided each step


class StepTracking:
    """The steps of ``Tracer``: ``step_begin`` / ``step_end`` (or ``step_abort``) around each
    call of the program's step function. The reference implementation: ``replayscope.runner.trace.step_core``
    runs the same steps compiled where it can (``_stepcore*.c`` mirror ``step_begin``, ``step_end`` and
    ``step_abort``, and the common case of ``_start_timing`` and ``_route``)."""

    step_core = "python"     # which core ran, for the run's config

    def _reset_steps(self) -> None:
        self.in_step = False
        self.step_stage = "decode"
        self.step_bs: int | None = None
        self.step_tokens = 0
        self.step_hint: Cause | None = None
        self.step_note: str | None = None       # what the engine's dispatcher decided, for a step on graphs
        self.engine_startup = 0                 # > 0 inside an engine's start-up (warm-up forwards are not steps)
        self.step_timing: Any = None
        self._cuda_clock: CudaClock | None = None     # once the process uses CUDA
        self._timing_counts: dict[int | None, list[int]] = {}   # decode batch size -> its clock's count
        self._replayed: dict[tuple[int, int], Any] = {}         # (batch, graph size) -> outcome
        self._decisions: dict[tuple, Any] = {}                  # what another step's outcome depends on -> it
        self.step_graphs: list[Any] = []       # the graphs replayed in the step so far, in order
        self.step_inductor: Cause | None = None
        self.step_captures = 0
        self.total_replays = 0
        self.step_replays_total = 0             # replays inside steps (the others were outside any)
        self.steps = 0
        self._modes: dict[str, int] = {}        # plain dicts: a Counter's += is ~3x slower per step
        self._reasons: dict[str, int] = {}

    @property
    def modes(self) -> Counter:
        """Steps per mode so far."""
        return Counter(self._modes)

    @property
    def reasons(self) -> Counter:
        """Steps per reason so far (graph steps have none)."""
        return Counter(self._reasons)

    def step_begin(self, stage: str, raw_bs: int | None, num_tokens: int | None = None,
                   hint: Cause | None = None) -> bool:
        """A step starts. False when one is already running (the call is part of it)."""
        if self.in_step or self.closed:
            return False
        self.in_step = True
        self.step_stage = stage
        self.step_bs = raw_bs
        self.step_tokens = num_tokens if num_tokens is not None else (raw_bs or 0)
        self.step_hint = hint
        self.step_note = None
        self.step_captures = 0
        self.step_inductor = None
        try:
            if self._cuda_clock is None and not device.cuda_in_use():
                self.step_timing = time.perf_counter()      # the host clock, read here (no call more)
            else:
                self.step_timing = self._start_timing(stage, raw_bs)
        except Exception as error:  # noqa: BLE001
            self.in_step = False
            self.hook_error("step", error)
            return False
        return True

    def _start_timing(self, stage: str, raw_bs: int | None) -> Any:
        """Host time while the process has not used CUDA; then CUDA events on a sample of steps
        (``replayscope.runner.timing``: the first of each stage and batch size, then every Nth), never while
        the stream is capturing (an event recorded there would break the capture). A decode
        batch size's count is kept here: a step reads one dictionary, builds no key."""
        clock = self._cuda_clock
        if clock is None:
            if not device.cuda_in_use():
                return time.perf_counter()
            clock = self._cuda_clock = CudaClock(None, self.settings.time_every)
        count = self._timing_counts.get(raw_bs) if stage == "decode" else None
        if count is None:
            count = clock.counter((stage, raw_bs))
            if stage == "decode":
                self._timing_counts[raw_bs] = count
        seen = count[0]
        count[0] = seen + 1
        if seen % clock.every or device.capturing():
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
        """The step's outcome routed (``_route``) and sent as a ``step`` event."""
        if not self.in_step:
            return
        try:
            timing = self.step_timing
            if timing is not None:
                timing = time.perf_counter() - timing if type(timing) is float else self._stop_timing(timing)
            self.in_step = False
            self.step_timing = None
            raw_bs, mode, graph_bs, reason, evidence = self._route(self.step_bs, self.step_graphs)
            tokens = self.step_tokens
            padded = (graph_bs - raw_bs) * max(tokens // raw_bs, 1) if mode == "padded" else 0
            emitter = self.emitter if self.emitter is not None else self._ensure_run()
            self.steps += 1
            modes = self._modes
            modes[mode] = modes.get(mode, 0) + 1
            if reason is not None:
                reasons = self._reasons
                reasons[reason] = reasons.get(reason, 0) + 1
            if emitter is not None:
                emitter.step(self.step_stage, mode, raw_bs, graph_bs, tokens, padded, reason, timing, evidence)
            if not self._capture_phase_sent:
                self._maybe_capture_phase()
        except Exception as error:  # noqa: BLE001
            self.in_step = False
            self.hook_error("step", error)

    @staticmethod
    def _stop_timing(timing: Any) -> Any:
        """What the emitter takes for the step's duration: host seconds, a CUDA timing, or None."""
        if timing is not None:
            if type(timing) is float:
                return time.perf_counter() - timing
            timing.end.record(timing.stream)        # the end, on the stream the start was recorded on
        return timing

    def _route(self, raw_bs: int | None, graphs: list) -> tuple[int, str, int | None, str | None, str | None]:
        """(batch, mode, graph size, reason, evidence) of the step that replayed ``graphs`` (the
        list is emptied), from the graphs' sizes and what the tracer knows of the process. An
        outcome is kept per what it depends on: per batch and graph size for a step that replayed
        graphs, and for any other step per every fact ``decide`` reads (its stage, batch, replays,
        Inductor's word on it, its hint, the compile-time skip, the sizes captured, what the
        no-graph cause reads)."""
        replays = len(graphs)
        max_bs = 0
        if replays:
            self.step_replays_total += replays
            unknown = False
            for graph in graphs:
                size = getattr(graph, "_replayscope_bs", 0)
                if size > max_bs:
                    max_bs = size
                elif not size:
                    unknown = True
            if unknown and raw_bs:
                for graph in graphs:
                    if not getattr(graph, "_replayscope_bs", 0) and "_replayscope_pending" in graph.__dict__:
                        self._bind_unsized(graph, raw_bs)
                        max_bs = max(max_bs, raw_bs)
            graphs.clear()
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
            outcome = self._decided(raw_bs, replays, max_bs)
        mode = outcome.mode
        evidence = outcome.evidence if outcome.evidence is not None or mode == "eager" else self.step_note
        return raw_bs, mode, outcome.graph_bs, outcome.reason, evidence

    def _facts(self, raw_bs: int, replays: int, max_bs: int, no_graph: Cause | None) -> StepFacts:
        return StepFacts(stage=self.step_stage, raw_bs=raw_bs, replays=replays, replayed_bs=max_bs,
                         inductor_eager=self.step_inductor, recipe_hint=self.step_hint,
                         compile_skip=self.compile_skip, no_graph=no_graph,
                         captured_sizes=self.captured_by_stage.get(self.step_stage) or self.captured_sizes)

    def _decided(self, raw_bs: int, replays: int, max_bs: int) -> Any:
        """``decide`` for the other steps (eager ones, or Inductor's), kept per what it reads."""
        stage = self.step_stage
        captured = self.captured_by_stage.get(stage) or self.captured_sizes
        asks_no_graph = not replays and self.step_inductor is None
        key = (stage, raw_bs, replays, max_bs, self.step_inductor, self.step_hint, self.compile_skip, captured,
               self._no_graph_state(captured) if asks_no_graph else None)
        outcome = self._decisions.get(key)
        if outcome is None:
            outcome = decide(self._facts(raw_bs, replays, max_bs, self._no_graph() if asks_no_graph else None))
            if len(self._decisions) < DECISIONS_KEPT:
                self._decisions[key] = outcome
        return outcome

    def _no_graph_state(self, captured: tuple) -> tuple | None:
        """What ``_no_graph`` reads, for an eager step's key (None: it is not consulted)."""
        if captured or self.captured_sizes:
            return None
        intent = self.graph_intent
        return ("torch" in sys.modules, device.cuda_in_use(), intent.compiles, intent.with_graphs,
                intent.silent_skips)

    def _no_graph(self) -> Cause | None:
        """Why no graph could serve a step when none exists in the process (the device, Inductor's
        config, its silent skips); None when graphs exist or nothing explains it."""
        if self.captured_sizes or "torch" not in sys.modules:
            return None
        return no_graph_cause(self.graph_intent, device.cuda_state())
