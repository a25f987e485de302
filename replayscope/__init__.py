"""replayscope: observability for CUDA-graph capture, replay and fallback in LLM inference.

The library, in one import::

    from replayscope import GraphRunner, StaticInput, CapturePlan, open_emitter

Describe your step's static inputs, give the step and a capture plan, ``capture()``
once, then ``step(inputs)`` per batch: it replays, pads or falls back, records why,
and returns the real rows' outputs. See docs/library.md.

One installed name: ``replayscope.runner`` (the graph runner and ``replayscope trace``),
``replayscope.collector`` (the store, the API, the importers), ``replayscope.app`` (the
dashboard and the command line), ``replayscope.migrations``, and ``replayscope.contract``
(what both sides share, torch-free). Names load lazily, so ``import replayscope.collector``
never imports torch.
"""

import importlib
from pathlib import Path

# In a source checkout the subpackages are the checkout's own folders (runner/, collector/,
# app/, migrations/ beside this one; pyproject's package-dir maps them under this name in the
# wheel). Searching the checkout root too makes ``replayscope.runner`` import the checkout's
# files under PYTHONPATH=checkout or ``python -m`` there, rather than what an editable install
# of another checkout maps. Installed, the subpackages are inside this folder: nothing to add.
_HERE = Path(__file__).resolve().parent
if (_HERE.parent / "runner").is_dir() and not (_HERE / "runner").is_dir():
    __path__.append(str(_HERE.parent))

_EXPORTS = {
    "GraphRunner": "replayscope.runner.graphs",
    "StaticInput": "replayscope.runner.inputs",
    "CaptureReport": "replayscope.runner.capture",
    "CapturePlan": "replayscope.runner.plan",
    "default_capture_sizes": "replayscope.contract.capture_sizes",
    "BatchShape": "replayscope.runner.dispatch",
    "Decision": "replayscope.runner.dispatch",
    "dispatch": "replayscope.runner.dispatch",
    "Emitter": "replayscope.runner.emitter",
    "open_emitter": "replayscope.runner.emitter",
    "JsonlSink": "replayscope.contract.sinks",
    "HttpSink": "replayscope.contract.sinks",
    "REASONS": "replayscope.contract.wire",
    "ReplayscopeError": "replayscope.contract.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'replayscope' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
