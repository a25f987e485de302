"""initial schema: runs, events, rollups, alert rules and alert events

Revision ID: 0001
Revises: 
Create Date: 2026-11-29 09:21:00.614264
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('alert_rules',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('threshold', sa.Float(), nullable=False),
    sa.Column('window_s', sa.Integer(), nullable=False),
    sa.Column('min_steps', sa.Integer(), nullable=False),
    sa.Column('run_pattern', sa.String(length=200), nullable=True),
    sa.Column('stage', sa.String(length=16), nullable=False),
    sa.Column('webhook_url', sa.String(length=2000), nullable=True),
    sa.Column('enabled', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_alert_rules')),
    sa.UniqueConstraint('name', name=op.f('uq_alert_rules_name'))
    )
    op.create_table('runs',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.String(length=128), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('source', sa.String(length=32), nullable=False),
    sa.Column('backend', sa.String(length=64), nullable=False),
    sa.Column('model', sa.String(length=300), nullable=False),
    sa.Column('device', sa.String(length=200), nullable=False),
    sa.Column('torch_version', sa.String(length=64), nullable=True),
    sa.Column('config', sa.JSON(), nullable=True),
    sa.Column('wire_version', sa.Integer(), server_default='1', nullable=False),
    sa.Column('started_at', sa.Float(), nullable=False),
    sa.Column('ended_at', sa.Float(), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('end_seq', sa.BigInteger(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('last_seen_at', sa.Float(), nullable=False),
    sa.Column('last_event_ts', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_runs')),
    sa.UniqueConstraint('run_id', name=op.f('uq_runs_run_id'))
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_runs_started_at'), ['started_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_runs_status_last_seen_at'), ['status', 'last_seen_at'], unique=False)

    op.create_table('alert_events',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('rule_id', sa.Integer(), nullable=True),
    sa.Column('rule_name', sa.String(length=100), nullable=False),
    sa.Column('run_pk', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('threshold', sa.Float(), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=False),
    sa.Column('ended_at', sa.Float(), nullable=True),
    sa.Column('peak', sa.Float(), nullable=False),
    sa.Column('value', sa.Float(), nullable=False),
    sa.Column('steps', sa.BigInteger(), nullable=False),
    sa.Column('reason', sa.String(length=160), nullable=True),
    sa.ForeignKeyConstraint(['rule_id'], ['alert_rules.id'], name=op.f('fk_alert_events_rule_id_alert_rules'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['run_pk'], ['runs.id'], name=op.f('fk_alert_events_run_pk_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_alert_events'))
    )
    with op.batch_alter_table('alert_events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_alert_events_run_pk_started_at'), ['run_pk', 'started_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_alert_events_status_rule_id_run_pk'), ['status', 'rule_id', 'run_pk'], unique=False)

    op.create_table('batch_rollups',
    sa.Column('run_pk', sa.Integer(), nullable=False),
    sa.Column('stage', sa.String(length=16), nullable=False),
    sa.Column('raw_bs', sa.Integer(), nullable=False),
    sa.Column('mode', sa.String(length=8), nullable=False),
    sa.Column('steps', sa.BigInteger(), nullable=False),
    sa.Column('num_tokens', sa.BigInteger(), nullable=False),
    sa.Column('padded_tokens', sa.BigInteger(), nullable=False),
    sa.Column('duration_s', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['run_pk'], ['runs.id'], name=op.f('fk_batch_rollups_run_pk_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_pk', 'stage', 'raw_bs', 'mode', name=op.f('pk_batch_rollups')),
    sqlite_with_rowid=False
    )
    op.create_table('captures',
    sa.Column('run_pk', sa.Integer(), nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('ts', sa.Float(), nullable=False),
    sa.Column('graph_bs', sa.Integer(), nullable=False),
    sa.Column('stage', sa.String(length=16), nullable=False),
    sa.Column('duration_s', sa.Float(), nullable=False),
    sa.Column('pool_bytes', sa.BigInteger(), nullable=True),
    sa.Column('pool_delta_bytes', sa.BigInteger(), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('variant', sa.String(length=64), nullable=True),
    sa.ForeignKeyConstraint(['run_pk'], ['runs.id'], name=op.f('fk_captures_run_pk_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_pk', 'seq', name=op.f('pk_captures'))
    )
    op.create_table('degrades',
    sa.Column('run_pk', sa.Integer(), nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('ts', sa.Float(), nullable=False),
    sa.Column('from_state', sa.String(length=64), nullable=False),
    sa.Column('to_state', sa.String(length=64), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('graph_bs', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['run_pk'], ['runs.id'], name=op.f('fk_degrades_run_pk_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_pk', 'seq', name=op.f('pk_degrades'))
    )
    op.create_table('parity_checks',
    sa.Column('run_pk', sa.Integer(), nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('ts', sa.Float(), nullable=False),
    sa.Column('graph_bs', sa.Integer(), nullable=False),
    sa.Column('max_abs_diff', sa.Float(), nullable=False),
    sa.Column('rel_err', sa.Float(), nullable=False),
    sa.Column('tolerance', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['run_pk'], ['runs.id'], name=op.f('fk_parity_checks_run_pk_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_pk', 'seq', name=op.f('pk_parity_checks'))
    )
    op.create_table('phases',
    sa.Column('run_pk', sa.Integer(), nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('ts', sa.Float(), nullable=False),
    sa.Column('phase', sa.String(length=64), nullable=False),
    sa.Column('start_ts', sa.Float(), nullable=True),
    sa.Column('duration_s', sa.Float(), nullable=False),
    sa.Column('mem_bytes', sa.BigInteger(), nullable=True),
    sa.ForeignKeyConstraint(['run_pk'], ['runs.id'], name=op.f('fk_phases_run_pk_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_pk', 'seq', name=op.f('pk_phases'))
    )
    op.create_table('run_marks',
    sa.Column('run_pk', sa.Integer(), nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('ts', sa.Float(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['run_pk'], ['runs.id'], name=op.f('fk_run_marks_run_pk_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_pk', 'seq', name=op.f('pk_run_marks'))
    )
    op.create_table('step_counts',
    sa.Column('run_pk', sa.Integer(), nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('ts', sa.Float(), nullable=False),
    sa.Column('stage', sa.String(length=16), nullable=False),
    sa.Column('mode', sa.String(length=8), nullable=False),
    sa.Column('reason', sa.String(length=160), nullable=True),
    sa.Column('count', sa.BigInteger(), nullable=False),
    sa.Column('num_tokens', sa.BigInteger(), nullable=False),
    sa.Column('padded_tokens', sa.BigInteger(), nullable=False),
    sa.Column('duration_s', sa.Float(), nullable=True),
    sa.Column('interval_s', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['run_pk'], ['runs.id'], name=op.f('fk_step_counts_run_pk_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_pk', 'seq', name=op.f('pk_step_counts'))
    )
    op.create_table('step_rollups',
    sa.Column('run_pk', sa.Integer(), nullable=False),
    sa.Column('bucket_s', sa.Integer(), nullable=False),
    sa.Column('t', sa.BigInteger(), nullable=False),
    sa.Column('stage', sa.String(length=16), nullable=False),
    sa.Column('mode', sa.String(length=8), nullable=False),
    sa.Column('reason', sa.String(length=160), nullable=False),
    sa.Column('steps', sa.BigInteger(), nullable=False),
    sa.Column('num_tokens', sa.BigInteger(), nullable=False),
    sa.Column('padded_tokens', sa.BigInteger(), nullable=False),
    sa.Column('duration_s', sa.Float(), nullable=False),
    sa.Column('timed_steps', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['run_pk'], ['runs.id'], name=op.f('fk_step_rollups_run_pk_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_pk', 'bucket_s', 't', 'stage', 'mode', 'reason', name=op.f('pk_step_rollups')),
    sqlite_with_rowid=False
    )
    op.create_table('steps',
    sa.Column('run_pk', sa.Integer(), nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('ts', sa.Float(), nullable=False),
    sa.Column('stage', sa.String(length=16), nullable=False),
    sa.Column('mode', sa.String(length=8), nullable=False),
    sa.Column('raw_bs', sa.Integer(), nullable=False),
    sa.Column('graph_bs', sa.Integer(), nullable=True),
    sa.Column('num_tokens', sa.Integer(), nullable=False),
    sa.Column('padded_tokens', sa.Integer(), nullable=False),
    sa.Column('reason', sa.String(length=160), nullable=True),
    sa.Column('duration_s', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['run_pk'], ['runs.id'], name=op.f('fk_steps_run_pk_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_pk', 'seq', name=op.f('pk_steps')),
    sqlite_with_rowid=False
    )


def downgrade() -> None:
    op.drop_table('steps')
    op.drop_table('step_rollups')
    op.drop_table('step_counts')
    op.drop_table('run_marks')
    op.drop_table('phases')
    op.drop_table('parity_checks')
    op.drop_table('degrades')
    op.drop_table('captures')
    op.drop_table('batch_rollups')
    with op.batch_alter_table('alert_events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_alert_events_status_rule_id_run_pk'))
        batch_op.drop_index(batch_op.f('ix_alert_events_run_pk_started_at'))

    op.drop_table('alert_events')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_runs_status_last_seen_at'))
        batch_op.drop_index(batch_op.f('ix_runs_started_at'))

    op.drop_table('runs')
    op.drop_table('alert_rules')
