"""Routes: how the steps of one stage, batch size and decision run, worked out on the first one.

After a synchronise the host's caches are cold, and every object a step touches before its
launch delays the launch (docs/gpu-results.md): a step reads one route, its inputs and the
static rows before the launch, and does its bookkeeping after it. A route holds all of it:
the inputs it accepts (for the fast match, ``replayscope.runner.inputs.fits``), the decision, the static
rows to copy into, what to call, what the replay returns, its timing counter and its step
event's fields (made once: a step after its launch hands the emitter one tuple).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from replayscope.runner.buffers import StaticBuffers
from replayscope.runner.capture import Captured
from replayscope.runner.dispatch import Decision
from replayscope.contract.errors import ReplayscopeError
from replayscope.runner.inputs import Expected, InputContract


@dataclass(eq=False, slots=True)
class Route:
    stage: str
    raw_bs: int
    decision: Decision
    expected: Expected                              # the inputs that keep the contract
    cuda_index: int | None                          # the buffers' CUDA device; None on the CPU
    graph_bs: int | None                            # the captured size replayed; None when eager
    count: list[int]                                # steps of (stage, mode, batch size) so far: the clock's counter
    num_tokens: int                                 # tokens in the batch when the caller gives none
    padded_tokens: int
    copies: tuple[tuple[str, Any], ...] = ()        # (input, the static rows it is copied into)
    call: Callable[[], Any] | None = None           # the replay or static stand-in; None when eager
    outputs: Any = None                             # what a graph's replay returns (its static rows)
    slice_rows: bool = False                        # a stand-in's fresh outputs are cut to raw_bs rows
    event: tuple = ()                               # the step event's fields (Emitter.step_fields), made once
    fit_check: Any = None                           # the compiled core's check of inputs like the last that fitted
                                                    # (replayscope.runner.fit_checks); the Python core matches in full

    def event_with(self, num_tokens: int) -> tuple:
        """The step event's fields when the caller gives the batch's tokens."""
        decision = self.decision
        return (self.stage, decision.mode, self.raw_bs, self.graph_bs, num_tokens, self.padded_tokens,
                decision.reason, None)


def slice_rows(outputs: Any, rows: int) -> Any:
    if isinstance(outputs, tuple):
        return tuple(o[:rows] for o in outputs)
    return outputs[:rows]


class Routes:
    """A runner's routes, in two dictionaries a step looks up before anything else: ``kept``, the
    replays' routes per (stage, batch size, decision), a few per stage and size (an eager route
    is made each time, since a caller's reasons are free text); ``plain``, per (stage, batch
    size), the route of steps with no reason, adapters or grammar switch. Each is one dictionary
    for the runner's life (``forget`` empties them), so the runner holds them directly."""

    def __init__(self, contract: InputContract, buffers: StaticBuffers, graphs: dict[int, Captured]):
        self._contract = contract
        self._buffers = buffers
        self._graphs = graphs
        self.plain: dict[tuple[str, int], Route] = {}
        self.kept: dict[tuple[str, int, Decision], Route] = {}

    def forget(self) -> None:
        """Routes hold decisions (made under the plan) and views (of the buffers): made again after either changes."""
        self.plain.clear()
        self.kept.clear()

    def remember_plain(self, stage: str, raw_bs: int, route: Route) -> None:
        """Later plain steps of this stage and size take ``route`` after the fast match alone
        (where the fast match can judge the device: elsewhere every step is explained in full)."""
        if self._contract.device_known:
            self.plain[(stage, raw_bs)] = route

    def make(self, stage: str, raw_bs: int, decision: Decision, query_len: int, clock: Any) -> Route:
        """The route of a step not seen before: kept when it replays (``kept``), made anew when eager."""
        graph_bs = decision.graph_bs
        route = Route(stage, raw_bs, decision, self._contract.expected(raw_bs), self._contract.cuda_index, graph_bs,
                      clock.counter((stage, decision.mode, raw_bs)),
                      raw_bs * query_len, 0 if graph_bs is None else (graph_bs - raw_bs) * query_len)
        route.event = route.event_with(route.num_tokens)
        if graph_bs is not None:
            if not self._buffers:
                raise ReplayscopeError("call capture() before the first step")
            captured = self._graphs[graph_bs]
            route.copies = self._buffers.rows(raw_bs)
            route.call = captured.call
            if captured.graph is None:           # the static stand-in returns fresh outputs
                route.slice_rows = raw_bs != graph_bs
            else:                                # a graph fills its static outputs
                route.outputs = captured.outputs if raw_bs == graph_bs else slice_rows(captured.outputs, raw_bs)
            self.kept[(stage, raw_bs, decision)] = route
        return route
