"""replayscope runner: CUDA-graph capture, dispatch, replay and fallback, with telemetry.

Depends on torch and the standard library only; never imports ``collector`` or ``app``.
"""
