"""Guessing the token is slow: wrong tokens are limited per client address.

Each client address (the connection's peer, never a header it could forge) may give
``burst`` wrong tokens at once, then one more every ``refill_s``; while it has none left,
every attempt from it is refused without being checked (a right token too, so a refusal
tells a guesser nothing). The dashboard's sign-in and the API's bearer token share one
``WrongTokens`` per app. With the defaults (5, then one per 12 s) that is at most 5 guesses
a minute from one address, instead of hundreds a second.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

BURST = 5
REFILL_S = 12.0
MAX_CLIENTS = 10_000          # addresses remembered; the oldest are forgotten first


class WrongTokens:
    def __init__(self, burst: int = BURST, refill_s: float = REFILL_S, clock: Callable[[], float] = time.monotonic):
        self.burst = burst
        self.refill_s = refill_s
        self.clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}    # client -> (allowance, at)

    def _allowance(self, client: str, now: float) -> float:
        allowance, at = self._buckets.get(client, (float(self.burst), now))
        return min(float(self.burst), allowance + (now - at) / self.refill_s)

    def wait_s(self, client: str | None) -> float:
        """Seconds before ``client`` may try a token again (0: now)."""
        with self._lock:
            allowance = self._allowance(client or "", self.clock())
        return 0.0 if allowance >= 1 else (1 - allowance) * self.refill_s

    def wrong(self, client: str | None) -> None:
        """``client`` gave a wrong token."""
        now = self.clock()
        with self._lock:
            self._buckets[client or ""] = (max(0.0, self._allowance(client or "", now) - 1), now)
            while len(self._buckets) > MAX_CLIENTS:
                self._buckets.pop(next(iter(self._buckets)))

    def message(self, wait_s: float) -> str:
        return (f"too many wrong tokens from this address: try again in {max(1, round(wait_s))} s "
                f"(at most {self.burst} at once, then one every {self.refill_s:g} s)")
