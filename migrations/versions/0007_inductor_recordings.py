"""Inductor's recordings of compiled functions (``recording`` events from ``replayscope trace``)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 12:00:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('recordings',
    sa.Column('run_pk', sa.Integer(), nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('ts', sa.Float(), nullable=False),
    sa.Column('function', sa.String(length=200), nullable=False),
    sa.Column('cause', sa.String(length=32), nullable=False),
    sa.Column('evidence', sa.String(length=500), nullable=True),
    sa.Column('graph_bs', sa.Integer(), nullable=True),
    sa.Column('recordings', sa.BigInteger(), nullable=False),
    sa.Column('rerecords', sa.BigInteger(), nullable=True),
    sa.Column('rerecord_limit', sa.BigInteger(), nullable=True),
    sa.Column('rank', sa.String(length=64), nullable=True),
    sa.ForeignKeyConstraint(['run_pk'], ['runs.id'], name=op.f('fk_recordings_run_pk_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_pk', 'seq', name=op.f('pk_recordings'))
    )


def downgrade() -> None:
    op.drop_table('recordings')
