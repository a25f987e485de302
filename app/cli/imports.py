"""``replayscope import vllm|sglang LOGFILE``, ``replayscope follow vllm|sglang FILE|-`` and
``replayscope scrape URL``.

Both write through a *sink*: the store directly (``--db URL``, else ``$REPLAYSCOPE_DB``,
else ``sqlite:///replayscope.db``; a store that is behind is migrated only with
``--migrate``) or a running collector over HTTP (``--collector URL``).
A log is parsed completely before anything is written, so a bad file changes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable

from replayscope.app.cli.import_sinks import BATCH, DbSink, StreamedWriter, open_sink
from replayscope.app.cli.options import add_store_or_collector, db_help
from replayscope.contract.errors import EXIT_DONE, EXIT_INCOMPLETE, ReplayscopeError



# -- import ------------------------------------------------------------------------------


def run_import(args: argparse.Namespace, out=None) -> int:
    out = out or sys.stdout
    from replayscope.collector.importers import import_log

    writer = None if args.dry_run else StreamedWriter(lambda: open_sink(args), args.logfile)
    try:
        # the file is checked (and refused) before anything is written; then each run's events
        # are written as the parser emits them
        result = import_log(args.engine, args.logfile, drain=writer.drain if writer else None)
    finally:
        if writer is not None:
            writer.close()
    if not result.runs:
        raise ReplayscopeError(f"{args.logfile}: {'; '.join(result.warnings) or 'no run found'}; nothing was written")
    written = [writer.written[run.run["run_id"]] for run in result.runs] if writer else []
    target = writer.target if writer else None
    if args.json:
        summary = result.summary()
        summary["written_to"] = target
        summary["written"] = written
        json.dump(summary, out, indent=2, sort_keys=False)
        out.write("\n")
        return 0
    print(f"{args.logfile}: {len(result.runs)} run(s) ({result.source}; every rank kept, "
          f"see docs/importing.md)", file=out)
    for run, w in zip(result.runs, written or [None] * len(result.runs)):
        s = run.summary()
        steps = s["steps"]
        mem = s["graph_mem_bytes"]
        print(f"  {s['run_id']}  {s['status']:<11} {s['backend']:<20} "
              f"{len(s['phases'])} phases, {len(s['captures'])} captures, "
              + capture_words(s)
              + (f" / {mem / 2**30:.2f} GiB" if mem is not None else "")
              + f", steps graph {steps['graph']} padded {steps['padded']} eager {steps['eager']}"
              + (f"  [{w['accepted']} new, {w['duplicates']} already there]" if w else ""), file=out)
        if s["error"]:
            print(f"    error: {s['error']}", file=out)
        for warning in s["warnings"]:
            print(f"    warning: {warning}", file=out)
    for warning in result.warnings:
        print(f"  warning: {warning}", file=out)
    if target:
        print(f"written to {target}", file=out)
    return 0


def capture_words(summary: dict[str, Any]) -> str:
    """The capture's total, or how far a capture that did not finish got (never a total)."""
    if summary["capture_total_s"] is not None:
        return f"capture {summary['capture_total_s']:.2f} s"
    unfinished = summary.get("capture_unfinished")
    if unfinished:
        done = (f" at {unfinished['graphs_done']}/{unfinished['graphs']}"
                if unfinished.get("graphs_done") is not None and unfinished.get("graphs") else "")
        so_far = (f" after {unfinished['elapsed_s']:.0f} s" if unfinished.get("elapsed_s") is not None else "")
        return f"capture not finished ({unfinished['status']}{done}{so_far}; no total)"
    return "capture time not in the log"


# -- events files (the runner's --events, a spool) ----------------------------------------


def run_import_events(args: argparse.Namespace, out=None) -> int:
    """Every file is read and checked before anything is written; then each is reported."""
    from replayscope.contract.events_file import check_events_file, event_batches

    out = out or sys.stdout
    # every file checked whole before any write, a line at a time (memory bounded for any size)
    files = [(path, check_events_file(path)) for path in args.files]
    sink = open_sink(args)
    try:
        for path, checked in files:
            run = checked.run
            sink.write_run(run)
            accepted = duplicates = 0
            for batch in event_batches(path, checked, BATCH):
                new, already = sink.write_events(run["run_id"], batch)
                accepted, duplicates = accepted + new, duplicates + already
            print(f"{path}: run {run['run_id']} ({run['name']}): {accepted} events new, "
                  f"{duplicates} already there, into {sink.describe()}", file=out)
            for warning in checked.warnings:
                print(f"  warning: {warning}", file=out)
    finally:
        sink.close()
    return 0


# -- follow ------------------------------------------------------------------------------


class _RunWriter:
    """One followed run into a DbSink or CollectorSink-like target: record first, then events."""

    def __init__(self, target, record: dict[str, Any]):
        self.target = target
        self.run_id = record["run_id"]
        self.sent = 0
        self.spooled = 0                     # a store takes every write or raises
        target.write_run(record)

    def write(self, events: list[dict[str, Any]]) -> None:
        self.target.write_events(self.run_id, events)
        self.sent += len(events)

    def update_run(self, record: dict[str, Any]) -> None:
        """The run's record again, with what the log has said since (the store takes the newer one)."""
        self.target.write_run(record)

    def close(self) -> None:
        pass


@dataclass
class Delivery:
    """What ``follow`` got to its target: per run, the events delivered and those left in a spool."""
    sinks: list[Any] = field(default_factory=list)

    @property
    def delivered(self) -> int:
        return sum(sink.sent for sink in self.sinks)

    @property
    def undelivered(self) -> int:
        return sum(sink.spooled for sink in self.sinks)

    def spools(self) -> list[str]:
        return [sink.spool_path for sink in self.sinks if sink.spooled and getattr(sink, "spool_path", None)]

    def line(self, target: str) -> str:
        """The last line ``follow`` prints: what reached ``target``, and where the rest is."""
        runs = len(self.sinks)
        text = f"{runs} run(s) followed: {self.delivered} event(s) delivered to {target}"
        if self.undelivered:
            spools = ", ".join(self.spools())
            text += (f"; {self.undelivered} event(s) NOT delivered, kept in {spools} "
                     f"(re-send them with `replayscope import events {spools}`)")
        return text


def follow_sinks(args: argparse.Namespace):
    """(open_sink(record) -> sink, close_all() -> Delivery, target): HttpSink (retries,
    spool) for --collector, the store for --db."""
    from replayscope.collector.settings import resolve

    settings = resolve(args)
    delivery = Delivery()
    if getattr(args, "collector", None):
        from replayscope.contract.sinks import HttpSink

        def open_http(record: dict[str, Any]):
            sink = HttpSink(args.collector, token=settings.token)
            sink.open(record)
            delivery.sinks.append(sink)
            return sink
        return open_http, lambda: delivery, f"collector {args.collector}"
    db = DbSink(settings.db, migrate=getattr(args, "migrate", False))

    def open_db(record: dict[str, Any]):
        writer = _RunWriter(db, record)
        delivery.sinks.append(writer)
        return writer
    return open_db, lambda: db.close() or delivery, db.describe()


def run_follow(args: argparse.Namespace, out=None) -> int:
    out = out or sys.stdout
    from replayscope.collector.importers import ENGINE_SPECS
    from replayscope.collector.importers.follow import follow

    if args.interval <= 0:
        raise ReplayscopeError("--interval must be more than 0 seconds")
    if args.path != "-" and not os.path.exists(args.path):
        raise ReplayscopeError(f"{args.path}: no such file")
    state = args.state
    if state is None and args.path != "-":
        state = args.path + ".replayscope-follow.json"
    open_sink, close, target = follow_sinks(args)
    print(f"following {args.path} ({args.engine}) into {target}"
          + (f", state in {state}" if state else ""), file=out, flush=True)
    try:
        follow(ENGINE_SPECS[args.engine], args.path, open_sink, state_path=state, interval=args.interval,
               idle_exit=args.idle_exit, log=lambda message: print(message, file=out, flush=True))
    finally:
        delivery = close()
    print(delivery.line(target), file=out, flush=True)
    return EXIT_INCOMPLETE if delivery.undelivered else EXIT_DONE   # events kept in a spool: not done


# -- scrape ------------------------------------------------------------------------------


def metrics_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ReplayscopeError(f"{url!r} is not an http(s) URL")
    if parts.path in ("", "/"):
        parts = parts._replace(path="/metrics")
    return urllib.parse.urlunsplit(parts)


def poll_summary(events: list[dict[str, Any]]) -> str:
    """What one poll stored, added up per stage and mode (a histogram gives one event per
    bucket): "mixed/graph +29, mixed/eager +2 (batch_too_large 2)"."""
    totals: dict[str, int] = {}
    reasons: dict[str, dict[str, int]] = {}
    for e in events:
        key = f"{e['stage']}/{e['mode']}"
        totals[key] = totals.get(key, 0) + e["count"]
        if e.get("reason"):
            reasons.setdefault(key, {})[e["reason"]] = reasons.get(key, {}).get(e["reason"], 0) + e["count"]
    parts = [f"{key} +{n}" + (f" ({', '.join(f'{r} {c}' for r, c in reasons[key].items())})" if key in reasons else "")
             for key, n in totals.items()]
    return ", ".join(parts) or "no new passes"


def scrape_capture_sizes(args: argparse.Namespace) -> tuple[list[int] | None, int | None, str | None]:
    """vLLM's capture sizes as the user gives them to ``scrape`` (its own flags' spelling, or
    the server's log): the list, the largest size (or the bound ``--max-cudagraph-capture-size``
    sets), and why graphs are off where the log says they are."""
    from replayscope.collector.importers.scrape_vllm import sizes_from_log
    from replayscope.contract.capture_sizes import parse_capture_sizes

    given = getattr(args, "cudagraph_capture_sizes", None)
    largest = getattr(args, "max_cudagraph_capture_size", None)
    log = getattr(args, "engine_log", None)
    if log is not None:
        if given or largest is not None:
            raise ReplayscopeError("give the capture sizes by --engine-log or by --cudagraph-capture-sizes / "
                                   "--max-cudagraph-capture-size, not both")
        return sizes_from_log(log)
    if largest is not None and largest < 1:
        raise ReplayscopeError(f"--max-cudagraph-capture-size must be at least 1, got {largest}")
    if not given:
        return None, largest, None
    try:
        sizes = list(parse_capture_sizes(" ".join(given)))
    except ReplayscopeError as error:
        raise ReplayscopeError(str(error).replace("--capture-sizes", "--cudagraph-capture-sizes")) from None
    if largest is not None and largest != sizes[-1]:
        raise ReplayscopeError(f"--max-cudagraph-capture-size {largest} differs from the largest of "
                               f"--cudagraph-capture-sizes ({sizes[-1]}); vLLM requires them to agree")
    return sizes, sizes[-1], None


def run_scrape(args: argparse.Namespace, out=None, sleep: Callable[[float], None] = time.sleep) -> int:
    out = out or sys.stdout
    from replayscope.collector.importers.scrape import Scraper

    if args.interval <= 0:
        raise ReplayscopeError("--interval must be more than 0 seconds")
    if args.count is not None and args.count < 1:
        raise ReplayscopeError("--count must be at least 1")
    sizes, largest, graphs_off = scrape_capture_sizes(args)
    scraper = Scraper(metrics_url(args.url), capture_sizes=sizes, max_capture_size=largest, graphs_off=graphs_off)
    first = scraper.poll()                              # unreachable / not Prometheus: raises here
    sink = open_sink(args)
    status = "finished"
    polls = 1
    try:
        sink.write_run(scraper.run)
        sink.write_events(scraper.run["run_id"], first)
        print(f"scraping {scraper.url} into {sink.describe()} as run {scraper.run['run_id']} "
              f"every {args.interval:g} s", file=out, flush=True)
        while args.count is None or polls < args.count:
            sleep(args.interval)
            try:
                events = scraper.poll()
            except ReplayscopeError as error:
                print(f"warning: poll {polls + 1}: {error}", file=sys.stderr, flush=True)
                polls += 1
                continue
            polls += 1
            sink.write_events(scraper.run["run_id"], events)
            print(f"poll {polls}: {poll_summary(events)}" + (" (counter reset)" if scraper.resets else ""),
                  file=out, flush=True)
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        try:
            final = scraper.final_run()
            if final is not None:
                sink.write_run(final)                     # the engine's own counts over the scrape
            sink.write_events(scraper.run["run_id"], [scraper.end(status)])
        finally:
            sink.close()
    return 0


# -- argparse ----------------------------------------------------------------------------


def _add_target(parser: argparse.ArgumentParser) -> None:
    add_store_or_collector(parser, "post to a running collector instead, e.g. http://127.0.0.1:8300",
                           store_help=db_help("write into this store, a SQLAlchemy URL"))
    parser.add_argument("--migrate", action="store_true",
                        help="upgrade a --db store whose schema is behind this replayscope (a new SQLite "
                             "file is always created)")


def add_parsers(sub) -> None:
    """Register ``import``, ``follow`` and ``scrape`` on the ``replayscope`` subcommands."""
    imp = sub.add_parser("import", help="import a vLLM or SGLang server log, or a replayscope events file",
                         description="Import a server log: startup phases, captures, failures, "
                                     "and per-step graph/eager modes where the log has them; or "
                                     "re-send a replayscope events file (a runner's --events or spool).")
    engines = imp.add_subparsers(dest="engine", metavar="ENGINE")
    engines.required = True
    for engine, label in (("vllm", "vLLM"), ("sglang", "SGLang")):
        p = engines.add_parser(engine, help=f"a {label} server log")
        p.add_argument("logfile", metavar="LOGFILE")
        _add_target(p)
        p.add_argument("--json", action="store_true", help="print what was imported as one JSON object")
        p.add_argument("--dry-run", action="store_true", help="parse only; write nothing")
        p.set_defaults(handler=run_import)
    events = engines.add_parser("events", help="replayscope events files (a runner's --events, a spool)",
                                description="Import one or more events files (each a run record, then one "
                                            "event per line). Every file is checked first; a bad line in "
                                            "any of them writes nothing.")
    events.add_argument("files", metavar="FILE", nargs="+")
    _add_target(events)
    events.set_defaults(handler=run_import_events)

    follow = sub.add_parser("follow", help="follow a growing vLLM or SGLang log into a collector or store",
                            description="Follow a server log as it grows (rotation and truncation handled; "
                                        "a restart resumes at the offset saved in the state file) and send "
                                        "each run's facts as the log states them. FILE '-' reads standard "
                                        "input, e.g. kubectl logs -f POD | replayscope follow vllm -.")
    follow.add_argument("engine", choices=("vllm", "sglang"), metavar="ENGINE", help="vllm or sglang")
    follow.add_argument("path", metavar="FILE", help="the log file, or - for standard input")
    _add_target(follow)
    follow.add_argument("--state", metavar="FILE", default=None,
                        help="where the offset is kept (default FILE.replayscope-follow.json; none for -)")
    follow.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between reads when idle (default 1)")
    follow.add_argument("--idle-exit", type=float, default=None, metavar="S",
                        help="end the run and exit after S seconds without new lines (default: run until Ctrl-C)")
    follow.set_defaults(handler=run_follow)

    scrape = sub.add_parser("scrape", help="poll an SGLang or vLLM /metrics endpoint into step counts",
                            description="Poll SGLang's sglang:cuda_graph_passes_total or vLLM's "
                                        "vllm:iteration_tokens_total and record the increase between polls "
                                        "as step counts. vLLM's /metrics gives steps and tokens, not how "
                                        "each step ran: its steps are stored with mode unknown, except "
                                        "those known to be above the largest capture size (given here).")
    scrape.add_argument("url", metavar="URL", help="the server's /metrics URL (or its base URL)")
    scrape.add_argument("--interval", type=float, default=15.0, metavar="S", help="seconds between polls (default 15)")
    scrape.add_argument("--count", type=int, default=None, metavar="N",
                        help="stop after N polls (the first is the baseline); default: until Ctrl-C")
    scrape.add_argument("--cudagraph-capture-sizes", nargs="+", metavar="N",
                        help="vLLM: the server's capture sizes (its own flag's value; commas or spaces), so "
                             "steps above the largest are known eager (batch_too_large)")
    scrape.add_argument("--max-cudagraph-capture-size", type=int, metavar="N",
                        help="vLLM: the server's largest capture size, when the list is not known")
    scrape.add_argument("--engine-log", metavar="FILE",
                        help="vLLM: the server's log, for its capture sizes (or that graphs are off) instead of "
                             "the two flags above")
    _add_target(scrape)
    scrape.set_defaults(handler=run_scrape)
