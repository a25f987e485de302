"""tqdm progress bars as vLLM and SGLang print them, and tqdm's clock.

tqdm draws ``{desc}: {pct}%|{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}]``; with
``ncols=0`` (or a log collector that drops the meter) the meter goes and the line reads
``{desc}: {pct}% {n}/{total} [{elapsed}<...]``; a bar without a description starts at the
percentage. ``bars(text)`` finds every bar drawn in a line (a line can hold several when
carriage returns were lost) whatever the bar's width; what a bar is *of* is the engine's
business (``desc``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BAR = re.compile(
    r"(?:(?P<desc>[^\r\n]*?):\s*)?(?<![\d.])(?P<pct>\d{1,3})%"
    r"(?:\|[^|\r\n]*\|\s*(?P<n>\d+)/(?P<total>\d+)"              # with its meter
    r"|\s+(?P<n2>\d+)/(?P<total2>\d+)(?=\s*\[))"                   # without it: the clock must follow
    r"(?:\s*\[(?P<elapsed>\d+(?::\d\d){1,2})(?:<[^,\]]*)?[^\]]*\]?)?")


@dataclass(frozen=True)
class Bar:
    desc: str | None        # the text before ": NN%", or None for a bar without one
    n: int                  # items done
    total: int
    elapsed_s: float | None  # tqdm's elapsed clock (whole seconds), None when not drawn

    @property
    def done(self) -> bool:
        return self.n >= self.total


def clock_seconds(clock: str | None) -> float | None:
    """tqdm's ``MM:SS`` / ``H:MM:SS`` as seconds."""
    if not clock:
        return None
    total = 0
    for part in clock.split(":"):
        if not part.isdigit():
            return None
        total = total * 60 + int(part)
    return float(total)


def bars(text: str) -> list[Bar]:
    """Every progress bar drawn in ``text``, in order."""
    if "%" not in text:
        return []
    out = []
    for m in _BAR.finditer(text):
        n, total = m["n"] or m["n2"], m["total"] or m["total2"]
        if int(total) < 1:
            continue
        desc = m["desc"].strip() if m["desc"] is not None else None
        out.append(Bar(desc or None, int(n), int(total), clock_seconds(m["elapsed"])))
    return out
