"""How a diagnosis names things in its sentences: phases and lists of sizes (numbers,
durations and bytes are written by ``replayscope.contract.formats``)."""

from __future__ import annotations

PHASE_LABELS = {"load_weights": "weight load", "kv_cache": "KV cache allocation", "warmup": "warm-up",
                "compile": "compile", "capture": "capture", "engine_init": "engine start-up",
                "capture_verify": "verify capture", "capture_prefill": "prefill capture"}


def phase_label(name: str) -> str:
    """A phase's name in words: ``compile.dynamo`` -> "compile (dynamo)"."""
    base, _, part = name.partition(".")
    label = PHASE_LABELS.get(base, base.replace("_", " "))
    return f"{label} ({part.replace('_', ' ').replace('.', ' ')})" if part else label


def sizes_text(sizes: list[int], limit: int = 12) -> str:
    shown = ", ".join(str(s) for s in sizes[:limit])
    return shown + (f", … ({len(sizes)} in all)" if len(sizes) > limit else "")
