"""Progress lines on stderr for the runner's long steps, in tqdm's layout, without a dependency.

    Capturing CUDA graphs (decode):  42%|####      | 3/7 [00:01<00:02,  2.10it/s, bs=16 0.41s]
    Running mixed workload:  35%|###       | 350/1000 [00:04<00:07, 87.50steps/s, graph 41% padded 33% eager 26%]

On a terminal the line is redrawn in place (carriage return) at most every
``TTY_INTERVAL_S``; elsewhere (a log file, CI) a plain line is written at most every
``PLAIN_INTERVAL_S``. The first update and the last are always shown. Nothing is drawn
until there is something to say, and nothing at all when disabled (``--quiet``).
"""

from __future__ import annotations

import math
import sys
import time
from typing import Callable, TextIO

TTY_INTERVAL_S = 0.2
PLAIN_INTERVAL_S = 5.0
BAR_WIDTH = 10


def format_interval(seconds: float) -> str:
    """[H:]MM:SS, as tqdm writes elapsed and remaining time."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


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
        self._width = 0

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
        if self._drawn is not None or self.done:
            if self._drawn != (self.done, self.note):
                self._draw(self.clock())
            if self.tty and self._drawn is not None:
                self.stream.write("\n")
                self.stream.flush()
        self._due = math.inf
        self.enabled = False             # closed: nothing more is drawn

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- drawing --------------------------------------------------------------
    def line(self, now: float | None = None) -> str:
        elapsed = max((self.clock() if now is None else now) - self.started, 0.0)
        rate = self.done / elapsed if elapsed > 0 and self.done else None
        if rate is None:
            speed = f"?{self.unit}/s"
        elif rate >= 1:
            speed = f"{rate:5.2f}{self.unit}/s"
        else:
            speed = f"{1 / rate:5.2f}s/{self.unit}"
        note = f", {self.note}" if self.note else ""
        if not self.total:
            return f"{self.label}: {self.done} [{format_interval(elapsed)}, {speed}{note}]"
        share = min(self.done / self.total, 1.0)
        filled = int(share * BAR_WIDTH)
        remaining = format_interval((self.total - self.done) / rate) if rate else "?"
        return (f"{self.label}: {int(share * 100):3d}%|{'#' * filled}{' ' * (BAR_WIDTH - filled)}| "
                f"{self.done}/{self.total} [{format_interval(elapsed)}<{remaining}, {speed}{note}]")

    def _draw(self, now: float) -> None:
        if not self.enabled:
            return
        text = self.line(now)
        if self.tty:
            self.stream.write("\r" + text + " " * max(self._width - len(text), 0))
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self._drawn = (self.done, self.note)
        self._due = now + self.interval_s
