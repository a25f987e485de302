"""Fixtures for the importer tests: the log fixtures and figures in exact bytes."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
# 2026-01-01T00:00:00Z: the year vLLM's "MM-DD HH:MM:SS" stamps are read in.
MTIME = 1767225600.0


def gib(value: float) -> int:
    """Bytes of an engine's GB/GiB figure, as docs/importing.md defines it."""
    return round(value * 2**30)


def read_fixture(name: str) -> str:
    # bytes, not read_text: universal newlines would turn tqdm's \r into \n
    return (FIXTURES / name).read_bytes().decode("utf-8")
