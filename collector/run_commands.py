"""``replayscope runs delete RUN_ID``: remove a run (a bad import, a test) from the store,
directly (``--db URL``) or through a running collector (``--collector URL`` with its token)."""

from __future__ import annotations

import urllib.parse

from runner.errors import ReplayscopeError

def _delete(args) -> int:
    from collector.settings import resolve

    if args.collector:
        from runner.http import HttpError, request_json

        url = f"{args.collector.rstrip('/')}/v1/runs/{urllib.parse.quote(args.run_id, safe='')}"
        try:
            request_json("DELETE", url, token=resolve(args).token, decode=False)
        except HttpError as error:
            if error.status == 404:
                raise ReplayscopeError(f"no run {args.run_id!r} in the collector at {args.collector}") from None
            raise ReplayscopeError(f"collector {args.collector}: {error}") from None
        print(f"deleted run {args.run_id} through the collector at {args.collector}")
        return 0
    from collector.deletion import delete_run
    from collector.store import Store

    store = Store.open(resolve(args).db, create=False)     # never a new store to delete from
    try:
        if not delete_run(store, args.run_id):
            raise ReplayscopeError(f"no run {args.run_id!r} in {store.safe_url}")
        print(f"deleted run {args.run_id} from {store.safe_url}")
    finally:
        store.dispose()
    return 0


def add_parsers(sub) -> None:
    """Register ``runs`` (``runs delete``) on the ``replayscope`` subcommands."""
    runs = sub.add_parser("runs", help="manage stored runs")
    actions = runs.add_subparsers(dest="runs_command", metavar="ACTION")
    actions.required = True
    delete = actions.add_parser("delete", help="delete a run and everything recorded for it",
                                description="Delete a run: its events, rollups and alerts (a firing alert is "
                                            "resolved first and its receivers told). Cannot be undone.")
    delete.add_argument("run_id", metavar="RUN_ID")
    target = delete.add_mutually_exclusive_group()
    target.add_argument("--db", metavar="URL",
                        help="the store (SQLAlchemy URL; default $REPLAYSCOPE_DB or sqlite:///replayscope.db)")
    target.add_argument("--collector", metavar="URL", help="delete through a running collector instead")
    delete.add_argument("--token", metavar="T", default=None,
                        help="bearer token for --collector (default: $REPLAYSCOPE_TOKEN)")
    delete.set_defaults(handler=_delete)
