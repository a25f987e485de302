"""Collector subcommands of ``replayscope``: ``db upgrade``, ``db current`` and ``db prune``."""

from __future__ import annotations

import os

from runner.errors import ReplayscopeError


def _db_url(args) -> str:
    from collector.store import DEFAULT_URL

    return args.db or os.environ.get("REPLAYSCOPE_DB") or DEFAULT_URL


def _open(url: str):
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    from collector.store import Store

    try:
        return Store(url)
    except (ArgumentError, NoSuchModuleError) as error:
        raise ReplayscopeError(f"--db {url!r}: not a usable database URL ({error})") from None


def _upgrade(args) -> int:
    from sqlalchemy.exc import OperationalError

    from collector.store import head_revision

    store = _open(_db_url(args))
    try:
        before = store.current_revision()
        store.upgrade()
    except OperationalError as error:
        raise ReplayscopeError(f"cannot upgrade {store.safe_url}: {str(error.orig).strip()}") from None
    finally:
        store.dispose()
    head = head_revision()
    if before == head:
        print(f"{store.safe_url}: already at {head}")
    else:
        print(f"{store.safe_url}: upgraded {before or 'empty'} -> {head}")
    return 0


def _current(args) -> int:
    from sqlalchemy.exc import OperationalError

    from collector.store import head_revision

    store = _open(_db_url(args))
    try:
        current = store.current_revision()
    except OperationalError as error:
        raise ReplayscopeError(f"cannot read {store.safe_url}: {str(error.orig).strip()}") from None
    finally:
        store.dispose()
    head = head_revision()
    state = "up to date" if current == head else f"behind head {head}: run replayscope db upgrade --db {store.safe_url}"
    print(f"{store.safe_url}: {current or 'empty'} ({state})")
    return 0


def _prune(args) -> int:
    from sqlalchemy.exc import OperationalError

    from collector import retention
    from collector.settings import Settings
    from collector.store import Store

    settings = Settings.from_env()
    policy = retention.Policy(
        retention.parse_retention(args.raw_retention or settings.raw_retention,
                                  "--raw-retention" if args.raw_retention else "REPLAYSCOPE_RAW_RETENTION"),
        retention.parse_retention(args.second_retention or settings.second_retention,
                                  "--second-retention" if args.second_retention else "REPLAYSCOPE_SECOND_RETENTION"))
    url = _db_url(args)
    _open(url).dispose()                      # a bad URL fails the same way as for upgrade
    try:
        store = Store.open(url)
    except OperationalError as error:
        raise ReplayscopeError(f"cannot open {url}: {str(error.orig).strip()}") from None
    try:
        report = retention.run_retention(store, policy)
    finally:
        store.dispose()
    print(f"{store.safe_url}: " + "\n  ".join(report.lines()))
    return 0


def add_parsers(sub) -> None:
    """Register this package's subcommands on ``sub``."""
    db = sub.add_parser("db", help="manage the collector's database schema")
    db_sub = db.add_subparsers(dest="db_command", metavar="ACTION")
    db_sub.required = True
    upgrade = db_sub.add_parser("upgrade", help="create or upgrade the schema to this version's head")
    upgrade.add_argument("--db", metavar="URL", help="SQLAlchemy URL (default: $REPLAYSCOPE_DB or sqlite:///replayscope.db)")
    upgrade.set_defaults(handler=_upgrade)
    current = db_sub.add_parser("current", help="show the schema revision of a database")
    current.add_argument("--db", metavar="URL", help="SQLAlchemy URL (default: $REPLAYSCOPE_DB or sqlite:///replayscope.db)")
    current.set_defaults(handler=_current)
    prune = db_sub.add_parser(
        "prune", help="expire raw step events and 1-second rollups past their retention now",
        description="Delete raw step events older than the raw retention and 1-second rollups older than "
                    "theirs, a whole UTC day at a time (PostgreSQL: drop the day partitions; SQLite: delete "
                    "in small batches). Whole-run and minute rollups, batch sizes, reasons, phases and "
                    "captures are kept for good. The collector does this every REPLAYSCOPE_PRUNE_EVERY_S.")
    prune.add_argument("--db", metavar="URL", help="SQLAlchemy URL (default: $REPLAYSCOPE_DB or sqlite:///replayscope.db)")
    prune.add_argument("--raw-retention", metavar="AGE",
                       help="keep raw step events this long: 14d, 36h, 2w, or forever "
                            "(default: $REPLAYSCOPE_RAW_RETENTION or 14d)")
    prune.add_argument("--second-retention", metavar="AGE",
                       help="keep 1-second rollups this long (default: $REPLAYSCOPE_SECOND_RETENTION or 7d)")
    prune.set_defaults(handler=_prune)

    from collector.importers import cli as importers_cli
    importers_cli.add_parsers(sub)
    from collector import run_commands
    run_commands.add_parsers(sub)
