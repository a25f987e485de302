"""What PyTorch Inductor and Dynamo tell a traced process: the functions its CUDA-graph
trees run, record and skip (with Inductor's reason), the compiles and their phase, and what
the compiles asked for (``replayscope.runner.trace.no_graph``), so a step through a compiled function
gets the cause Inductor gave.
"""

from __future__ import annotations

from typing import Any

from replayscope.runner.trace.causes import Cause, inductor_skip_evidence, inductor_skip_reason
from replayscope.runner.trace.no_graph import GraphIntent, skip_count
from replayscope.runner.trace.tree_state import GraphTrees, limit_message


class InductorTracking:
    """The Inductor and Dynamo hooks' side of ``Tracer`` (``replayscope.runner.trace.graph_trees`` calls these)."""

    def _reset_inductor(self) -> None:
        self.inductor_calls: list[Any] = []    # function ids the graph-tree manager is running
        self.inductor_skipped: dict[Any, Cause] = {}
        self.compile_skip: Cause | None = None
        self.compile_depth = 0
        self.graph_trees = GraphTrees()
        self.graph_intent = GraphIntent()       # what the Inductor compiles asked for (no_graph)
        self.skip_messages = 0                  # Inductor's skip messages heard
        self.inductor_recordings = 0            # recordings of compiled functions so far
        self.inductor_recording: tuple[Any, bool] | None = None
        self._inductor_recorded: set[Any] = set()
        self._warm_up_causes: dict[Any, Cause] = {}   # function number -> its warm-up cause, made once

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
            cause = self.inductor_skipped.get(function_id) or self._warm_up_causes.get(number)
            if cause is None:
                cause = self._warm_up_causes[number] = Cause(
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
