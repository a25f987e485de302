"""replayscope.runner: CUDA-graph capture, dispatch, replay and fallback, with telemetry.

The library's names are ``replayscope``'s (``from replayscope import GraphRunner``). Depends
on torch, safetensors, tqdm (the ``runner`` extra), the standard library and
``replayscope.contract``; never imports ``replayscope.collector`` or ``replayscope.app``.
"""
