"""How replayscope writes numbers: counts, plurals, percentages, durations, bytes, rates, times.

The one place for these strings: the dashboard's pages, tables and chart hover texts
(through ``replayscope.app.formats``) and the collector's sentences (diagnosis, reason costs) use it,
and the browser tests compare what a page shows with these functions applied to the query
layer's numbers (the runner's progress lines are tqdm's own layout). Torch-free, beside ``replayscope.contract.wire``, so
every package may import it. A value that is None is unknown, never zero: it is written with the
wording ``unknown(source)`` gives (or the ``missing`` text a caller passes).
"""

from __future__ import annotations

import datetime as dt
import math

from replayscope.contract.wire import default_provenance

# Bidirectional-text controls (embeddings, overrides, isolates): inside a stored name they
# would reorder what is shown after them ("report\u202etxt.exe" reads "reportexe.txt").
BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_BIDI_SHOWN = {ord(ch): f"[U+{ord(ch):04X}]" for ch in BIDI_CONTROLS}

NOT_IN_THE_LOG = "not in the log"
NOT_MEASURED = "not measured"
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def unknown(source: str | None) -> str:
    """What an unknown figure of a run from ``source`` is called: the engine's log did not
    give it ("not in the log"), or nothing measured it ("not measured")."""
    return NOT_IN_THE_LOG if source and default_provenance(source) == "log" else NOT_MEASURED


def inert(text):
    """A stored string as the pages show it: each bidirectional control written as its code
    point (``[U+202E]``), so it reorders nothing around it; anything not a string as is."""
    return text.translate(_BIDI_SHOWN) if isinstance(text, str) else text


def count(value: int | None, missing: str = NOT_MEASURED) -> str:
    """12,345"""
    return missing if value is None else f"{value:,}"


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """'1 run', '2 runs', '1,024 batch sizes' (``nouns`` for irregular plurals)."""
    return f"{n:,} {noun if n == 1 else (nouns or noun + 's')}"


def pct(ratio: float | None, missing: str = NOT_MEASURED) -> str:
    """A share as a percentage with one decimal, three figures at most (100%, not 100.0%); a
    share that is not zero never reads 0.0%."""
    if ratio is None:
        return missing
    value = ratio * 100
    if 0 < abs(value) < 0.05:
        return "<0.1%" if value > 0 else "−<0.1%"
    if abs(value) >= 99.95:
        return f"{value:.0f}%"
    return f"{value:.1f}%"


def _three_figures(value: float) -> str:
    """A positive number with three significant figures, no exponent: 1.23, 12.3, 123."""
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def seconds(value: float | None, missing: str = NOT_MEASURED) -> str:
    """A duration in the unit that reads best: 850 µs, 12.3 ms, 4.56 s, 2 min 05 s, 1 h 02 min."""
    if value is None:
        return missing
    if value < 0:
        return "−" + seconds(-value)
    if value == 0:
        return "0 s"
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        text = _three_figures(value * 1e3)
        return "1.00 s" if text == "1000" else f"{text} ms"
    if value < 59.995:
        return f"{_three_figures(value)} s"
    total = round(value)
    if total < 3600:
        return f"{total // 60} min {total % 60:02d} s"
    minutes = round(value / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min"


def signed_seconds(value: float | None, missing: str = NOT_MEASURED) -> str:
    """A difference of durations: +1.20 s, −350 ms."""
    if value is None:
        return missing
    return ("+" if value >= 0 else "−") + seconds(abs(value))


def byte_unit(largest: float) -> tuple[str, int]:
    """The binary unit (name, bytes) to show values up to ``largest`` bytes in."""
    power = 0
    while power < len(_BYTE_UNITS) - 1 and abs(largest) >= 1024 ** (power + 1):
        power += 1
    return _BYTE_UNITS[power], 1024 ** power


def size(value: float | None, missing: str = NOT_MEASURED) -> str:
    """Bytes in the binary unit that reads best, three significant figures: 51.2 MiB."""
    if value is None:
        return missing
    if value < 0:
        return "−" + size(-value)
    name, scale = byte_unit(value)
    if scale == 1:
        return f"{int(value)} B"
    text = _three_figures(value / scale)
    if text == "1024":                        # 1023.6 KiB rounds up into the next unit
        name, scale = byte_unit(value * 1.001)
        text = _three_figures(value / scale)
    return f"{text} {name}"


def rate(bytes_per_s: float | None, missing: str = NOT_MEASURED) -> str:
    """A transfer rate: 1.25 GiB/s."""
    return missing if bytes_per_s is None else f"{size(bytes_per_s)}/s"


def number(value: float | None, missing: str = NOT_MEASURED) -> str:
    """A plain measurement with three significant figures (no float noise): 0.00123, 51.2, 1,234."""
    if value is None:
        return missing
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def when(ts: float | None, seconds: bool = True, missing: str = NOT_MEASURED) -> str:
    """2026-11-29 14:03:07 UTC (or to the minute, without the zone, for table cells)."""
    if ts is None:
        return missing
    moment = dt.datetime.fromtimestamp(ts, dt.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if seconds else moment.strftime("%Y-%m-%d %H:%M")
