"""alert semantics (pending duration, hold, resolve threshold), per-run evaluation state, notification outbox

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 09:00:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('alert_rules') as batch:
        batch.add_column(sa.Column('for_s', sa.Integer(), server_default='60', nullable=False))
        batch.add_column(sa.Column('keep_firing_for_s', sa.Integer(), server_default='300', nullable=False))
        batch.add_column(sa.Column('resolve_threshold', sa.Float(), nullable=True))
    op.create_table('alert_state',
    sa.Column('rule_id', sa.Integer(), nullable=False),
    sa.Column('run_pk', sa.Integer(), nullable=False),
    sa.Column('evaluated_to', sa.Float(), nullable=False),
    sa.Column('pending_since', sa.Float(), nullable=True),
    sa.Column('clear_since', sa.Float(), nullable=True),
    sa.Column('alert_id', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['rule_id'], ['alert_rules.id'], name=op.f('fk_alert_state_rule_id_alert_rules'),
                            ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['run_pk'], ['runs.id'], name=op.f('fk_alert_state_run_pk_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('rule_id', 'run_pk', name=op.f('pk_alert_state'))
    )
    op.create_table('alert_notifications',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('alert_id', sa.Integer(), nullable=True),
    sa.Column('fingerprint', sa.String(length=32), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('receiver', sa.String(length=16), nullable=False),
    sa.Column('url', sa.String(length=2000), nullable=False),
    sa.Column('alert', sa.JSON(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('expires_at', sa.Float(), nullable=False),
    sa.Column('next_attempt_at', sa.Float(), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('sent_at', sa.Float(), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['alert_id'], ['alert_events.id'],
                            name=op.f('fk_alert_notifications_alert_id_alert_events'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_alert_notifications')),
    sa.UniqueConstraint('fingerprint', 'status', 'url', name=op.f('uq_alert_notifications_fingerprint_status_url'))
    )
    op.create_index(op.f('ix_alert_notifications_state_next_attempt_at'), 'alert_notifications',
                    ['state', 'next_attempt_at'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_alert_notifications_state_next_attempt_at'), table_name='alert_notifications')
    op.drop_table('alert_notifications')
    op.drop_table('alert_state')
    with op.batch_alter_table('alert_rules') as batch:
        batch.drop_column('resolve_threshold')
        batch.drop_column('keep_firing_for_s')
        batch.drop_column('for_s')
