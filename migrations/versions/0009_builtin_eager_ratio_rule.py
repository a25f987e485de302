"""alert_rules: the built-in eager-ratio rule, once

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 10:00:00

Every store starts with the built-in eager-ratio rule
(``replayscope.collector.alerting.alerts.BUILTIN_EAGER_RATIO_RULE``: the decode stages above 20% eager
over 5 minutes, as deploy/prometheus/replayscope-rules.yml), so ``REPLAYSCOPE_ALERT_WEBHOOK``
or ``REPLAYSCOPE_ALERTMANAGER_URL`` alone get notified. Written here, once: a user who edits
or deletes it keeps their choice; a store that already has a rule of its name is left alone.
The columns are this revision's (a later migration adds its own), the values the one source's.
"""
from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

COLUMNS = ("name", "kind", "metric", "threshold", "window_s", "min_steps", "run_pattern", "stage", "webhook_url",
           "enabled", "for_s", "keep_firing_for_s", "resolve_threshold")
_rules = sa.table("alert_rules", *(sa.column(name) for name in (*COLUMNS, "created_at", "updated_at")))


def upgrade() -> None:
    from replayscope.collector.alerting.alerts import BUILTIN_EAGER_RATIO_RULE as rule

    conn = op.get_bind()
    if conn.execute(sa.select(sa.func.count()).select_from(_rules).where(_rules.c.name == rule["name"])).scalar():
        return
    now = time.time()
    conn.execute(_rules.insert().values(**{name: rule[name] for name in COLUMNS}, created_at=now, updated_at=now))


def downgrade() -> None:
    from replayscope.collector.alerting.alerts import BUILTIN_EAGER_RATIO_RULE as rule

    op.get_bind().execute(_rules.delete().where(_rules.c.name == rule["name"]))
