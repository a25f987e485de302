"""provenance and ranks on startup facts, unknown durations, where a run failed, warnings

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 20:30:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs') as batch:
        batch.add_column(sa.Column('partial', sa.Boolean(), nullable=True))
        batch.add_column(sa.Column('time_provenance', sa.String(length=16), nullable=True))
    with op.batch_alter_table('phases') as batch:
        batch.alter_column('duration_s', existing_type=sa.Float(), nullable=True)
        batch.add_column(sa.Column('provenance', sa.String(length=16), nullable=True))
        batch.add_column(sa.Column('rank', sa.String(length=64), nullable=True))
    with op.batch_alter_table('captures') as batch:
        batch.alter_column('duration_s', existing_type=sa.Float(), nullable=True)
        batch.add_column(sa.Column('provenance', sa.String(length=16), nullable=True))
        batch.add_column(sa.Column('rank', sa.String(length=64), nullable=True))
    with op.batch_alter_table('steps') as batch:
        batch.add_column(sa.Column('evidence', sa.String(length=500), nullable=True))
    with op.batch_alter_table('step_counts') as batch:
        batch.add_column(sa.Column('provenance', sa.String(length=16), nullable=True))
        batch.add_column(sa.Column('evidence', sa.String(length=500), nullable=True))
    with op.batch_alter_table('degrades') as batch:
        batch.add_column(sa.Column('rank', sa.String(length=64), nullable=True))
    with op.batch_alter_table('run_marks') as batch:
        batch.add_column(sa.Column('rank', sa.String(length=64), nullable=True))
        batch.add_column(sa.Column('phase', sa.String(length=64), nullable=True))
        batch.add_column(sa.Column('graph_bs', sa.Integer(), nullable=True))
    op.create_table('run_warnings',
    sa.Column('run_pk', sa.Integer(), nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('ts', sa.Float(), nullable=False),
    sa.Column('code', sa.String(length=64), nullable=True),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('rank', sa.String(length=64), nullable=True),
    sa.ForeignKeyConstraint(['run_pk'], ['runs.id'], name=op.f('fk_run_warnings_run_pk_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_pk', 'seq', name=op.f('pk_run_warnings'))
    )


def downgrade() -> None:
    op.drop_table('run_warnings')
    with op.batch_alter_table('run_marks') as batch:
        batch.drop_column('graph_bs')
        batch.drop_column('phase')
        batch.drop_column('rank')
    with op.batch_alter_table('degrades') as batch:
        batch.drop_column('rank')
    with op.batch_alter_table('step_counts') as batch:
        batch.drop_column('evidence')
        batch.drop_column('provenance')
    with op.batch_alter_table('steps') as batch:
        batch.drop_column('evidence')
    with op.batch_alter_table('captures') as batch:
        batch.drop_column('rank')
        batch.drop_column('provenance')
        batch.alter_column('duration_s', existing_type=sa.Float(), nullable=False)
    with op.batch_alter_table('phases') as batch:
        batch.drop_column('rank')
        batch.drop_column('provenance')
        batch.alter_column('duration_s', existing_type=sa.Float(), nullable=False)
    with op.batch_alter_table('runs') as batch:
        batch.drop_column('time_provenance')
        batch.drop_column('partial')
