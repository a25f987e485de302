"""Progress lines on stderr for the runner's long steps, drawn by tqdm, as the engines draw theirs.

    Capturing CUDA graphs (decode):  43%|####      | 3/7 [00:01<00:01,  2.10it/s, bs=16 0.41s]
    Running mixed workload:  35%|###       | 350/1000 [00:04<00:07, 87.50steps/s, graph 41% padded 33% eager 26%]

On a terminal a tqdm bar is redrawn in place at most every ``TTY_INTERVAL_S`` (and trimmed to
the terminal's width); elsewhere (a log file, CI) a plain line in the same layout
(``tqdm.format_meter``) is written at most every ``PLAIN_INTERVAL_S``. The first update and
the last are always shown. Nothing is drawn until there is something to say, and nothing at
all when disabled (``--quiet``). When to draw is decided here, on this object's clock, so a
step loop may call ``update_to`` on every step: between draws it costs one clock read.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, Callable, TextIO

from tqdm import tqdm

TTY_INTERVAL_S = 0.2
PLAIN_INTERVAL_S = 5.0
BAR = "{l_bar}{bar:10}{r_bar}"                                # tqdm's layout, a bar of 10 cells
COUNT = "{desc}: {n_fmt} [{elapsed}, {rate_fmt}{postfix}]"    # without a total: the count and the rate
FILL = " #"                                                   # cells empty or full, in ASCII


class Progress:
    """One progress line: ``update`` per item, or ``update_to`` from a loop that counts itself.

    ``update_to`` costs one clock read between redraws, so a step loop may call it every
    step; ``describe`` there is called only when the line is drawn.
    """

    def __init__(self, label: str, total: int | None = None, *, unit: str = "it", enabled: bool = True,
                 stream: TextIO | None = None, interval_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.label = label
        self.total = total
        self.unit = unit
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = interval_s if interval_s is not None else (TTY_INTERVAL_S if self.tty else PLAIN_INTERVAL_S)
        self.clock = clock
        self.done = 0
        self.note = ""
        self.started = clock()
        self._due = -math.inf if enabled else math.inf   # when the next draw may happen
        self._drawn: tuple | None = None                 # (done, note) of the last line drawn
        self._bar: _TerminalBar | None = None            # on a terminal, from the first draw on

    # -- advancing ------------------------------------------------------------
    def reset(self, total: int | None) -> None:
        """Start over at 0 of ``total`` (known only now) and show it."""
        self.total, self.done, self.started = total, 0, self.clock()
        self._draw(self.started)

    def describe(self, note: str) -> None:
        """Say what the item in progress is (e.g. the batch size being captured)."""
        self.note = note
        now = self.clock()
        if now >= self._due:
            self._draw(now)

    def update(self, n: int = 1, note: str | None = None) -> None:
        """``n`` more items done; the last one is always shown."""
        self.done += n
        if note is not None:
            self.note = note
        now = self.clock()
        if now >= self._due or self.done == self.total:
            self._draw(now)

    def update_to(self, done: int, describe: Callable[[], str] | None = None) -> None:
        """The count is ``done`` now; ``describe()`` gives the note, called only when drawing."""
        self.done = done
        now = self.clock()
        if now < self._due:
            return
        if describe is not None:
            self.note = describe()
        self._draw(now)

    def close(self, note: str | None = None) -> None:
        """Show the final state (unless that line is already shown) and end the line."""
        if note is not None:
            self.note = note
        if self.enabled and (self._drawn is not None or self.done):
            if self.tty:
                if self._bar is None:
                    self._draw(self.clock())
                self._bar.close()        # tqdm draws the final state once more and ends the line
            elif self._drawn != (self.done, self.note):
                self._draw(self.clock())
        self._due = math.inf
        self.enabled = False             # closed: nothing more is drawn

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- drawing --------------------------------------------------------------
    def meter(self, now: float | None = None) -> dict[str, Any]:
        """What ``tqdm.format_meter`` lays out: the count, total, elapsed time, note; the rate is
        the mean since the start (``rate=None``), as the line has always shown it."""
        elapsed = max((self.clock() if now is None else now) - self.started, 0.0)
        return {"n": self.done, "total": self.total, "elapsed": elapsed, "prefix": self.label, "unit": self.unit,
                "postfix": self.note or None, "rate": None, "initial": 0, "ascii": FILL,
                "bar_format": BAR if self.total else COUNT}

    def line(self, now: float | None = None) -> str:
        return tqdm.format_meter(**self.meter(now))

    def _draw(self, now: float) -> None:
        if not self.enabled:
            return
        if self.tty:
            if self._bar is None:        # its first draw is this one
                self._bar = _TerminalBar(self)
            else:
                self._bar.refresh()
        else:
            self.stream.write(self.line(now) + "\n")
            self.stream.flush()
        self._drawn = (self.done, self.note)
        self._due = now + self.interval_s


class _TerminalBar(tqdm):
    """A tqdm bar on the terminal that draws what its ``Progress`` holds, when it says so.

    tqdm does the drawing (redraw in place, blanking a longer line before, the terminal's width,
    sharing the screen with other tqdm bars); the count, note, clock and when to draw stay the
    ``Progress``'s. It starts no monitor thread in the caller's process."""

    monitor_interval = 0

    def __init__(self, owner: Progress):
        self._owner = owner              # set first: tqdm draws the first line as it starts
        super().__init__(total=owner.total, desc=owner.label, unit=owner.unit, file=owner.stream, leave=True,
                         ascii=FILL, dynamic_ncols=False)

    @property
    def format_dict(self) -> dict[str, Any]:
        meter = self._owner.meter()
        # the terminal's size as tqdm found it; a terminal that says 0 columns has not said (not: trim to nothing)
        meter["ncols"], meter["nrows"] = self.ncols or None, self.nrows
        return meter
