"""``replayscope db upgrade``, ``db current`` and ``db prune``: the store's schema and its retention."""

from __future__ import annotations

from replayscope.app.cli.options import db_help


def _upgrade(args) -> int:
    from replayscope.collector.settings import resolve
    from replayscope.collector.store import Store, head_revision

    store = Store.open(resolve(args).db, upgrade=True)      # asked for: any store, PostgreSQL included
    store.dispose()
    head, before = head_revision(), store.found_revision
    if before == head:
        print(f"{store.safe_url}: already at {head}")
    else:
        print(f"{store.safe_url}: upgraded {before or 'empty'} -> {head}")
    return 0


def _current(args) -> int:
    from replayscope.collector.settings import resolve
    from replayscope.collector.store import Store, head_revision

    store = Store.connect(resolve(args).db, create=False)   # reads the revision, changes nothing
    store.dispose()
    current, head = store.found_revision, head_revision()
    state = "up to date" if current == head else f"behind head {head}: run replayscope db upgrade --db {store.safe_url}"
    print(f"{store.safe_url}: {current or 'empty'} ({state})")
    return 0


def _prune(args) -> int:
    from replayscope.collector.models import retention
    from replayscope.collector.settings import resolve
    from replayscope.collector.store import Store

    settings = resolve(args)                                # checks the retentions: one line, exit 2
    policy = retention.Policy.from_settings(settings)
    store = Store.open(settings.db)
    try:
        report = retention.run_retention(store, policy)
    finally:
        store.dispose()
    print(f"{store.safe_url}: " + "\n  ".join(report.lines()))
    return 0


def add_parsers(sub) -> None:
    """Register ``db upgrade``, ``db current`` and ``db prune`` on ``sub``."""
    store_help = db_help()
    db = sub.add_parser("db", help="manage the collector's database schema")
    db_sub = db.add_subparsers(dest="db_command", metavar="ACTION")
    db_sub.required = True
    upgrade = db_sub.add_parser("upgrade", help="create or upgrade the schema to this version's head")
    upgrade.add_argument("--db", metavar="URL", help=store_help)
    upgrade.set_defaults(handler=_upgrade)
    current = db_sub.add_parser("current", help="show the schema revision of a database")
    current.add_argument("--db", metavar="URL", help=store_help)
    current.set_defaults(handler=_current)
    prune = db_sub.add_parser(
        "prune", help="expire raw step events and 1-second rollups past their retention now",
        description="Delete raw step events older than the raw retention and 1-second rollups older than "
                    "theirs, a whole UTC day at a time (PostgreSQL: drop the day partitions; SQLite: delete "
                    "in small batches). Whole-run and minute rollups, batch sizes, reasons, phases and "
                    "captures are kept for good. The collector does this every REPLAYSCOPE_PRUNE_EVERY_S.")
    prune.add_argument("--db", metavar="URL", help=store_help)
    prune.add_argument("--raw-retention", metavar="AGE",
                       help="keep raw step events this long: 14d, 36h, 2w, or forever "
                            "(default: $REPLAYSCOPE_RAW_RETENTION or 14d)")
    prune.add_argument("--second-retention", metavar="AGE",
                       help="keep 1-second rollups this long (default: $REPLAYSCOPE_SECOND_RETENTION or 7d)")
    prune.set_defaults(handler=_prune)

