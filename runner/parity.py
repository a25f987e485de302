"""Parity: how far a replay's outputs are from the same step run eagerly on the same inputs."""

from __future__ import annotations

from typing import Any, Callable

import torch

from replayscope.runner.capture import as_tuple

HUGE = 3.0e38   # divergence past float32's range is reported as this, keeping the wire finite


def divergence(replayed: Any, run_eager: Callable[[], Any]) -> dict[str, float] | None:
    """``max_abs_diff`` and ``rel_err`` (relative L2) of the floating-point outputs of a replay
    against ``run_eager()``'s; None when the step returns no floating-point output.

    The replay's outputs are copied before the eager run. Entries equal on both sides (masked
    logits: -inf and -inf) differ by 0, not NaN."""
    graph_out = [o.detach().float().clone() for o in as_tuple(replayed) if o.is_floating_point()]
    eager_out = [o.detach().float() for o in as_tuple(run_eager()) if o.is_floating_point()]
    if not graph_out:
        return None
    max_abs, diff_sq, norm_sq = 0.0, 0.0, 0.0
    for g, e in zip(graph_out, eager_out):
        diff = torch.where(g == e, torch.zeros_like(g), g - e).nan_to_num(posinf=HUGE, neginf=-HUGE)
        max_abs = max(max_abs, diff.abs().max().item())
        diff_sq += diff.norm().item() ** 2
        norm_sq += e[e.isfinite()].norm().item() ** 2
    rel = min((diff_sq / norm_sq) ** 0.5 if norm_sq > 0 else diff_sq ** 0.5, HUGE)
    return {"max_abs_diff": min(max_abs, HUGE), "rel_err": rel}
