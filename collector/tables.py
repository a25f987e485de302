"""SQLAlchemy 2 tables of the collector store.

The schema is created and changed only by ``migrations/versions/``; these tables are
what the code reads and writes. Runs get an integer surrogate key (``runs.id``) so the
per-step tables stay narrow; every event table is keyed by ``(run_pk, seq)``, which is
also how retries are recognised. ``reason`` in rollups is ``''`` for "no reason" so it
can be part of a primary key on every dialect.

On PostgreSQL (migration 0006) the raw step tables ``steps`` and ``step_counts`` are
partitioned by UTC day on ``ts`` (key ``(run_pk, seq, ts)``: a partitioned table's key
must hold its partition column) and ``step_rollups`` by ``(bucket_s, t)``: one partition
for whole-run rows, one for minute rows, one per day of 1-second rows. The partitions live
in the schema ``replayscope_partitions``; ``replayscope.collector.models.retention`` creates and drops them.
"""

from __future__ import annotations

import sqlalchemy as sa

from replayscope.collector.alert_rule import (DEFAULTS as RULE_DEFAULTS, FIELDS as RULE_FIELDS,
                                              Spec as RuleSpec)

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
    }
)

_REASON = sa.String(160)


def _run_fk() -> sa.Column:
    return sa.Column("run_pk", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"),
                     primary_key=True)


# What every rollup row sums (step_rollups, batch_rollups; replayscope.collector.models.rollups adds them).
ROLLUP_SUMS = ("steps", "num_tokens", "padded_tokens", "duration_s", "timed_steps")


def _rollup_sums() -> list[sa.Column]:
    return [sa.Column(name, sa.Float if name == "duration_s" else sa.BigInteger, nullable=False)
            for name in ROLLUP_SUMS]


runs = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(128), nullable=False, unique=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("source", sa.String(32), nullable=False),
    sa.Column("backend", sa.String(64), nullable=False),
    sa.Column("model", sa.String(300), nullable=False),
    sa.Column("device", sa.String(200), nullable=False),
    sa.Column("torch_version", sa.String(64)),
    sa.Column("config", sa.JSON),
    sa.Column("wire_version", sa.Integer, nullable=False, server_default="1"),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("ended_at", sa.Float),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("end_seq", sa.BigInteger),          # seq of the run_end event that set status
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("last_seen_at", sa.Float, nullable=False),   # collector clock
    sa.Column("last_event_ts", sa.Float),                  # largest event ts (runner clock), each at most its arrival
    sa.Column("clock_ahead_s", sa.Float),                  # furthest an event was stamped ahead of its arrival (> 60 s)
    sa.Column("partial", sa.Boolean),                      # the source did not see the start
    sa.Column("time_provenance", sa.String(16)),           # e.g. inferred: the log gave no year
    sa.Column("version", sa.String(64)),                   # what was deployed (release tag, engine version)
    sa.Column("graph_sample", sa.Integer),                 # 1 in N graph steps sent one by one
    sa.Column("config_key", sa.String(40)),                # same model + configuration: runs to compare
    sa.Column("raw_expired_before", sa.Float),             # raw step events before this ts were pruned
    sa.Column("seconds_expired_before", sa.Float),         # 1-second rollups before this ts were pruned
    sa.Index(None, "started_at"),
    sa.Index(None, "status", "last_seen_at"),
    sa.Index(None, "config_key", "started_at"),
)

phases = sa.Table(
    "phases", metadata, _run_fk(),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("ts", sa.Float, nullable=False),
    sa.Column("phase", sa.String(64), nullable=False),
    sa.Column("start_ts", sa.Float),
    sa.Column("duration_s", sa.Float),            # NULL: the phase happened, its length is unknown
    sa.Column("mem_bytes", sa.BigInteger),
    sa.Column("provenance", sa.String(16)),       # NULL: the run source's default
    sa.Column("rank", sa.String(64)),
)

captures = sa.Table(
    "captures", metadata, _run_fk(),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("ts", sa.Float, nullable=False),
    sa.Column("graph_bs", sa.Integer, nullable=False),
    sa.Column("stage", sa.String(16), nullable=False),
    sa.Column("duration_s", sa.Float),            # NULL: captured, not timed
    sa.Column("pool_bytes", sa.BigInteger),
    sa.Column("pool_delta_bytes", sa.BigInteger),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("variant", sa.String(64)),
    sa.Column("provenance", sa.String(16)),
    sa.Column("rank", sa.String(64)),
)

steps = sa.Table(
    "steps", metadata, _run_fk(),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("ts", sa.Float, nullable=False),
    sa.Column("stage", sa.String(16), nullable=False),
    sa.Column("mode", sa.String(8), nullable=False),
    sa.Column("raw_bs", sa.Integer, nullable=False),
    sa.Column("graph_bs", sa.Integer),
    sa.Column("num_tokens", sa.Integer, nullable=False),
    sa.Column("padded_tokens", sa.Integer, nullable=False),
    sa.Column("reason", _REASON),
    sa.Column("duration_s", sa.Float),
    sa.Column("evidence", sa.String(500)),
    sqlite_with_rowid=False,
)

step_counts = sa.Table(
    "step_counts", metadata, _run_fk(),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("ts", sa.Float, nullable=False),
    sa.Column("stage", sa.String(16), nullable=False),
    sa.Column("mode", sa.String(8), nullable=False),
    sa.Column("reason", _REASON),
    sa.Column("count", sa.BigInteger, nullable=False),
    sa.Column("num_tokens", sa.BigInteger, nullable=False),
    sa.Column("padded_tokens", sa.BigInteger, nullable=False),
    sa.Column("duration_s", sa.Float),
    sa.Column("interval_s", sa.Float),
    sa.Column("provenance", sa.String(16)),
    sa.Column("evidence", sa.String(500)),
    sa.Column("raw_bs", sa.Integer),              # NULL: the source gave counts without sizes
    sa.Column("graph_bs", sa.Integer),
    sa.Column("batch_sizes", sa.JSON),            # counts of several sizes (sampled graph steps)
)

degrades = sa.Table(
    "degrades", metadata, _run_fk(),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("ts", sa.Float, nullable=False),
    sa.Column("from_state", sa.String(64), nullable=False),
    sa.Column("to_state", sa.String(64), nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("graph_bs", sa.Integer),
    sa.Column("rank", sa.String(64)),
)

parity_checks = sa.Table(
    "parity_checks", metadata, _run_fk(),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("ts", sa.Float, nullable=False),
    sa.Column("graph_bs", sa.Integer, nullable=False),
    sa.Column("max_abs_diff", sa.Float, nullable=False),
    sa.Column("rel_err", sa.Float, nullable=False),
    sa.Column("tolerance", sa.Float),
)

# run_end and heartbeat events: kept so their seq counts as seen.
run_marks = sa.Table(
    "run_marks", metadata, _run_fk(),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("ts", sa.Float, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("status", sa.String(16)),
    sa.Column("error", sa.Text),
    sa.Column("rank", sa.String(64)),             # run_end: where a failed run failed
    sa.Column("phase", sa.String(64)),
    sa.Column("graph_bs", sa.Integer),
)

# warning events: what the reader should know that is not a step or a phase.
run_warnings = sa.Table(
    "run_warnings", metadata, _run_fk(),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("ts", sa.Float, nullable=False),
    sa.Column("code", sa.String(64)),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("rank", sa.String(64)),
)

# recording events: PyTorch Inductor recorded a CUDA graph of a compiled function, and why.
recordings = sa.Table(
    "recordings", metadata, _run_fk(),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("ts", sa.Float, nullable=False),
    sa.Column("function", sa.String(200), nullable=False),
    sa.Column("cause", sa.String(32), nullable=False),
    sa.Column("evidence", sa.String(500)),
    sa.Column("graph_bs", sa.Integer),
    sa.Column("recordings", sa.BigInteger, nullable=False),
    sa.Column("rerecords", sa.BigInteger),          # NULL: this PyTorch keeps no count
    sa.Column("rerecord_limit", sa.BigInteger),     # NULL: this PyTorch applies no limit
    sa.Column("rank", sa.String(64)),
)

# Step rollups per run and time bucket. bucket_s is 1 or 60; bucket_s 0 is the whole
# run (t = 0). Both raw steps and step_counts aggregates land here. Whole-run and minute
# rows are kept for good; 1-second rows expire (REPLAYSCOPE_SECOND_RETENTION).
step_rollups = sa.Table(
    "step_rollups", metadata, _run_fk(),
    sa.Column("bucket_s", sa.Integer, primary_key=True),
    sa.Column("t", sa.BigInteger, primary_key=True),
    sa.Column("stage", sa.String(16), primary_key=True),
    sa.Column("mode", sa.String(8), primary_key=True),
    sa.Column("reason", _REASON, primary_key=True),
    *_rollup_sums(),
    sqlite_with_rowid=False,
)

# Per-run batch-size totals for the histogram (raw steps, and step_counts with raw_bs or
# batch_sizes), by reason too, with the timed steps: an eager reason's cost compares its
# steps with graph replays of the same stage and size, and only measured times count
# (duration_s sums them).
batch_rollups = sa.Table(
    "batch_rollups", metadata, _run_fk(),
    sa.Column("stage", sa.String(16), primary_key=True),
    sa.Column("raw_bs", sa.Integer, primary_key=True),
    sa.Column("mode", sa.String(8), primary_key=True),
    sa.Column("reason", _REASON, primary_key=True),
    *_rollup_sums(),
    sqlite_with_rowid=False,
)

# An alert rule's columns follow its fields (replayscope.collector.alert_rule): type, length, nullability.
_RULE_COLUMN_TYPES = {"ratio": sa.Float, "seconds": sa.Integer, "count": sa.Integer, "flag": sa.Boolean}
_RULE_SERVER_DEFAULTS = ("kind", "for_s", "keep_firing_for_s")    # added to stored rules by migrations 0005, 0006


def _rule_column(name: str, spec: RuleSpec) -> sa.Column:
    kind = sa.String(spec.max_length) if spec.max_length is not None else _RULE_COLUMN_TYPES[spec.kind]()
    server_default = str(RULE_DEFAULTS[name]) if name in _RULE_SERVER_DEFAULTS else None
    return sa.Column(name, kind, nullable=spec.nullable, unique=name == "name", server_default=server_default)


alert_rules = sa.Table(
    "alert_rules", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    *(_rule_column(name, spec) for name, spec in RULE_FIELDS.items()),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)

alert_events = sa.Table(
    "alert_events", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("rule_id", sa.Integer, sa.ForeignKey("alert_rules.id", ondelete="SET NULL")),
    sa.Column("rule_name", sa.String(100), nullable=False),
    sa.Column("run_pk", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),     # firing | resolved
    sa.Column("threshold", sa.Float, nullable=False),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("ended_at", sa.Float),
    sa.Column("peak", sa.Float, nullable=False),
    sa.Column("value", sa.Float, nullable=False),            # latest evaluated ratio
    sa.Column("steps", sa.BigInteger, nullable=False),       # steps in the window at peak
    sa.Column("reason", _REASON),                            # dominant eager reason
    sa.Index(None, "status", "rule_id", "run_pk"),
    sa.Index(None, "run_pk", "started_at"),
)

# Where each rule's evaluation of each run stands, in the run's own event time: evaluated
# up to ``evaluated_to``; pending since, clear since (while firing), the open alert.
alert_state = sa.Table(
    "alert_state", metadata,
    sa.Column("rule_id", sa.Integer, sa.ForeignKey("alert_rules.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("run_pk", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("evaluated_to", sa.Float, nullable=False),
    sa.Column("pending_since", sa.Float),
    sa.Column("clear_since", sa.Float),
    sa.Column("alert_id", sa.Integer),            # the firing alert_events row, if any
)

# The notification outbox: one row per alert transition and receiver, written in the
# evaluation's transaction, sent by the notifier service until delivered or expired.
alert_notifications = sa.Table(
    "alert_notifications", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("alert_id", sa.Integer, sa.ForeignKey("alert_events.id", ondelete="SET NULL")),
    sa.Column("fingerprint", sa.String(32), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),        # firing | resolved
    sa.Column("receiver", sa.String(16), nullable=False),      # webhook | alertmanager
    sa.Column("url", sa.String(2000), nullable=False),
    sa.Column("alert", sa.JSON, nullable=False),               # labels, annotations, startsAt, endsAt, ...
    sa.Column("state", sa.String(16), nullable=False),         # pending | sent | expired
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),
    sa.Column("next_attempt_at", sa.Float, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("sent_at", sa.Float),                            # the latest delivery
    sa.Column("last_error", sa.Text),
    sa.UniqueConstraint("fingerprint", "status", "url"),
    sa.Index(None, "state", "next_attempt_at"),
)

# Periodic work shared by several collectors: each job's last period ("slot") claimed, so
# a job runs once per period however many collectors run it (replayscope.collector.services.leader).
service_ticks = sa.Table(
    "service_ticks", metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("slot", sa.BigInteger, nullable=False),       # floor(clock / interval) of the last run
    sa.Column("ran_at", sa.Float, nullable=False),
    sa.Column("holder", sa.String(200), nullable=False),    # host:pid of the collector that ran it
    sa.Column("runs", sa.BigInteger, nullable=False),       # how many periods it has run in
)
