"""``replayscope runs list`` (the run ids ``advise`` and ``runs delete`` take) and ``replayscope
runs delete RUN_ID`` (a bad import, a test), on the store directly (``--db URL``, never
created by these) or through a running collector (``--collector URL`` with its token)."""

from __future__ import annotations

import urllib.parse

from replayscope.app.cli.options import add_store_or_collector
from replayscope.contract.errors import ReplayscopeError
from replayscope.contract.wire import RUN_STATUSES, SOURCES

LIST_COLUMNS = ("RUN_ID", "NAME", "SOURCE", "MODEL", "STATUS", "STARTED (UTC)", "STEPS", "EAGER")


def _list(args) -> int:
    import json

    filters = {"source": args.source, "status": args.status, "model": args.model}
    rows = _listed_through(args, filters) if args.collector else _listed_from_store(args, filters)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no runs" + ("" if not any(filters.values()) else " match " + ", ".join(
            f"--{k} {v}" for k, v in filters.items() if v is not None)))
    else:
        print(format_table(rows))
    return 0


def format_table(rows: list[dict]) -> str:
    """One line per run under ``LIST_COLUMNS``, each column as wide as its widest cell."""
    from replayscope.contract import formats

    cells = [LIST_COLUMNS] + [
        (r["run_id"], r["name"], r["source"], r["model"], r["status"], formats.when(r["started_at"], seconds=False),
         formats.count(r["steps"]), formats.pct(r["eager_ratio"]) if r["steps"] else "no steps")
        for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(LIST_COLUMNS))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in cells)


def _listed_from_store(args, filters: dict) -> list[dict]:
    from replayscope.collector.models import queries
    from replayscope.collector.settings import resolve
    from replayscope.collector.store import Store

    store = Store.open(resolve(args).db, create=False)     # listing never makes a store
    try:
        return queries.list_runs(store, limit=args.limit, **filters)
    finally:
        store.dispose()


def _listed_through(args, filters: dict) -> list[dict]:
    """GET /v1/runs from a running collector, with the same filters."""
    from replayscope.collector.settings import resolve
    from replayscope.contract.http import HttpError, request_json

    query = urllib.parse.urlencode({"limit": args.limit, **{k: v for k, v in filters.items() if v is not None}})
    try:
        return request_json("GET", f"{args.collector.rstrip('/')}/v1/runs?{query}", token=resolve(args).token,
                            timeout=60.0)
    except HttpError as error:
        raise ReplayscopeError(f"collector {args.collector}: {error.detail}") from None


def _limit(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 5000:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 5000, not {text!r}")
    return value


def _delete(args) -> int:
    from replayscope.collector.settings import resolve

    if args.collector:
        from replayscope.contract.http import HttpError, request_json

        url = f"{args.collector.rstrip('/')}/v1/runs/{urllib.parse.quote(args.run_id, safe='')}"
        try:
            request_json("DELETE", url, token=resolve(args).token, decode=False)
        except HttpError as error:
            if error.status == 404:
                raise ReplayscopeError(f"no run {args.run_id!r} in the collector at {args.collector}") from None
            raise ReplayscopeError(f"collector {args.collector}: {error}") from None
        print(f"deleted run {args.run_id} through the collector at {args.collector}")
        return 0
    from replayscope.collector.services.deletion import delete_run
    from replayscope.collector.store import Store

    store = Store.open(resolve(args).db, create=False)     # never a new store to delete from
    try:
        if not delete_run(store, args.run_id):
            raise ReplayscopeError(f"no run {args.run_id!r} in {store.safe_url}")
        print(f"deleted run {args.run_id} from {store.safe_url}")
    finally:
        store.dispose()
    return 0


def add_parsers(sub) -> None:
    """Register ``runs`` (``runs list``, ``runs delete``) on the ``replayscope`` subcommands."""
    runs = sub.add_parser("runs", help="manage stored runs")
    actions = runs.add_subparsers(dest="runs_command", metavar="ACTION")
    actions.required = True
    listing = actions.add_parser("list", help="the stored runs, newest first (their ids for advise and runs delete)",
                                 description="List stored runs, newest first: id, name, source, model, status, "
                                             "start, steps and eager share. Reads only: a store that does not "
                                             "exist is an error, never created.")
    listing.add_argument("--source", choices=SOURCES, help="only runs from this source")
    listing.add_argument("--status", choices=RUN_STATUSES, help="only runs in this status")
    listing.add_argument("--model", metavar="NAME", help="only runs of this model (exactly as stored)")
    listing.add_argument("--limit", type=_limit, default=500, metavar="N", help="at most N runs (default: 500)")
    listing.add_argument("--json", action="store_true", help="print the runs as JSON (what GET /v1/runs answers)")
    add_store_or_collector(listing, "ask a running collector instead (GET /v1/runs)")
    listing.set_defaults(handler=_list)

    delete = actions.add_parser("delete", help="delete a run and everything recorded for it",
                                description="Delete a run: its events, rollups and alerts (a firing alert is "
                                            "resolved first and its receivers told). Cannot be undone.")
    delete.add_argument("run_id", metavar="RUN_ID")
    add_store_or_collector(delete, "delete through a running collector instead")
    delete.set_defaults(handler=_delete)
