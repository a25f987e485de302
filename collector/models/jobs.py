"""The periodic jobs' side of the store (``replayscope.collector.services.leader`` decides with it): a
job's advisory lock (PostgreSQL), the database's clock, and each job's last period in
``service_ticks``.
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from replayscope.collector.tables import service_ticks


def try_lock(conn, key: int) -> bool:
    """PostgreSQL's session advisory lock ``key`` on ``conn``; False (at once) when another holds it."""
    return bool(conn.exec_driver_sql("SELECT pg_try_advisory_lock(%s)", (key,)).scalar())


def unlock(conn, key: int) -> None:
    conn.exec_driver_sql("SELECT pg_advisory_unlock(%s)", (key,))


def clock(conn) -> float:
    """The database's clock on PostgreSQL (one clock for every collector); this process's on SQLite."""
    if conn.dialect.name == "postgresql":
        return float(conn.exec_driver_sql("SELECT extract(epoch FROM clock_timestamp())").scalar())
    return time.time()


def claim_slot(conn, name: str, slot: int, now: float, holder: str) -> bool:
    """Move job ``name`` to period ``slot`` unless it is there already (or past it): True
    for the one caller that moved it."""
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    conn.execute(insert(service_ticks).values(name=name, slot=-1, ran_at=0.0, holder="", runs=0)
                 .on_conflict_do_nothing(index_elements=["name"]))
    claimed = conn.execute(
        service_ticks.update().where(service_ticks.c.name == name, service_ticks.c.slot < slot)
        .values(slot=slot, ran_at=now, holder=holder, runs=service_ticks.c.runs + 1)).rowcount
    return claimed == 1


def last_periods(conn) -> dict[str, dict]:
    """Every job's last period: name, slot, ran_at, holder, runs (how many periods it ran in)."""
    return {r["name"]: dict(r) for r in conn.execute(sa.select(service_ticks)).mappings()}
