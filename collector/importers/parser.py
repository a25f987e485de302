"""The log parser: cuts a log into runs, line by line.

An engine module supplies an ``Engine``: ``classify(line) -> [Fact]`` and a ``RunBuilder``
subclass (``replayscope.collector.importers.builder``). ``LogParser`` feeds each run's builder line by
line: the same code reads a whole file (``replayscope import``) and a growing one
(``replayscope follow``). A line that does not parse is skipped. Whole files: read,
parsed and summarised (``parse_text``, ``ImportResult``).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from replayscope.collector.importers.builder import RANK_POLICY, RunBuilder, STRAY_FACTS
from replayscope.collector.importers.facts import (BANNER, CHAINED, CRASH, EXCEPTION, FATAL, FRAME, Fact,
                                                   LOAD, READY, TRACE_KINDS, common_facts, crash_fact,
                                                   logged_by_the_engine, starts_a_run)
from replayscope.collector.importers.lines import LineReader, LogLine, split_lines
from replayscope.collector.importers.years import YearGuess, infer_year
from replayscope.contract.errors import ReplayscopeError



@dataclass
class Engine:
    """What an engine module gives the parser."""
    name: str                                       # vllm | sglang
    source: str                                     # vllm-log | sglang-log
    label: str                                      # vLLM | SGLang
    classify: Callable[[LogLine], list[Fact]]
    new_run: Callable[..., RunBuilder]
    # Lines only this engine prints (its process tags, stamps, startup lines, source paths):
    # how a log that is the other engine's is told apart.
    markers: re.Pattern
    # Fact kinds that state the server's configuration (printed between one startup banner
    # and the next, e.g. vLLM's API server and its engine core): not progress of a run.
    setup: frozenset[str] = frozenset()


def wrong_engine(engine: Engine, others: Iterable[Engine], text: str) -> str | None:
    """Why ``text`` is not ``engine``'s log, when it is plainly another's: lines only that
    engine prints and none of ``engine``'s own. None when it may be ``engine``'s (a log with
    neither, or both, is read)."""
    head = text[:4_000_000]
    if engine.markers.search(head):
        return None
    for other in others:
        found: list[str] = []
        for m in other.markers.finditer(head):
            if m.group(0) not in found:
                found.append(m.group(0))
            if len(found) == 3:
                break
        if found:
            return (f"this looks like a {other.label} log, not {engine.label}: it has {other.label}'s lines "
                    f"({'; '.join(repr(f[:60]) for f in found)}) and none of {engine.label}'s. "
                    f"Import it with `replayscope import {other.name} FILE`")
    return None


class LogParser:
    """Feeds lines to runs: a banner after the current run made progress, or a weight load
    after it was ready or failed, starts a new run. ``feed`` takes raw lines (already cut at
    newlines and carriage returns); ``finish`` ends the last run."""

    def __init__(self, engine: Engine, *, year: YearGuess, run_id: Callable[[int, LogLine], str],
                 fallback_ts: float, first_seq: int = 0, continued: bool = False, continued_ready: bool = False):
        self.engine = engine
        self.reader = LineReader(year)
        self.make_run_id = run_id
        self.fallback_ts = fallback_ts
        self.runs: list[RunBuilder] = []
        self.current: RunBuilder | None = None
        self.pending_lines: list[LogLine] = []     # lines before the first fact of a run
        self.stray: list[Fact] = []                # exception and frame facts while no run was open
        self.first_seq = first_seq
        self.continued = continued
        self.continued_ready = continued_ready   # the run went on was already serving
        self.lineno = 0
        self.failures = 0
        self.warnings: list[str] = []
        self.year = year

    def feed(self, raw: str) -> None:
        self.lineno += 1
        try:
            lines = self.reader.read(self.lineno, raw)
            for line in lines:
                if not line.text:
                    if self.current is not None:
                        self.current.observe(line)
                    continue
                for fact in self.facts_of(line):
                    self._route(fact)
                if self.current is not None:
                    self.current.observe(line)
                else:
                    self.pending_lines.append(line)
                    del self.pending_lines[:-50]
        except Exception as error:  # a parser bug must not lose the rest of the log
            self.failures += 1
            if self.failures <= 5:
                self.warnings.append(f"line {self.lineno}: skipped, could not be read ({type(error).__name__})")

    def facts_of(self, line: LogLine) -> list[Fact]:
        """The engine's facts of a line, else the shared ones; a native crash printed at the end
        of an engine's line (a capture bar's last redraw) as well."""
        facts = self.engine.classify(line)
        if not facts:
            return common_facts(line)
        if not any(f.kind in (FATAL, EXCEPTION, CRASH) for f in facts):
            crash = crash_fact(line)
            if crash is not None:
                facts = facts + [crash]
        return facts

    def _route(self, fact: Fact) -> None:
        run = self.current
        if run is not None and ((fact.kind == BANNER and run.progress)
                                or (fact.kind == LOAD and (run.ready or run.went_down()))):
            run.finish(last=False, ends_mid_line=False, restarted=True)
            run = None
        if run is None:
            if not self.continued and not starts_a_run(fact, self.engine.name):
                if fact.kind in (EXCEPTION, FRAME, CRASH):
                    self.stray.append(fact)       # it may yet turn out to be the root cause of a chain
                    del self.stray[:-STRAY_FACTS]
                return                         # a stray line is not a run yet
            index = len(self.runs)
            run = self.engine.new_run(self.make_run_id(index, fact.line),
                                      seq_start=self.first_seq if index == 0 else 0,
                                      fallback_ts=self.fallback_ts)
            if self.continued and index == 0:
                run.saw_start = run.started = True
                if self.continued_ready:
                    run.ready, run.stage = True, "serving"
            self.runs.append(run)
            self.current = run
            for line in self.pending_lines:
                run.observe(line)
            self.pending_lines = []
            # "During handling of the above exception": the exception above is this failure's root
            replay, self.stray = (self.stray if fact.kind == CHAINED else []), []
            for earlier in replay:
                self._apply(run, earlier)
        self._apply(run, fact)

    def _apply(self, run: RunBuilder, fact: Fact) -> None:
        if fact.kind == BANNER and not run.progress:
            run.saw_start = True
        elif fact.kind not in TRACE_KINDS + (READY,) and fact.kind not in self.engine.setup:
            run.progress = True
        if fact.kind not in TRACE_KINDS + (READY,) or (fact.kind in TRACE_KINDS
                                                        and logged_by_the_engine(fact.line)):
            run.started = True          # a traceback the engine logged at ERROR level is the engine's
        run.observe(fact.line)
        try:
            run.apply(fact)
        except Exception as error:  # one odd line must not lose the run
            run.warnings.append(f"line {fact.line.lineno}: skipped ({type(error).__name__})")

    def finish(self, *, ends_mid_line: bool) -> list[RunBuilder]:
        if self.current is not None:
            self.current.finish(last=True, ends_mid_line=ends_mid_line, restarted=False)
        return self.kept()

    def kept(self) -> list[RunBuilder]:
        """Runs with an engine fact in them (not only a stray traceback)."""
        return [r for r in self.runs if r.started]

    # -- resuming (follow) ---------------------------------------------------------------
    def resumable(self) -> dict[str, Any]:
        """What a later parser needs to go on where this one stops: the line reader (its
        year, last stamp and rank), the open run with all it has seen, the lines waiting
        for a run. Finished runs are not part of it."""
        current = self.current if self.current is not None and not self.current.closed else None
        return {"reader": self.reader, "current": current, "pending_lines": self.pending_lines,
                "stray": self.stray, "lineno": self.lineno}

    def resume(self, state: dict[str, Any]) -> None:
        """Go on from ``resumable()`` of an earlier parser of the same log."""
        self.reader = state["reader"]
        self.year = self.reader.year
        self.current = state["current"]
        self.runs = [self.current] if self.current is not None else []
        self.pending_lines = list(state["pending_lines"])
        self.stray = list(state.get("stray") or [])
        self.lineno = int(state["lineno"])
        self.continued = False


def stamp_warning(reader: LineReader, year: YearGuess) -> str:
    """Where the year (or the day) of stamps that do not print it came from."""
    if reader.saw_dateless and not reader.saw_yearless:
        return f"the log's stamps print only a clock: the first day is taken from {year.evidence}"
    return f"the log's stamps print no year: {year.year} is inferred from {year.evidence}"


def run_id_for(source: str, digest: str, index: int) -> str:
    """Stable across re-imports of the same bytes: the content hash and the run's index."""
    return f"{source}-{digest[:20]}-{index}"


def stated_figures(config: dict[str, Any]) -> dict[str, Any]:
    """The figures an engine's log states about the capture sizes and the KV cache, from an
    imported run's config (both engines use the same keys); null where the log does not say.
    What ``--json`` prints and the Startup page shows."""
    def by_rank(key: str) -> dict[str, Any] | None:
        return config.get(key + "_by_rank") or None

    cap = config.get("capture_size_cap")
    return {
        "capture_sizes": {"count": config.get("capture_count"), "max": config.get("max_capture_size"),
                          "sizes": config.get("capture_sizes") or None,
                          "capped_from": cap.get("from") if isinstance(cap, dict) else None},
        "kv_cache": {"tokens": config.get("kv_tokens"), "gpu_blocks": config.get("kv_blocks"),
                     "cpu_blocks": config.get("cpu_blocks"), "tokens_by_rank": by_rank("kv_tokens"),
                     "gpu_blocks_by_rank": by_rank("kv_blocks"), "max_concurrency": config.get("max_concurrency")},
        "graph_mem_estimate_bytes": config.get("graph_mem_estimate_bytes"),
        "compile_cache": {"hits": config.get("compile_cache_hits"), "saves": config.get("compile_cache_saves")},
    }


class Tally:
    """What ``--json`` says of a run's events, kept as they pass: its phases, captures, step
    counts by mode and reason, its end, how many. The events themselves need not be kept
    (a streamed import writes and forgets them)."""

    def __init__(self, events: Iterable[dict[str, Any]] = ()):
        self.phases: list[dict[str, Any]] = []
        self.captures: list[dict[str, Any]] = []
        self.steps = {"graph": 0, "padded": 0, "eager": 0}
        self.reasons: dict[str, int] = {}
        self.end: dict[str, Any] = {}
        self.count = 0
        self.add(events)

    def add(self, events: Iterable[dict[str, Any]]) -> None:
        for e in events:
            self.count += 1
            kind = e["kind"]
            if kind == "phase":
                self.phases.append({"phase": e["phase"], "duration_s": e["duration_s"],
                                    "mem_bytes": e.get("mem_bytes"), "rank": e.get("rank")})
            elif kind == "capture":
                self.captures.append({k: e.get(k) for k in ("graph_bs", "stage", "duration_s", "pool_bytes",
                                                            "pool_delta_bytes", "status", "error", "variant",
                                                            "rank")})
            elif kind in ("step", "step_counts"):
                n = e.get("count", 1)
                self.steps[e["mode"]] += n
                if e.get("reason"):
                    self.reasons[e["reason"]] = self.reasons.get(e["reason"], 0) + n
            elif kind == "run_end" and not self.end:
                self.end = e


@dataclass
class ImportedRun:
    run: dict[str, Any]
    events: list[dict[str, Any]]      # every event (parse_text); [] for a streamed import, which wrote them
    status: str
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    ranks: list[str] = field(default_factory=list)
    tally: Tally | None = None

    def summary(self) -> dict[str, Any]:
        """What --json prints for this run."""
        config = self.run.get("config") or {}
        headline = config.get("rank_headline") or {}
        tally = self.tally if self.tally is not None else Tally(self.events)

        def is_headline(event: dict[str, Any], what: str) -> bool:
            return what not in headline or event.get("rank") == headline[what]

        phases, captures = tally.phases, tally.captures
        steps, reasons = dict(tally.steps), dict(tally.reasons)
        capture = [p for p in phases if p["phase"] == "capture" and is_headline(p, "capture")]
        timed = [c["duration_s"] for c in captures if c["duration_s"] is not None and is_headline(c, "captures")]
        end = tally.end
        unfinished = config.get("capture_unfinished")
        return {
            "run_id": self.run["run_id"], "name": self.run["name"], "source": self.run["source"],
            "backend": self.run["backend"], "model": self.run["model"], "device": self.run["device"],
            "started_at": self.run["started_at"], "partial": self.run.get("partial"),
            "time_provenance": self.run.get("time_provenance"), "status": self.status, "error": self.error,
            "failure": {k: end.get(k) for k in ("rank", "phase", "graph_bs")} if self.status == "failed" else None,
            "ranks": self.ranks, "phases": phases, "captures": captures,
            # a capture that did not finish has no total: its time so far is capture_unfinished's
            "capture_total_s": (capture[0]["duration_s"] if capture
                                else (round(sum(timed), 6) if timed and not unfinished else None)),
            "capture_unfinished": unfinished,
            "graph_mem_bytes": config.get("graph_mem_bytes"),
            **stated_figures(config),
            "steps": steps, "reasons": reasons, "events": tally.count,
            "warnings": self.warnings,
        }


@dataclass
class ImportResult:
    """Every run found in one log."""
    source: str
    path: str
    runs: list[ImportedRun]
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"source": self.source, "file": self.path, "rank_policy": RANK_POLICY,
                "runs": [r.summary() for r in self.runs], "warnings": self.warnings}


def imported(run: RunBuilder, name: str, log_file: str, tally: Tally | None = None) -> ImportedRun:
    record = run.record(name=name, log_file=log_file)
    end = tally.end if tally is not None else next((e for e in reversed(run.events) if e["kind"] == "run_end"), {})
    return ImportedRun(record, run.events if tally is None else [], run.status or "interrupted", run.warnings,
                       end.get("error") if end else None, record["config"]["ranks"], tally)


# drain(run, name, record_name, events, final): a streamed import's events, as the parser emits them
Drain = Callable[[RunBuilder, str, list[dict[str, Any]], bool], None]
DRAIN_EVERY = 20_000          # lines between two drains of a streamed import


def parse_lines(engine: Engine, lines: Iterable[str], *, ends_mid_line: Callable[[], bool], head: str, path: str,
                mtime: float, digest: str, drain: Drain | None = None) -> ImportResult:
    """A log's lines into runs; never raises on its content. Without ``drain`` every run
    keeps its events (``parse_text``). With it, each run's events go to
    ``drain(run, name, events, final)`` every ``DRAIN_EVERY`` lines and at its end (``final``:
    its record is complete), and are forgotten: the working set stays bounded whatever the
    log's length (``ImportedRun.tally`` keeps what ``--json`` says of them)."""
    base = os.path.basename(path) or f"{engine.name}.log"
    tallies: dict[int, Tally] = {}
    try:
        year = infer_year(head, mtime)
        parser = LogParser(engine, year=year, run_id=lambda index, _line: run_id_for(engine.name, digest, index),
                           fallback_ts=mtime)

        def flush(final: bool) -> None:
            for i, run in enumerate(parser.kept()):
                if run.events or (final and id(run) not in tallies):
                    tallies.setdefault(id(run), Tally()).add(run.events)
                    drain(run, f"{base} run {i + 1}", list(run.events), final)
                    run.events.clear()

        for n, raw in enumerate(lines, 1):
            parser.feed(raw)
            if drain is not None and n % DRAIN_EVERY == 0:
                flush(False)
        runs = parser.finish(ends_mid_line=ends_mid_line())
        for run in runs:
            if run.yearless:
                run.warnings.append(stamp_warning(parser.reader, parser.reader.year))
        if drain is not None:
            flush(True)
        out = [imported(run, f"{base} run {i + 1}", base, tallies.get(id(run)) if drain is not None else None)
               for i, run in enumerate(runs)]
    except ReplayscopeError:
        raise                    # the file could not be read, or the store refused a write
    except Exception as error:  # never let a log's content crash the command
        return ImportResult(engine.source, path, [], [f"the importer failed on this log "
                                                      f"({type(error).__name__}: {error}); nothing imported"])
    result = ImportResult(engine.source, path, out, parser.warnings)
    if not out:
        result.warnings.append(f"no {engine.label} server start, startup line or failure found in this log")
    return result


def parse_text(engine: Engine, text: str, *, path: str, mtime: float, digest: str | None) -> ImportResult:
    """A whole log's text into runs, every run with its events; never raises on its content."""
    if digest is None:
        digest = hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()
    pieces, ends_mid_line = split_lines(text)
    return parse_lines(engine, pieces, ends_mid_line=lambda: ends_mid_line, head=text[:4_000_000], path=path,
                       mtime=mtime, digest=digest)
