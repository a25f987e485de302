"""replayscope runner: CUDA-graph capture, dispatch, replay and fallback, with telemetry.

The library, in one import::

    from runner import GraphRunner, StaticInput, CapturePlan, open_emitter

Describe your step's static inputs, give the step and a capture plan, ``capture()``
once, then ``step(inputs)`` per batch: it replays, pads or falls back, records why,
and returns the real rows' outputs. See docs/library.md.

Depends on torch, safetensors, tqdm (the ``runner`` extra) and the standard library; never
imports ``collector`` or ``app``. Names load lazily, so ``runner.wire`` is usable without torch.
"""

import importlib

_EXPORTS = {
    "GraphRunner": "runner.graphs",
    "StaticInput": "runner.inputs",
    "CaptureReport": "runner.capture",
    "CapturePlan": "runner.plan",
    "default_capture_sizes": "runner.plan",
    "BatchShape": "runner.dispatch",
    "Decision": "runner.dispatch",
    "dispatch": "runner.dispatch",
    "Emitter": "runner.emitter",
    "open_emitter": "runner.emitter",
    "JsonlSink": "runner.sinks",
    "HttpSink": "runner.sinks",
    "REASONS": "runner.wire",
    "ReplayscopeError": "runner.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'runner' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
