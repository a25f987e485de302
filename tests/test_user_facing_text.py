"""User-facing text (messages, help, docstrings, docs) cites only what ships: our docs/
pages and the engines' public docs, never internal notes (seeds, their sections, REFERENCE.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOT_SHIPPED = re.compile(r"REFERENCE\.md|§|\bseed \d{3}\b|\bthe seeds?\b|\bseeds'|for the lead\b")


def shipped_text_files() -> list[Path]:
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    for package in ("app", "collector", "runner", "replayscope"):
        files += sorted(p for p in (REPO / package).rglob("*.py"))
    return files


@pytest.mark.parametrize("path", shipped_text_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_shipped_text_cites_only_what_ships(path):
    hits = [f"{n}: {line.strip()}" for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if NOT_SHIPPED.search(line)]
    assert not hits, "\n".join(hits)
