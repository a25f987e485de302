"""Options several commands share, written once: the store a command reads or writes (``--db``),
or a running collector instead (``--collector`` with its ``--token``). Torch-free, as every
registering module must be (``replayscope.app.cli``)."""

from __future__ import annotations

import argparse

TOKEN_HELP = "bearer token for --collector (default: $REPLAYSCOPE_TOKEN)"


def db_help(what: str = "SQLAlchemy URL of the store") -> str:
    """``--db``'s help: ``what``, then where the store comes from without it."""
    from replayscope.collector.settings import DEFAULT_DB

    return f"{what} (default $REPLAYSCOPE_DB or {DEFAULT_DB})"


def add_store_or_collector(parser: argparse.ArgumentParser, collector_help: str, *,
                           store_help: str | None = None) -> None:
    """``--db URL`` or ``--collector URL`` (never both), and ``--token`` for the collector."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--db", metavar="URL", default=None, help=store_help or db_help())
    group.add_argument("--collector", metavar="URL", default=None, help=collector_help)
    parser.add_argument("--token", metavar="T", default=None, help=TOKEN_HELP)
