"""Polling a condition from a test until it holds or time runs out."""

import time


def wait_until(condition, timeout_s: float, interval_s: float = 0.01) -> bool:
    """Ask ``condition()`` every ``interval_s`` until it is true (True) or ``timeout_s`` has passed (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval_s)
    return False
