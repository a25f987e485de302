"""Collector subcommands of ``replayscope``: ``db upgrade`` and ``db current``."""

from __future__ import annotations


def _upgrade(args) -> int:
    from collector.settings import resolve
    from collector.store import Store, head_revision

    store = Store.open(resolve(args).db, upgrade=True)      # asked for: any store, PostgreSQL included
    store.dispose()
    head, before = head_revision(), store.found_revision
    if before == head:
        print(f"{store.safe_url}: already at {head}")
    else:
        print(f"{store.safe_url}: upgraded {before or 'empty'} -> {head}")
    return 0


def _current(args) -> int:
    from collector.settings import resolve
    from collector.store import Store, head_revision

    store = Store.connect(resolve(args).db)                 # reads the revision, changes nothing
    store.dispose()
    current, head = store.found_revision, head_revision()
    state = "up to date" if current == head else f"behind head {head}: run replayscope db upgrade --db {store.safe_url}"
    print(f"{store.safe_url}: {current or 'empty'} ({state})")
    return 0


def add_parsers(sub) -> None:
    """Register ``db upgrade`` and ``db current`` on ``sub``."""
    from collector.settings import DEFAULT_DB

    db_help = f"SQLAlchemy URL of the store (default $REPLAYSCOPE_DB or {DEFAULT_DB})"
    db = sub.add_parser("db", help="manage the collector's database schema")
    db_sub = db.add_subparsers(dest="db_command", metavar="ACTION")
    db_sub.required = True
    upgrade = db_sub.add_parser("upgrade", help="create or upgrade the schema to this version's head")
    upgrade.add_argument("--db", metavar="URL", help=db_help)
    upgrade.set_defaults(handler=_upgrade)
    current = db_sub.add_parser("current", help="show the schema revision of a database")
    current.add_argument("--db", metavar="URL", help=db_help)
    current.set_defaults(handler=_current)
