"""Wrong tokens are limited per client address, and never lock the right one out.

Each client (``client_key``: the connection's peer address, every loopback address one
client, an IPv6 address by its /64; ``replayscope serve`` reads
``X-Forwarded-For`` only from the proxies ``--forwarded-allow-ips`` names, so a header
cannot forge a fresh address) may give ``burst`` wrong tokens at once, then one more every
``refill_s``; while it has none left, a wrong token from it is answered 429 (Retry-After)
instead of 401. The right token is always checked and accepted (``replayscope.collector.api.auth.check_token``):
a guesser hammering from an address shared with a runner (one host, NAT, a proxy) never
locks that runner, or the dashboard's sign-in, out. The price: a guesser learns whether each
guess is right as fast as the collector answers, 429 or not, so what makes guessing
hopeless is the token's length (docs/collector.md: 32 random bytes), not this limit.
The dashboard's sign-in and the API's bearer token share one ``WrongTokens`` per app.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from typing import Callable

BURST = 5
REFILL_S = 12.0
MAX_CLIENTS = 10_000          # addresses remembered; the oldest are forgotten first


def client_key(address: str | None) -> str:
    """Whom a wrong token counts against: the peer's address, as one host holds it. Every
    loopback address (127.0.0.0/8, ::1) is this machine, so one client (200 source addresses
    in 127/8 get one allowance, not 200); an IPv6 address counts by its /64 (one host's
    subnet: a host picks any address in it); an IPv4-mapped one as its IPv4 address."""
    if not address:
        return ""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address                      # not an address (a test client's name): itself
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "loopback"
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


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
            allowance = self._allowance(client_key(client), self.clock())
        return 0.0 if allowance >= 1 else (1 - allowance) * self.refill_s

    def wrong(self, client: str | None) -> None:
        """``client`` gave a wrong token."""
        now = self.clock()
        key = client_key(client)
        with self._lock:
            self._buckets[key] = (max(0.0, self._allowance(key, now) - 1), now)
            while len(self._buckets) > MAX_CLIENTS:
                self._buckets.pop(next(iter(self._buckets)))

    def message(self, wait_s: float) -> str:
        return (f"too many wrong tokens from this address: try again in {max(1, round(wait_s))} s "
                f"(at most {self.burst} at once, then one every {self.refill_s:g} s)")
