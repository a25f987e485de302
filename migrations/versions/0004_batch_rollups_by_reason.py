"""batch_rollups by reason, with timed steps: an eager reason's cost is measured against
graph replays of the same stage and batch sizes

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 10:00:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

# The rollup is rebuilt from the raw steps and the step counts that carry a batch size
# (the old one has no reason to keep).
_SOURCES = """
SELECT run_pk, stage, raw_bs, mode, COALESCE(reason, '') AS reason, 1 AS steps, num_tokens, padded_tokens,
       duration_s, CASE WHEN duration_s IS NULL THEN 0 ELSE 1 END AS timed
FROM steps
UNION ALL
SELECT run_pk, stage, raw_bs, mode, COALESCE(reason, ''), count, num_tokens, padded_tokens,
       duration_s, CASE WHEN duration_s IS NULL THEN 0 ELSE count END
FROM step_counts WHERE raw_bs IS NOT NULL
"""
_REBUILD = f"""
INSERT INTO batch_rollups (run_pk, stage, raw_bs, mode, reason, steps, num_tokens, padded_tokens,
                           duration_s, timed_steps)
SELECT run_pk, stage, raw_bs, mode, reason, SUM(steps), SUM(num_tokens), SUM(padded_tokens),
       COALESCE(SUM(duration_s), 0.0), SUM(timed)
FROM ({_SOURCES}) AS s GROUP BY run_pk, stage, raw_bs, mode, reason
"""
_REBUILD_OLD = f"""
INSERT INTO batch_rollups (run_pk, stage, raw_bs, mode, steps, num_tokens, padded_tokens, duration_s)
SELECT run_pk, stage, raw_bs, mode, SUM(steps), SUM(num_tokens), SUM(padded_tokens), COALESCE(SUM(duration_s), 0.0)
FROM ({_SOURCES}) AS s GROUP BY run_pk, stage, raw_bs, mode
"""


def _create(with_reason: bool) -> None:
    columns = [
        sa.Column('run_pk', sa.Integer(), nullable=False),
        sa.Column('stage', sa.String(length=16), nullable=False),
        sa.Column('raw_bs', sa.Integer(), nullable=False),
        sa.Column('mode', sa.String(length=8), nullable=False),
    ]
    if with_reason:
        columns.append(sa.Column('reason', sa.String(length=160), nullable=False))
    columns += [
        sa.Column('steps', sa.BigInteger(), nullable=False),
        sa.Column('num_tokens', sa.BigInteger(), nullable=False),
        sa.Column('padded_tokens', sa.BigInteger(), nullable=False),
        sa.Column('duration_s', sa.Float(), nullable=False),
    ]
    if with_reason:
        columns.append(sa.Column('timed_steps', sa.BigInteger(), nullable=False))
    key = ['run_pk', 'stage', 'raw_bs', 'mode'] + (['reason'] if with_reason else [])
    op.create_table(
        'batch_rollups', *columns,
        sa.ForeignKeyConstraint(['run_pk'], ['runs.id'], name=op.f('fk_batch_rollups_run_pk_runs'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint(*key, name=op.f('pk_batch_rollups')),
        sqlite_with_rowid=False,
    )


def upgrade() -> None:
    op.drop_table('batch_rollups')
    _create(with_reason=True)
    op.execute(_REBUILD)


def downgrade() -> None:
    op.drop_table('batch_rollups')
    _create(with_reason=False)
    op.execute(_REBUILD_OLD)
