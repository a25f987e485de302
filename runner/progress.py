"""A progress bar on stderr, in the engines' style, without a dependency."""

from __future__ import annotations

import sys
import time


class ProgressBar:
    def __init__(self, total: int, label: str, enabled: bool = True, stream=None):
        self.total = total
        self.label = label
        self.enabled = enabled and total > 0
        self.stream = stream or sys.stderr
        self.done = 0
        self.started = time.perf_counter()
        self._tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def update(self, note: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        width = 24
        filled = width * self.done // self.total
        elapsed = time.perf_counter() - self.started
        line = (f"{self.label}: {100 * self.done // self.total:3d}%|{'#' * filled}{' ' * (width - filled)}| "
                f"{self.done}/{self.total} [{elapsed:5.1f}s] {note}")
        if self._tty:
            self.stream.write("\r" + line + ("\n" if self.done == self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
