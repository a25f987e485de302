"""``replayscope advise RUN_ID``: capture sizes for a budget of graphs, from a run's batches,
read from the store (``--db``) or a running collector (``--collector``)."""

from __future__ import annotations

from replayscope.app.cli.options import add_store_or_collector
from replayscope.contract.errors import ReplayscopeError


def _advise(args) -> int:
    import json

    from replayscope.collector.analysis.advisor.report import format_text

    if args.budget is not None and args.budget < 1:
        raise ReplayscopeError("--budget must be at least 1")
    if args.eager_weight is not None and not 0 <= args.eager_weight <= 1000:
        raise ReplayscopeError("--eager-weight must be between 0 and 1000")
    advice = _advice_through(args.collector, args) if args.collector else _advice_from_store(args)
    if args.json:
        print(json.dumps(advice, indent=2))
        return 0
    if not advice["decode_steps"]:
        raise ReplayscopeError(f"run {args.run_id!r} has no decode steps to advise on")
    print(format_text(advice, args.run_id))
    return 0


def _advice_from_store(args) -> dict:
    from replayscope.collector.analysis.advisor.stored import advice_for_run
    from replayscope.collector.settings import resolve
    from replayscope.collector.store import Store

    store = Store.open(resolve(args).db, create=False)     # reads: never a new store
    try:
        advice = advice_for_run(store, args.run_id, budget=args.budget, eager_weight=args.eager_weight)
        if advice is None:
            raise ReplayscopeError(f"no run {args.run_id!r} in {store.safe_url}")
        return advice
    finally:
        store.dispose()


def _advice_through(collector: str, args) -> dict:
    """GET /v1/runs/{id}/advice from a running collector, with the token."""
    import urllib.parse

    from replayscope.collector.settings import resolve
    from replayscope.contract.http import HttpError, request_json

    query = {k: v for k, v in (("budget", args.budget), ("eager_weight", args.eager_weight)) if v is not None}
    url = (f"{collector.rstrip('/')}/v1/runs/{urllib.parse.quote(args.run_id, safe='')}/advice"
           + (f"?{urllib.parse.urlencode(query)}" if query else ""))
    try:
        return request_json("GET", url, token=resolve(args).token, timeout=60.0)
    except HttpError as error:
        if error.status == 404:
            raise ReplayscopeError(f"no run {args.run_id!r} in the collector at {collector}") from None
        raise ReplayscopeError(f"collector {collector}: {error.detail}") from None


def add_parsers(sub) -> None:
    """Register ``advise`` on ``sub``."""
    advise = sub.add_parser("advise", help="capture sizes for a budget of K graphs, from a run's batches",
                            description="Choose the capture sizes of least cost for a run's decode batch sizes "
                                        "(exact; the cost is the run's measured step time on a GPU; for a vLLM log, "
                                        "which times no step, an estimate of what a graph saves, said to be one; "
                                        "else rows computed), on the first 70% of its decode steps, keeping only "
                                        "sizes whose gain pays for them, and score them on the "
                                        "rest against the current list. Prints each list's eager share, padding "
                                        "waste, capture time and pool memory (measured, fit or estimated), the "
                                        "proposal's validity under vLLM's, SGLang's and this runner's rules, and "
                                        "the flags to copy, with the versions that accept them.")
    advise.add_argument("run_id", metavar="RUN_ID")
    advise.add_argument("--budget", type=int, metavar="K",
                        help="graphs to capture at most (default: the run's current count; for a run with graphs "
                             "off, the number its engine would capture for it)")
    advise.add_argument("--eager-weight", type=float, metavar="W",
                        help="score rows computed, an eager row counted 1 + W times (default: the run's measured "
                             "step times on a GPU; for a vLLM log, the estimate; else W = 3)")
    advise.add_argument("--json", action="store_true", help="print the advice as JSON (what the API answers)")
    add_store_or_collector(advise, "ask a running collector instead (GET /v1/runs/RUN_ID/advice)")
    advise.set_defaults(handler=_advise)
