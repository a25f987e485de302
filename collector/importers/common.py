"""What the log importers share: reading a log, splitting it into lines with their
timestamp and rank, segmenting it into runs, and building wire records from facts.

An engine parser (``vllm_log``, ``sglang_log``) turns each line into at most one *fact*
(a kind and a dict); this module cuts the facts into runs (a restart starts a new one),
picks the primary rank of each run, and turns the engine's findings into a wire run
record plus events, every one checked with ``runner.wire``. Nothing here raises on the
text of a log: a line that does not parse is skipped, a figure that does not fit the
wire is dropped with a warning.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from runner.errors import ReplayscopeError
from runner.wire import WIRE_VERSION, WireError, validate_event, validate_run

GIB = 2**30
MIB = 2**20
# How ranks are reported, for --json and docs/importing.md.
RANK_POLICY = ("merged: one run per server start; startup facts and steps come from the "
               "lowest rank in the log (TP0 / rank 0, or lines without a rank); other "
               "ranks contribute only their failures")
MAX_FILE_BYTES = 2 * 2**30

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_NUM = r"(-?\d+(?:\.\d+)?)"
NUM = _NUM

# -- numbers and memory ------------------------------------------------------------------


def num(text: str | None) -> float | None:
    """A finite float, or None."""
    if text is None:
        return None
    try:
        value = float(text.replace(",", ""))
    except (ValueError, OverflowError):
        return None
    return value if math.isfinite(value) and abs(value) < 1e15 else None


def to_int(text: str | None) -> int | None:
    value = num(text)
    if value is None or value != int(value) or abs(value) > 2**62:
        return None
    return int(value)


def mem_bytes(value: float | str | None, unit: str = "GiB") -> int | None:
    """Bytes from an engine's memory figure. ``GB`` counts as GiB: SGLang and vLLM both
    divide by ``1 << 30`` before printing, whatever they call the unit."""
    if isinstance(value, str):
        value = num(value)
    if value is None:
        return None
    scale = MIB if unit.upper().startswith("M") else GIB
    result = round(value * scale)
    return result if abs(result) <= 2**62 else None


def int_list(text: str) -> list[int]:
    """``1, 2, 4`` (the inside of a printed Python list) as ints; junk entries dropped."""
    out = []
    for part in text.split(","):
        value = to_int(part.strip())
        if value is not None and value >= 1:
            out.append(value)
    return out


# -- lines -------------------------------------------------------------------------------

RankKey = tuple  # (dp, pp, tp, rank) with 0 for a missing part


@dataclass
class LogLine:
    lineno: int
    text: str                      # the message: ANSI codes and prefixes removed
    ts: float | None = None        # unix seconds (UTC) from the line's own timestamp
    rank: RankKey | None = None    # None: the line names no rank
    rank_label: str | None = None


_VLLM_PROC = re.compile(r"^\((?P<proc>[A-Za-z][A-Za-z0-9_]*)(?: rank=(?P<rank>\d+))? pid=\d+\)\s*", re.A)
_RANK_BRACKET = re.compile(r"^\[rank(?P<rank>\d+)\]:?\s*", re.A)
_VLLM_TS = re.compile(
    r"^(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(?P<mo>\d\d)-(?P<d>\d\d)\s+"
    r"(?P<t>\d\d:\d\d:\d\d)(?:[.,]\d+)?\s+(?:\[[^\]]*\]|[\w./-]+:\d+\])\s*", re.A)
_SGLANG_TS = re.compile(
    r"^\[(?P<date>\d{4}-\d\d-\d\d)[ T](?P<t>\d\d:\d\d:\d\d)(?:[.,]\d+)?"
    r"(?P<ranks>(?:\s+[A-Z]{2}\d+)*)\]\s*", re.A)
_ISO_TS = re.compile(
    r"^(?P<date>\d{4}-\d\d-\d\d)[ T](?P<t>\d\d:\d\d:\d\d)(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+", re.A)
_LEVEL = re.compile(r"^(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?::\s+|\s+(?=\S))", re.A)
_LEVEL_COLON = re.compile(r"^(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL):\s+", re.A)  # uvicorn
_PARTS = re.compile(r"(DP|PP|TP|EP)(\d+)", re.A)


def _rank_key(parts: dict[str, int]) -> RankKey:
    return (parts.get("DP", 0), parts.get("PP", 0), parts.get("TP", 0), parts.get("rank", 0))


def _utc(date: str, clock: str) -> float | None:
    try:
        return datetime.strptime(f"{date} {clock}", "%Y-%m-%d %H:%M:%S").replace(
            tzinfo=timezone.utc).timestamp()
    except (ValueError, OverflowError):
        return None


class LineReader:
    """Strips colour codes and the prefixes engines and launchers put before a message.

    vLLM prints ``MM-DD HH:MM:SS`` without a year: the year is the file's modification
    year, or the one before when that would put the line after the file was written.
    Timestamps carry no zone; they are read as UTC.
    """

    def __init__(self, mtime: float):
        self.mtime = mtime
        self.year = datetime.fromtimestamp(max(mtime, 0), timezone.utc).year
        self.last_ts: float | None = None

    def _vllm_ts(self, m: re.Match) -> float | None:
        ts = _utc(f"{self.year}-{m['mo']}-{m['d']}", m["t"])
        if ts is not None and ts > self.mtime + 86400:
            ts = _utc(f"{self.year - 1}-{m['mo']}-{m['d']}", m["t"])
        return ts

    def read(self, lineno: int, raw: str) -> LogLine:
        text = _ANSI.sub("", raw).replace("\x00", "").strip()
        line = LogLine(lineno, text)
        parts: dict[str, int] = {}
        labels: list[str] = []
        for _ in range(8):
            m = _VLLM_PROC.match(text)
            if m:
                proc = m["proc"]
                found = {k: int(v) for k, v in _PARTS.findall(proc)}
                if m["rank"] is not None:
                    found["rank"] = int(m["rank"])
                if not found and "Worker" in proc:
                    found["rank"] = 10**6      # a worker that does not say its rank
                if found:
                    parts.update(found)
                    labels.append(proc + (f" rank={m['rank']}" if m["rank"] else ""))
                text = text[m.end():]
                continue
            m = _RANK_BRACKET.match(text)
            if m:
                parts["rank"] = int(m["rank"])
                labels.append(f"rank{m['rank']}")
                text = text[m.end():]
                continue
            m = _VLLM_TS.match(text)
            if m:
                line.ts = self._vllm_ts(m) if line.ts is None else line.ts
                text = text[m.end():]
                continue
            m = _SGLANG_TS.match(text)
            if m:
                line.ts = _utc(m["date"], m["t"]) if line.ts is None else line.ts
                ranks = m["ranks"].split()
                if ranks:
                    parts.update({k: int(v) for k, v in _PARTS.findall(m["ranks"])})
                    labels.append(" ".join(ranks))
                text = text[m.end():]
                continue
            m = _ISO_TS.match(text)
            if m:
                line.ts = _utc(m["date"], m["t"]) if line.ts is None else line.ts
                text = text[m.end():]
                continue
            m = _LEVEL_COLON.match(text) or (_LEVEL.match(text) if line.ts is not None else None)
            if m:
                text = text[m.end():]
                continue
            break
        # a continuation line (a table row, a tqdm update) happened when the line above did
        if line.ts is None:
            line.ts = self.last_ts
        else:
            self.last_ts = line.ts
        if parts:
            line.rank = _rank_key(parts)
            line.rank_label = " ".join(labels)
        line.text = text.strip()
        return line


def split_lines(text: str) -> tuple[list[str], bool]:
    """Lines of a log, tqdm's carriage-return updates each their own line; and whether
    the text stops in the middle of a line (a truncated or still-growing file)."""
    ends_mid_line = bool(text) and not text.endswith(("\n", "\r"))
    pieces = re.split(r"\r\n|\n|\r", text)
    if pieces and pieces[-1] == "":
        pieces.pop()
    return pieces, ends_mid_line


# -- reading a file ----------------------------------------------------------------------


def read_log_file(path: str) -> tuple[str, float, str]:
    """(text, mtime, sha256) of a log file; ReplayscopeError for anything not a text log."""
    if not os.path.exists(path):
        raise ReplayscopeError(f"{path}: no such file")
    if os.path.isdir(path):
        raise ReplayscopeError(f"{path} is a directory, not a log file")
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise ReplayscopeError(f"{path}: {size} bytes is more than a log importer reads (2 GiB)")
        with open(path, "rb") as handle:
            data = handle.read()
        mtime = os.path.getmtime(path)
    except OSError as error:
        raise ReplayscopeError(f"{path}: cannot read: {error.strerror or error}") from None
    if looks_binary(data):
        raise ReplayscopeError(f"{path} is a binary file, not a server log")
    return data.decode("utf-8", errors="replace"), mtime, hashlib.sha256(data).hexdigest()


def looks_binary(data: bytes) -> bool:
    head = data[:65536]
    if not head:
        return False
    if b"\x00" in head:
        return True
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 13, 27, 12, 8))
    return controls > len(head) * 0.05


# -- facts and runs ----------------------------------------------------------------------


@dataclass
class Fact:
    line: LogLine
    kind: str
    data: dict[str, Any] = field(default_factory=dict)


# Fact kinds the segmenter understands; everything else is engine-specific.
BANNER = "banner"        # a startup banner: a new run when the current one has started
LOAD = "load"            # weights begin/end loading: a new run after a ready or failed one
READY = "ready"          # the server answers requests
FATAL = "fatal"          # the process is going down
EXCEPTION = "exception"  # an exception line: the error text when the run fails
# Kinds kept from ranks other than the primary one.
FAILURE_KINDS = {FATAL, EXCEPTION, "capture_failed"}


@dataclass
class Segment:
    facts: list[Fact] = field(default_factory=list)
    started: bool = False
    done: bool = False       # ready or failed: a new load means a restart


def segment(facts: list[Fact], progress_kinds: set[str]) -> list[Segment]:
    """Cut facts into server starts: a banner after the run has made progress, or a
    weight load after the server was ready or failed, starts a new run."""
    segments = [Segment()]
    for fact in facts:
        current = segments[-1]
        if (fact.kind == BANNER and current.started) or (fact.kind == LOAD and current.done):
            current = Segment()
            segments.append(current)
        current.facts.append(fact)
        if fact.kind in progress_kinds or fact.kind in (LOAD, READY, FATAL):
            current.started = True
        if fact.kind in (READY, FATAL, "capture_failed"):
            current.done = True
    return [s for s in segments if s.facts]


def meaningful(segments: list[Segment]) -> list[Segment]:
    """Runs that say something: not only stray exception, fatal or ready lines."""
    return [s for s in segments if any(f.kind not in (EXCEPTION, FATAL, READY) for f in s.facts)]


def segment_lines(segments: list[Segment], lines: list[LogLine]) -> list[tuple[Segment, list[LogLine]]]:
    """Each run with the log lines it spans: from its first fact (the first run: from the
    top) to the line before the next run's first fact (the last run: to the end)."""
    out = []
    for i, seg in enumerate(segments):
        start = 1 if i == 0 else seg.facts[0].line.lineno
        stop = segments[i + 1].facts[0].line.lineno - 1 if i + 1 < len(segments) else len(lines)
        out.append((seg, lines[start - 1:stop]))
    return out


def primary_rank(facts: list[Fact]) -> RankKey | None:
    ranks = [f.line.rank for f in facts if f.line.rank is not None]
    return min(ranks) if ranks else None


def keep_fact(fact: Fact, primary: RankKey | None) -> bool:
    return fact.line.rank is None or fact.line.rank == primary or fact.kind in FAILURE_KINDS


def collect_facts(text: str, mtime: float, classify: Callable[[LogLine], Fact | None],
                  warnings: list[str]) -> tuple[list[Fact], list[LogLine], bool]:
    """Every line classified; a line the classifier chokes on is skipped with a warning."""
    reader = LineReader(mtime)
    pieces, ends_mid_line = split_lines(text)
    facts: list[Fact] = []
    lines: list[LogLine] = []
    failures = 0
    for index, raw in enumerate(pieces, start=1):
        try:
            line = reader.read(index, raw)
            lines.append(line)
            if not line.text:
                continue
            fact = classify(line)
        except Exception as error:  # a parser bug must not lose the rest of the log
            failures += 1
            if failures <= 5:
                warnings.append(f"line {index}: skipped, could not be read ({type(error).__name__})")
            continue
        if fact is not None:
            facts.append(fact)
    return facts, lines, ends_mid_line


# -- building wire records ---------------------------------------------------------------


def run_id_for(source: str, digest: str, index: int) -> str:
    """Stable across re-imports of the same bytes: the content hash and the run's index."""
    return f"{source}-{digest[:20]}-{index}"


def clip(text: str | None, limit: int) -> str | None:
    if text is None:
        return None
    text = "".join(ch if ch.isprintable() else " " for ch in text).strip()
    return text[:limit]


class EventList:
    """Events in log order; ``seq`` is assigned when the run is finished. An event the
    wire would reject is dropped with a warning rather than failing the import."""

    def __init__(self, warnings: list[str]):
        self.items: list[tuple[int, int, dict[str, Any]]] = []
        self.warnings = warnings
        self._n = 0

    def add(self, order: int, event: dict[str, Any]) -> None:
        self._n += 1
        self.items.append((order, self._n, event))

    def finish(self, default_ts: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for _, _, event in sorted(self.items, key=lambda item: (item[0], item[1])):
            event = dict(event)
            if event.get("ts") is None:
                event["ts"] = default_ts
            if event.get("kind") == "phase" and event.get("start_ts") is not None and event["start_ts"] < 0:
                event["start_ts"] = None
            event["seq"] = len(out)
            try:
                validate_event(event)
            except WireError as error:
                self.warnings.append(f"dropped a {event.get('kind')} event that does not fit the wire ({error})")
                continue
            out.append(event)
        for i, event in enumerate(out):
            event["seq"] = i
        return out


@dataclass
class ImportedRun:
    run: dict[str, Any]
    events: list[dict[str, Any]]
    status: str
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    ranks: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """What --json prints for this run."""
        phases = [{"phase": e["phase"], "duration_s": e["duration_s"], "mem_bytes": e.get("mem_bytes")}
                  for e in self.events if e["kind"] == "phase"]
        captures = [{k: e.get(k) for k in ("graph_bs", "stage", "duration_s", "pool_bytes",
                                           "pool_delta_bytes", "status", "error", "variant")}
                    for e in self.events if e["kind"] == "capture"]
        steps = {"graph": 0, "padded": 0, "eager": 0}
        reasons: dict[str, int] = {}
        for e in self.events:
            if e["kind"] in ("step", "step_counts"):
                n = e.get("count", 1)
                steps[e["mode"]] += n
                if e.get("reason"):
                    reasons[e["reason"]] = reasons.get(e["reason"], 0) + n
        capture_phase = next((p for p in phases if p["phase"] == "capture"), None)
        config = self.run.get("config") or {}
        return {
            "run_id": self.run["run_id"], "name": self.run["name"], "source": self.run["source"],
            "backend": self.run["backend"], "model": self.run["model"], "device": self.run["device"],
            "started_at": self.run["started_at"], "status": self.status, "error": self.error,
            "ranks": self.ranks, "phases": phases, "captures": captures,
            "capture_total_s": capture_phase["duration_s"] if capture_phase else
            round(sum(c["duration_s"] for c in captures), 6),
            "graph_mem_bytes": config.get("graph_mem_bytes"),
            "steps": steps, "reasons": reasons, "events": len(self.events),
            "warnings": self.warnings,
        }


def make_run_record(*, source: str, run_id: str, name: str, started_at: float, backend: str | None,
                    model: str | None, device: str | None, config: dict[str, Any]) -> dict[str, Any]:
    record = {
        "run_id": run_id, "name": clip(name, 200) or run_id, "source": source,
        "started_at": max(0.0, float(started_at)), "backend": clip(backend, 64) or "unknown",
        "model": clip(model, 300) or "unknown", "device": clip(device, 200) or "unknown",
        "torch_version": None, "config": config, "wire_version": WIRE_VERSION,
    }
    validate_run(record)
    return record


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


def run_status(*, ready: bool, fatal: bool, last: bool, ends_mid_line: bool,
               warnings: list[str]) -> str:
    """finished: the server came up (and the log does not stop mid-line); failed: it went
    down before serving; interrupted: the log stops (or restarts) before either."""
    if fatal and not ready:
        return "failed"
    if last and ends_mid_line:
        warnings.append("the log ends in the middle of a line (truncated?): imported as far as it goes")
        return "interrupted"
    if not ready:
        if last:
            warnings.append("the log ends before the server was ready (truncated?): imported as far as it goes")
        else:
            warnings.append("the server restarted before it was ready")
        return "interrupted"
    return "finished"


def assemble_runs(text: str, *, path: str, mtime: float, digest: str, engine: str, source: str,
                  classify: Callable[[LogLine], Fact | None], progress_kinds: set[str],
                  new_run: Callable[[list[Fact], list[str]], Any]) -> ImportResult:
    """A log's text into runs: one per server start, each from its primary rank's facts.

    ``new_run(facts, warnings)`` makes the engine's run builder, which has ``apply(fact)``,
    ``finish()``, ``error_for(status)``, ``model()``, ``backend()``, ``device()``,
    ``config()``, and ``ready``, ``fatal``, ``events``.
    """
    warnings: list[str] = []
    facts, lines, ends_mid_line = collect_facts(text, mtime, classify, warnings)
    segments = meaningful(segment(facts, progress_kinds=progress_kinds))
    runs: list[ImportedRun] = []
    base = os.path.basename(path) or f"{engine}.log"
    for index, (seg, seg_lines) in enumerate(segment_lines(segments, lines)):
        run_warnings: list[str] = []
        primary = primary_rank(seg.facts)
        kept = [f for f in seg.facts if keep_fact(f, primary)]
        run = new_run(kept, run_warnings)
        run.primary = primary
        for fact in kept:
            try:
                run.apply(fact)
            except Exception as error:  # one odd line must not lose the run
                run_warnings.append(f"line {fact.line.lineno}: skipped ({type(error).__name__})")
        run.finish()
        stamps = [line.ts for line in seg_lines if line.ts is not None]
        started_at = stamps[0] if stamps else mtime
        status = run_status(ready=run.ready, fatal=run.fatal, last=index == len(segments) - 1,
                            ends_mid_line=ends_mid_line, warnings=run_warnings)
        error = run.error_for(status)
        end_ts = stamps[-1] if stamps else started_at
        run.events.add(10**12, {"kind": "run_end", "ts": end_ts, "status": status, "error": error})
        events = run.events.finish(started_at)
        ranks = sorted({f.line.rank_label for f in seg.facts if f.line.rank_label})
        model = run.model()
        record = make_run_record(
            source=source, run_id=run_id_for(engine, digest, index),
            name=f"{base} run {index + 1}" + (f" ({model})" if model else ""),
            started_at=started_at, backend=run.backend(), model=model, device=run.device(),
            config=dict(run.config(), ranks=ranks, log_file=base))
        runs.append(ImportedRun(record, events, status, run_warnings, error, ranks))
    return ImportResult(source, path, runs, warnings)


def safe_parse(parse: Callable[..., ImportResult], source: str, text: str, path: str, mtime: float,
               digest: str | None) -> ImportResult:
    """Run ``parse``; if it fails on this text (a bug), return what can be said instead
    of raising: no runs and the reason as a warning."""
    if digest is None:
        digest = hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()
    try:
        return parse(text, path=path, mtime=mtime, digest=digest)
    except Exception as error:  # never let a log's content crash the command
        return ImportResult(source, path, [], [f"the importer failed on this log "
                                               f"({type(error).__name__}: {error}); nothing imported"])
