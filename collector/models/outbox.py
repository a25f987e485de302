"""The notification outbox's rows (``alert_notifications``): the statements of
``replayscope.collector.alerting.notifications``, which owns the state machine (what each outcome of
a send moves a row to); these read and write rows in the caller's transaction.

A row's ``state`` is one of ``STATES``: ``pending`` and ``unanswered`` are still owed
(``OWED``), ``sent`` and ``unconfirmed`` were delivered (``DELIVERED``: a firing one is
re-sent while it fires), ``expired`` was not delivered in time.
"""

from __future__ import annotations

from typing import Any, Iterable

import sqlalchemy as sa

from replayscope.collector.tables import alert_events as ae, alert_notifications as an

PENDING, UNANSWERED, SENT, UNCONFIRMED, EXPIRED = "pending", "unanswered", "sent", "unconfirmed", "expired"
OWED = (PENDING, UNANSWERED)              # still to be delivered
DELIVERED = (SENT, UNCONFIRMED)           # a firing one is re-sent while it fires
STATES = (PENDING, UNANSWERED, SENT, UNCONFIRMED, EXPIRED)


def owe(conn, row: dict[str, Any]) -> bool:
    """Add ``row`` unless one with its fingerprint, status and url is there; True when added."""
    exists = conn.execute(sa.select(an.c.id).where(an.c.fingerprint == row["fingerprint"],
                                                   an.c.status == row["status"], an.c.url == row["url"])).first()
    if exists is not None:
        return False
    conn.execute(an.insert().values(**row))
    return True


def due(conn, now: float, limit: int = 200) -> list[dict]:
    """Rows to send now, oldest first: owed ones, and firing ones due for a repeat; a
    resolved row waits while its firing row is still owed."""
    still_firing = sa.exists().where(ae.c.id == an.c.alert_id, ae.c.status == "firing")
    rows = conn.execute(
        sa.select(an).where(an.c.next_attempt_at <= now, sa.or_(
            an.c.state.in_(OWED),
            sa.and_(an.c.state.in_(DELIVERED), an.c.status == "firing", still_firing)))
        .order_by(an.c.id).limit(limit)).mappings().all()
    if not rows:
        return []
    waiting_firing = {(r.fingerprint, r.url) for r in conn.execute(
        sa.select(an.c.fingerprint, an.c.url).where(
            an.c.state.in_(OWED), an.c.status == "firing",
            sa.tuple_(an.c.fingerprint, an.c.url).in_([(r["fingerprint"], r["url"]) for r in rows])))}
    return [dict(r) for r in rows
            if not (r["status"] == "resolved" and (r["fingerprint"], r["url"]) in waiting_firing)]


def owed_count(conn) -> int:
    """Rows not yet delivered."""
    return int(conn.execute(sa.select(sa.func.count()).select_from(an).where(an.c.state.in_(OWED))).scalar())


def claim(conn, row: dict, lease_until: float) -> bool:
    """Lease ``row`` for one attempt (its next attempt moved to ``lease_until``, attempts + 1)
    unless another notifier (or a retry) took it since it was read."""
    return bool(conn.execute(an.update().where(an.c.id == row["id"], an.c.next_attempt_at == row["next_attempt_at"])
                             .values(next_attempt_at=lease_until, attempts=an.c.attempts + 1)).rowcount)


def update(conn, row_id: int, **values: Any) -> None:
    conn.execute(an.update().where(an.c.id == row_id).values(**values))


def rows(conn, states: Iterable[str] = STATES, limit: int = 500) -> list[dict]:
    """Rows in ``states``, newest first."""
    return [dict(r) for r in conn.execute(
        sa.select(an).where(an.c.state.in_(list(states))).order_by(an.c.id.desc()).limit(limit)).mappings()]


def detach_run(conn, run_pk: int) -> None:
    """The run's alerts are going: its rows stay (still owed), no longer naming them."""
    conn.execute(an.update().where(an.c.alert_id.in_(sa.select(ae.c.id).where(ae.c.run_pk == run_pk)))
                 .values(alert_id=None))
