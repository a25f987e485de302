"""fleet: retention bookkeeping, versions, sampled counts by batch size, regression rules,
service periods; on PostgreSQL the raw step tables partitioned by day

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 20:30:00

On PostgreSQL ``steps`` and ``step_counts`` become tables partitioned by UTC day on
``ts`` (their key gains ``ts``: a partitioned table's key must hold the partition column)
and ``step_rollups`` is partitioned by ``(bucket_s, t)``: whole-run rows, minute rows, and
one partition per day of 1-second rows. Existing rows are copied into the new tables
(a full copy: allow ~1 minute per 10 M steps). SQLite keeps its tables as they are;
retention there deletes in small batches. Partition names follow
``replayscope_partitions.<table>_d<YYYYMMDD>``, the scheme ``replayscope.collector.models.retention`` uses.
"""
from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

PARTITIONS = "replayscope_partitions"
DAY_S = 86400
# table: (partition key, primary key columns)
PARTITIONED = {
    "steps": ("RANGE (ts)", "run_pk, seq, ts"),
    "step_counts": ("RANGE (ts)", "run_pk, seq, ts"),
    "step_rollups": ("RANGE (bucket_s, t)", "run_pk, bucket_s, t, stage, mode, reason"),
}


def _day_name(table: str, day: int) -> str:
    return f"{table}_d{(dt.datetime(1970, 1, 1) + dt.timedelta(days=day)):%Y%m%d}"


def upgrade() -> None:
    with op.batch_alter_table('runs') as batch:
        batch.add_column(sa.Column('version', sa.String(length=64), nullable=True))
        batch.add_column(sa.Column('graph_sample', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('config_key', sa.String(length=40), nullable=True))
        batch.add_column(sa.Column('raw_expired_before', sa.Float(), nullable=True))
        batch.add_column(sa.Column('seconds_expired_before', sa.Float(), nullable=True))
        batch.create_index('ix_runs_config_key_started_at', ['config_key', 'started_at'], unique=False)
    with op.batch_alter_table('step_counts') as batch:
        batch.add_column(sa.Column('batch_sizes', sa.JSON(), nullable=True))
    with op.batch_alter_table('alert_rules') as batch:
        batch.add_column(sa.Column('kind', sa.String(length=16), server_default='eager_ratio', nullable=False))
        batch.add_column(sa.Column('metric', sa.String(length=32), nullable=True))
    op.create_table('service_ticks',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('slot', sa.BigInteger(), nullable=False),
    sa.Column('ran_at', sa.Float(), nullable=False),
    sa.Column('holder', sa.String(length=200), nullable=False),
    sa.Column('runs', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_service_ticks'))
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"CREATE SCHEMA IF NOT EXISTS {PARTITIONS}")
        for table in PARTITIONED:
            _partition(table)


def _partition(table: str) -> None:
    """Rename the plain table, create the partitioned one like it, copy, drop the old."""
    bind = op.get_bind()
    by, key = PARTITIONED[table]
    old = f"{table}_unpartitioned"
    op.execute(f'ALTER TABLE {table} RENAME TO {old}')
    op.execute(f'ALTER TABLE {old} RENAME CONSTRAINT pk_{table} TO pk_{old}')
    op.execute(f'ALTER TABLE {old} RENAME CONSTRAINT fk_{table}_run_pk_runs TO fk_{old}_run_pk_runs')
    op.execute(f'CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS) PARTITION BY {by}')
    op.execute(f'ALTER TABLE {table} ADD CONSTRAINT pk_{table} PRIMARY KEY ({key})')
    op.execute(f'ALTER TABLE {table} ADD CONSTRAINT fk_{table}_run_pk_runs FOREIGN KEY (run_pk) '
               f'REFERENCES runs (id) ON DELETE CASCADE')
    if table == "step_rollups":
        op.execute(f'CREATE TABLE {PARTITIONS}.step_rollups_whole PARTITION OF step_rollups '
                   f'FOR VALUES FROM (MINVALUE, MINVALUE) TO (1, MINVALUE)')
        op.execute(f'CREATE TABLE {PARTITIONS}.step_rollups_minute PARTITION OF step_rollups '
                   f'FOR VALUES FROM (2, MINVALUE) TO (MAXVALUE, MAXVALUE)')
        days = bind.exec_driver_sql(f"SELECT DISTINCT div(t, {DAY_S}) FROM {old} WHERE bucket_s = 1").scalars()
        for day in days:
            op.execute(f'CREATE TABLE {PARTITIONS}.{_day_name(table, int(day))} PARTITION OF step_rollups '
                       f'FOR VALUES FROM (1, {int(day) * DAY_S}) TO (1, {(int(day) + 1) * DAY_S})')
    else:
        days = bind.exec_driver_sql(f"SELECT DISTINCT floor(ts / {DAY_S}) FROM {old}").scalars()
        for day in days:
            op.execute(f'CREATE TABLE {PARTITIONS}.{_day_name(table, int(day))} PARTITION OF {table} '
                       f'FOR VALUES FROM ({int(day) * DAY_S}) TO ({(int(day) + 1) * DAY_S})')
    op.execute(f'INSERT INTO {table} SELECT * FROM {old}')
    op.execute(f'DROP TABLE {old}')


def _unpartition(table: str) -> None:
    old = f"{table}_partitioned"
    by, key = PARTITIONED[table]
    plain_key = "run_pk, seq" if table != "step_rollups" else key
    op.execute(f'ALTER TABLE {table} RENAME TO {old}')
    op.execute(f'ALTER TABLE {old} RENAME CONSTRAINT pk_{table} TO pk_{old}')
    op.execute(f'ALTER TABLE {old} RENAME CONSTRAINT fk_{table}_run_pk_runs TO fk_{old}_run_pk_runs')
    op.execute(f'CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS)')
    op.execute(f'ALTER TABLE {table} ADD CONSTRAINT pk_{table} PRIMARY KEY ({plain_key})')
    op.execute(f'ALTER TABLE {table} ADD CONSTRAINT fk_{table}_run_pk_runs FOREIGN KEY (run_pk) '
               f'REFERENCES runs (id) ON DELETE CASCADE')
    op.execute(f'INSERT INTO {table} SELECT * FROM {old}')
    op.execute(f'DROP TABLE {old}')   # its partitions go with it


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in PARTITIONED:
            _unpartition(table)
        op.execute(f"DROP SCHEMA IF EXISTS {PARTITIONS} CASCADE")
    op.drop_table('service_ticks')
    with op.batch_alter_table('alert_rules') as batch:
        batch.drop_column('metric')
        batch.drop_column('kind')
    with op.batch_alter_table('step_counts') as batch:
        batch.drop_column('batch_sizes')
    with op.batch_alter_table('runs') as batch:
        batch.drop_index('ix_runs_config_key_started_at')
        batch.drop_column('seconds_expired_before')
        batch.drop_column('raw_expired_before')
        batch.drop_column('config_key')
        batch.drop_column('graph_sample')
        batch.drop_column('version')
