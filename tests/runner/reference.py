"""The emitter's Python recorder in tests that fix the events' clock (``emitter._now``): the compiled
recorder reads the system clock itself."""

from replayscope.runner.emitter import Emitter


def python_recorder(emitter: Emitter) -> Emitter:
    """``emitter`` with the class's own step and step_fields (the reference) instead of the compiled ones."""
    vars(emitter).pop("step", None)
    vars(emitter).pop("step_fields", None)
    emitter.step_recorder = "python"
    return emitter
