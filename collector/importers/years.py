"""The year of a vLLM stamp: vLLM prints ``MM-DD HH:MM:SS`` without a year; ``YearGuess``
says which year from the evidence (``infer_year``: a dated line, the vLLM version and its
release, the file's date).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone


LEVEL_ANY = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"


@dataclass
class YearGuess:
    year: int | None               # None: no yearless stamp seen yet; the reader decides at the first
    evidence: str                  # what the year was taken from, for the run's warnings
    day: str | None = None         # YYYY-MM-DD for stamps that print only a clock (SGLang's "%H:%M:%S")
    reference: float = 0.0         # the date the year is taken against (the file's, or today)
    reference_label: str = "the file's date"


# vLLM releases (x.y.z -> first published); a log printed by a version cannot be older than
# its development, which begins about when the release before it is published.
_VLLM_RELEASES = {
    (0, 2): "2023-09-28", (0, 3): "2024-01-31", (0, 4): "2024-03-30", (0, 5): "2024-06-11",
    (0, 6): "2024-09-04", (0, 7): "2025-01-27", (0, 8): "2025-03-18", (0, 9): "2025-05-15",
    (0, 10): "2025-07-24", (0, 11): "2025-10-02", (0, 12): "2025-12-03", (0, 13): "2025-12-18",
}
_VERSION = re.compile(r"vLLM API server version:?\s*v?(\d+)\.(\d+)|Initializing an? (?:V1 )?LLM engine "
                      r"\(v(\d+)\.(\d+)|vllm(?:==|\s+version\s+)v?(\d+)\.(\d+)", re.I)
DATED = re.compile(r"(?<!\d)(20\d\d)-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)")
# A yearless stamp: vLLM's "INFO 08-19 07:51:03", SGLang's "[08-19 07:51:03 TP0]".
_YEARLESS_STAMP = re.compile("(?:" + LEVEL_ANY + r"\s+|^\[)(\d\d)-(\d\d)\s+(\d\d):(\d\d):(\d\d)", re.M)


def date_ts(year: int, month: str | int, day: str | int) -> float | None:
    try:
        return datetime(year, int(month), min(int(day), 28), tzinfo=timezone.utc).timestamp()
    except (ValueError, OverflowError):
        return None


def infer_year(text: str, fallback: float, reference: str = "the file's date") -> YearGuess:
    """The year of yearless stamps in ``text`` (vLLM's ``MM-DD``, SGLang's ``[MM-DD ...]``),
    from what the text holds: ``decide_year`` on its first dated line, first yearless stamp
    and the vLLM version it prints. Text with no yearless stamp yet (the start of a followed
    log) leaves the year to the reader, which decides at the first stamp with what it read."""
    head = text[:4_000_000]
    stamp = next((m for m in _YEARLESS_STAMP.finditer(head) if date_ts(2000, m.group(1), m.group(2)) is not None), None)
    dated = next((m for m in DATED.finditer(head) if date_ts(int(m.group(1)), m.group(2), m.group(3)) is not None),
                 None)
    version = vllm_version(head)
    now = datetime.now(timezone.utc).timestamp()
    if fallback <= 0:                    # text with no file behind it: now is the best guess
        fallback, reference = now, "today's date"
    return decide_year((stamp.group(1), stamp.group(2)) if stamp else None,
                       (dated.group(0), dated.group(1), dated.group(2), dated.group(3)) if dated else None,
                       version, min(fallback, now), reference)


def vllm_version(text: str) -> tuple[int, int] | None:
    m = _VERSION.search(text)
    if not m:
        return None
    groups = [int(g) for g in m.groups() if g is not None]
    return groups[0], groups[1]


def decide_year(stamp: tuple[str, str] | None, dated: tuple[str, str, str, str] | None,
                version: tuple[int, int] | None, reference: float, label: str) -> YearGuess:
    """A date the log prints wins (a launcher's or a library's own stamp near a yearless one).
    Otherwise the year that puts the first stamp (month, day) closest before ``reference``,
    unless the vLLM ``version`` the log prints was not developed yet then: the earliest year
    it allows, if that is not in the future. Never a year that puts the stamps in the future.
    ``stamp`` None: undecided (year None) unless a date was printed."""
    if dated:
        text, y, mo, d = dated
        year = int(y)
        if stamp:
            # the dated line and the first vLLM stamp are close in time: pick the year that
            # puts them nearest (a log that crosses New Year keeps its order)
            there = date_ts(year, mo, d)
            year = min((c for c in (year - 1, year, year + 1)),
                       key=lambda c: abs((date_ts(c, stamp[0], stamp[1]) or 0) - there))
        return YearGuess(year, f"the dated line {text!r} in the log", f"{y}-{mo}-{d}", reference, label)
    modified = datetime.fromtimestamp(reference, timezone.utc)
    if stamp is None:
        return YearGuess(None, f"{label} {modified:%Y-%m-%d}", f"{modified:%Y-%m-%d}", reference, label)
    month, day = stamp
    year = modified.year
    if (date_ts(year, month, day) or 0) > reference + 86400:        # a day's grace for time zones
        year -= 1
    evidence = f"{label} {modified:%Y-%m-%d} (the year that puts the stamps closest before it)"
    floor = _release_floor(*version) if version else None
    if floor is not None and (date_ts(year, month, day) or 0) < floor.replace(tzinfo=timezone.utc).timestamp():
        later = next(c for c in range(floor.year, floor.year + 2)
                     if (date_ts(c, month, day) or 0) >= floor.replace(tzinfo=timezone.utc).timestamp())
        if (date_ts(later, month, day) or 0) <= datetime.now(timezone.utc).timestamp() + 86400:
            evidence = (f"vLLM {version[0]}.{version[1]} in the log, developed from {floor:%Y-%m} on: {year} is "
                        f"too early for it, {label} {modified:%Y-%m-%d} notwithstanding")
            year = later
    return YearGuess(year, evidence, f"{modified:%Y-%m-%d}", reference, label)


def _release_floor(major: int, minor: int) -> datetime | None:
    known = sorted(_VLLM_RELEASES)
    if (major, minor) in _VLLM_RELEASES:
        i = known.index((major, minor))
        date = _VLLM_RELEASES[known[i - 1]] if i > 0 else _VLLM_RELEASES[known[0]]
    elif (major, minor) > known[-1]:
        date = _VLLM_RELEASES[known[-1]]
    else:
        return None
    return datetime.strptime(date, "%Y-%m-%d")
