"""batch sizes on step counts (vLLM's per-size rows, /metrics histogram buckets)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 10:00:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('step_counts') as batch:
        batch.add_column(sa.Column('raw_bs', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('graph_bs', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('step_counts') as batch:
        batch.drop_column('graph_bs')
        batch.drop_column('raw_bs')
