"""Whether the store answers (the health check)."""

from __future__ import annotations

import sqlalchemy as sa


def ping(conn) -> None:
    """One round trip; raises when the database does not answer."""
    conn.execute(sa.text("SELECT 1"))
