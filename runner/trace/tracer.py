"""One traced process: its run, the graphs it captured, the step in progress, its events.

The hooks (``replayscope.runner.trace.hooks``, ``replayscope.runner.trace.recipes``) call into the one ``Tracer`` of
the process, made of four parts, each in its own module: the run's lifecycle
(``replayscope.runner.trace.lifecycle``: opening the run, warnings, the end), the captures
(``replayscope.runner.trace.captures``), what Inductor and Dynamo report (``replayscope.runner.trace.inductor``) and
the steps (``replayscope.runner.trace.steps``, run by the step core ``replayscope.runner.trace.step_core``
chose: compiled, or the Python reference). The replay path is a counter and a list append;
everything else (capture, compile, a step's end) happens once per capture or per step. A
process gets a run only when it has something to report: its first capture, step, compile
or warning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from replayscope.runner.trace.captures import CaptureTracking
from replayscope.runner.trace.inductor import InductorTracking
from replayscope.runner.trace.lifecycle import RunLifecycle
from replayscope.runner.trace.settings import TraceSettings
from replayscope.runner.trace.step_core import CORE, steps_class


class TracerBase(RunLifecycle, CaptureTracking, InductorTracking):
    """The state of one traced process, but its steps' part (the step core's). See the module docstring."""

    def __init__(self, settings: TraceSettings, *, make_sink: Callable[[str], Any] | None = None):
        self.settings = settings
        self._make_sink = make_sink
        self._reset()

    def _reset(self) -> None:
        self._reset_run()
        self._reset_captures()
        self._reset_inductor()
        self._reset_steps()

    def after_fork_in_child(self) -> None:
        """A forked child is a process of its own: a fresh state (and run), the same hooks."""
        self._reset()


_CLASSES: dict[str, type] = {}


def tracer_class(core: str) -> type:
    """The tracer with the step core ``core`` ("compiled" or "python"; ``step_core.cores()``)."""
    if core not in _CLASSES:
        _CLASSES[core] = type("Tracer", (TracerBase, steps_class(core)),
                              {"__module__": __name__, "__doc__": "The state of one traced process (its "
                                                                  f"steps: the {core} step core)."})
    return _CLASSES[core]


if TYPE_CHECKING:     # for readers and type checkers: either core's tracer has StepTracking's interface
    from replayscope.runner.trace.steps import StepTracking

    class Tracer(TracerBase, StepTracking):
        """The state of one traced process."""
else:
    Tracer = tracer_class(CORE)      # the one a traced process makes: the compiled core where it was built
