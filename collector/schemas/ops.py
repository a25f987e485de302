"""The collector's own state: health, its background services, and the one error body."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from replayscope.collector.schemas.base import Out

class Health(Out):
    status: Literal["ok"]
    db: str = Field(description="sqlite | postgresql")


class ServiceState(Out):
    name: str
    interval_s: float
    ran_here: int = Field(description="periods this collector ran")
    skipped_here: int = Field(description="periods another collector ran")
    slot: Optional[int] = Field(None, description="the last period it ran in, on any collector (absent: never)")
    ran_at: Optional[float] = None
    holder: Optional[str] = Field(None, description="host:pid of the collector that ran it (writers only: absent without the token)")
    runs: Optional[int] = Field(None, description="periods it ran in, on every collector")


class Problem(Out):
    """Every error (4xx and 5xx): ``detail`` is one readable line; an invalid field, body key
    or query/path parameter is named in ``field``, an event of a batch by its ``index``."""

    detail: str
    index: Optional[int] = None
    field: Optional[str] = None
