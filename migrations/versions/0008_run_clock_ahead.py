"""runs: how far ahead of the collector's clock a run's events were stamped

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 12:00:00

``runs.clock_ahead_s``: the furthest an event of the run was stamped ahead of the
collector's clock when it arrived (recorded when more than a minute). Such an event moves
the run's ``last_event_ts`` (and so its alert clock) only as far as its arrival: one
future-stamped event cannot push alert evaluation past data still to come.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("clock_ahead_s", sa.Float))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("clock_ahead_s")
