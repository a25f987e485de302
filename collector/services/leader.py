"""Periodic work once across collectors: ``with turn(store, name, interval_s) as mine``.

Several collectors may share one PostgreSQL behind a load balancer; each runs the same
services (alert evaluation, notification delivery, heartbeat timeouts, retention). A job's
tick runs only where ``mine`` is true, which needs both:

1. the job's advisory lock, ``pg_try_advisory_lock`` on a connection of its own, held for
   the tick: no two ticks of one job at once, and a collector that dies mid-tick loses the
   lock with its connection;
2. the claim of the job's current period in ``service_ticks``: the period is a slot,
   ``floor(clock / interval_s)`` on the database's clock (one clock for all collectors),
   and a conditional UPDATE moves the job to a new slot for one collector only.

So each job runs at most once per period, and at least once whenever some collector
attempts it in that period. On SQLite (one collector per store) the lock is a thread lock
in this process and the claim is the same. The statements are ``replayscope.collector.models.jobs``'.
"""

from __future__ import annotations

import hashlib
import math
import os
import socket
import threading
from contextlib import contextmanager
from typing import Iterator

from replayscope.collector.models import jobs
from replayscope.collector.store import Store

HOLDER = f"{socket.gethostname()}:{os.getpid()}"[:200]
_LOCAL_LOCKS: dict[str, threading.Lock] = {}
_LOCAL_GUARD = threading.Lock()


def lock_key(name: str) -> int:
    """The job's advisory lock: a stable signed 64-bit number from its name."""
    return int.from_bytes(hashlib.sha256(f"replayscope:{name}".encode()).digest()[:8], "big", signed=True)


@contextmanager
def exclusive(store: Store, name: str) -> Iterator[bool]:
    """True while this process holds the job's lock; False (at once) when another holds it."""
    if store.dialect != "postgresql":
        with _LOCAL_GUARD:
            lock = _LOCAL_LOCKS.setdefault(f"{store.url}|{name}", threading.Lock())
        held = lock.acquire(blocking=False)
        try:
            yield held
        finally:
            if held:
                lock.release()
        return
    key = lock_key(name)
    conn = store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        held = jobs.try_lock(conn, key)
        try:
            yield held
        finally:
            if held:
                jobs.unlock(conn, key)
    except Exception:
        conn.invalidate()      # never hand a connection that may still hold the lock back to the pool
        raise
    finally:
        conn.close()


def claim(store: Store, name: str, interval_s: float) -> int | None:
    """Claim the job's current period; its slot number, or None when it already ran."""
    with store.write() as conn:
        now = jobs.clock(conn)
        slot = math.floor(now / interval_s)
        claimed = jobs.claim_slot(conn, name, slot, now, HOLDER)
    return slot if claimed else None


@contextmanager
def turn(store: Store, name: str, interval_s: float) -> Iterator[bool]:
    """True when this collector runs the job's tick for the current period."""
    with exclusive(store, name) as held:
        yield held and claim(store, name, interval_s) is not None


def ticks(store: Store) -> dict[str, dict]:
    """Every job's last period: slot, ran_at, holder, runs (how many periods it ran in)."""
    with store.read() as conn:
        return jobs.last_periods(conn)
