"""Reading one physical log line into messages: time, rank and text, whatever wrapped it.

Engines and launchers put a lot in front of a message: colour codes, docker compose's
``service-1  | ``, kubectl's ``--timestamps`` RFC 3339 stamp, a cloud logger's level and
stamp, vLLM's process tag ``(Worker_TP1 pid=42)`` and ``LEVEL MM-DD HH:MM:SS [file:line]``,
SGLang's ``[YYYY-MM-DD HH:MM:SS DP0 TP3]``, torchrun's ``[rank3]:``, uvicorn's
``INFO:     ``, or a whole JSON object per line (vLLM's JSON logging). ``LineReader.read``
strips all of it and returns the messages the line holds (a JSON message or a line where a
log record starts in the middle of a progress bar can hold several).

Stamps without a zone are read as UTC; the year of vLLM's yearless stamps:
``replayscope.collector.importers.years``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from replayscope.collector.importers.years import (DATED, LEVEL_ANY, YearGuess, date_ts, decide_year,
                                                   vllm_version)


RankKey = tuple  # the rank parts a line names, sorted: (("DP", 0), ("TP", 1)); (("pid", 42),)
RANK_AXES = ("DP", "PP", "PCP", "TP", "DCP", "EP", "CP")   # the order a rank label names them in
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_LEVELS = r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"
# docker compose's "service-1  | " (the line itself may start with spaces: a traceback frame)
_COMPOSE = re.compile(r"^[A-Za-z0-9][\w.-]*\s+\|(?: |$)", re.A)
_ISO = (r"(?P<date>\d{4}-\d\d-\d\d)[ T](?P<t>\d\d:\d\d:\d\d)(?P<frac>[.,]\d+)?"
        r"(?P<zone>Z|[+-]\d\d:?\d\d)?")
_ISO_TS = re.compile(r"^" + _ISO + r"(?:\s+-\s+" + _LEVELS + r"\s+-\s+(?:[\w./-]+:\d+\s+-\s+)?|\s+|$)", re.A)
_LEVEL_ISO = re.compile(r"^" + _LEVELS + r"\s+" + _ISO + r"\s+", re.A)         # cloud loggers
_BRACKET = re.compile(r"^\[resource\.[^\]]*\]\s*|^\[[\w.-]+:\s*[\w.-]+\]\s*", re.A)
# vLLM's process tag: (EngineCore_DP0 pid=1), (Worker_PP1_TP0 pid=2), (VllmWorker rank=1 pid=3),
# 0.10's (VllmWorker TP5 pid=4) / (VllmWorker PP1_TP0 pid=5), (RayWorkerWrapper pid=6, ip=...)
_PROC = re.compile(r"^\((?P<proc>[A-Za-z][\w-]*(?:\s+_?[A-Z]{2,4}\d+(?:_[A-Z]{2,4}\d+)*_?)?)(?: rank=(?P<rank>\d+))?"
                   r"\s+pid=(?P<pid>\d+)(?:,\s*ip=(?P<ip>[\w.:-]+))?\)\s*", re.A)
_RANK_BRACKET = re.compile(r"^\[rank(?P<rank>\d+)\]:?\s*", re.A)
_VLLM_TS = re.compile(
    r"^" + _LEVELS + r"\s+(?P<mo>\d\d)-(?P<d>\d\d)\s+(?P<t>\d\d:\d\d:\d\d)(?:[.,]\d+)?\s+"
    r"(?:\[[^\]]*\]|[\w./-]+:\d+\])\s*", re.A)
# SGLang's "[%(asctime)s DP0 TP3]" in every datefmt it has used: "%Y-%m-%d %H:%M:%S",
# "%m-%d %H:%M:%S" and "%H:%M:%S"; a CI runner's "[2025-12-13T19:54:35Z]"; and a bare
# "[TP0]" where a logging config drops the time.
_AXES = "(?:" + "|".join(RANK_AXES) + ")"
_BRACKET_TS = re.compile(
    r"^\[(?:(?:(?P<date>\d{4}-\d\d-\d\d)|(?P<mo>\d\d)-(?P<d>\d\d))[ T])?(?P<t>\d\d:\d\d:\d\d)(?P<frac>[.,]\d+)?"
    r"(?P<zone>Z|[+-]\d\d:?\d\d)?(?P<ranks>(?:\s+[A-Z]{2,4}\d+)*)\]\s*", re.A)
_RANKS_ONLY = re.compile(r"^\[(?P<ranks>" + _AXES + r"\d+(?:\s+" + _AXES + r"\d+)*)\]\s*", re.A)
# A bare clock in front of a record ("05:21:11 (EngineCore pid=75) INFO ...") and a level with
# its source but no stamp ("INFO [monitor.py:53] ..."), as some logging configs print them.
_BARE_CLOCK = re.compile(r"^(?P<t>\d\d:\d\d:\d\d)(?P<frac>[.,]\d+)?\s+(?=\(|" + LEVEL_ANY + r"\b)", re.A)
_LEVEL_FILE = re.compile(r"^" + _LEVELS + r"\s+\[[\w./-]+:\d+\]\s*", re.A)
_UVICORN = re.compile(r"^" + _LEVELS + r":\s+", re.A)
_LEVEL_WORD = re.compile(r"^" + _LEVELS + r"\s+(?=\S)", re.A)
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_PARTS = re.compile(r"(?<![A-Za-z])(" + "|".join(RANK_AXES) + r")_?(\d+)", re.A)
# Where a log record starts in the middle of a line (after a progress-bar fragment that
# had no newline of its own).
_RECORD_START = re.compile(
    r"\((?:[A-Za-z][\w-]*)(?:\s+_?[A-Z]{2,4}\d+\w*)?(?: rank=\d+)?\s+pid=\d+[^)]*\)\s*" + LEVEL_ANY +
    r"|" + LEVEL_ANY + r"\s+\d\d-\d\d\s+\d\d:\d\d:\d\d"
    r"|\[(?:\d{4}-)?(?:\d\d-\d\d[ T])?\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?(?:\s+[A-Z]{2,4}\d+)*\]", re.A)
_BAR_HINT = re.compile(r"%\||it/s\]|s/it\]|\?it/s")
# An unstamped line that continues the record above it (a traceback of a rank's exception).
_CONTINUATION = re.compile(r"^(?:Traceback \(most recent|File \"|During handling|The above exception|"
                           r"(?:[A-Za-z_][\w.]*\.)?(?:[A-Z]\w*)?(?:Error|Exception)\b|\s)")
_JSON_TIME_KEYS = ("asctime", "timestamp", "time", "ts", "@timestamp")
_JSON_MESSAGE_KEYS = ("message", "msg")
_JSON_PROC_KEYS = ("vllm_process_name", "processName", "process_name")


def rank_key(parts: dict[str, int]) -> RankKey:
    return tuple(sorted(parts.items()))


def rank_label(parts: dict[str, int], pid: str | None = None) -> str:
    """The rank as the engine names it: "TP1", "DP0 TP3", "rank 2", "pid 4242"."""
    names = [f"{k}{parts[k]}" for k in RANK_AXES if k in parts]
    if "rank" in parts:
        names.append(f"rank {parts['rank']}")
    if not names and pid:
        names.append(f"pid {pid}")
    return " ".join(names)


@dataclass
class LogLine:
    lineno: int
    text: str                      # the message: colour codes and prefixes removed
    ts: float | None = None        # unix seconds (UTC)
    rank: RankKey | None = None    # None: the line names no rank
    rank_label: str | None = None
    dated: bool = True             # False: the stamp had no year (vLLM) and one was inferred
    level: str | None = None       # the logging level the line was printed at (ERROR, INFO, ...), if it shows
    process: str | None = None     # vLLM's process tag: EngineCore_DP0, Worker_TP1, APIServer, ...


def _utc(date: str, clock: str, zone: str | None = None) -> float | None:
    try:
        moment = datetime.strptime(f"{date} {clock}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    except (ValueError, OverflowError):
        return None
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        moment -= sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
    return moment.timestamp()


def _fraction(frac: str | None) -> float:
    if not frac:
        return 0.0
    try:
        return float("0." + frac[1:])
    except ValueError:
        return 0.0


def split_records(raw: str) -> list[str]:
    """A physical line cut where a log record starts after a progress-bar fragment
    (``Capturing ...: 69%|#(Worker pid=1) INFO ...``)."""
    pieces = []
    rest = raw
    while True:
        cut = None
        for m in _RECORD_START.finditer(rest):
            if m.start() > 0 and _BAR_HINT.search(rest[:m.start()]):
                cut = m.start()
                break
        if cut is None:
            pieces.append(rest)
            return pieces
        pieces.append(rest[:cut])
        rest = rest[cut:]


class LineReader:
    """Turns raw lines into ``LogLine`` messages; remembers the last stamp for lines that
    have none (table rows, progress bars, traceback frames)."""

    def __init__(self, year: YearGuess):
        self.year = year
        # while the year is undecided: the evidence read so far (a dated line, a version)
        self._dated: tuple[str, str, str, str] | None = None
        self._version: tuple[int, int] | None = None
        self.last_ts: float | None = None
        self.last_rank: tuple[RankKey | None, str | None] = (None, None)
        self._year_shift = 0
        self._last_yearless: float | None = None
        self.saw_yearless = False
        self.saw_dateless = False

    def _vllm_ts(self, m: re.Match) -> float | None:
        return self._yearless_ts(m["mo"], m["d"], m["t"])

    def _yearless_ts(self, month: str, day: str, clock: str) -> float | None:
        if self.year.year is None:
            if date_ts(2000, month, day) is None:
                return None
            self.year = decide_year((month, day), self._dated, self._version, self.year.reference,
                                    self.year.reference_label)
        year = self.year.year + self._year_shift
        ts = _utc(f"{year}-{month}-{day}", clock)
        if ts is not None and self._last_yearless is not None and ts < self._last_yearless - 180 * 86400:
            self._year_shift += 1            # the log crossed New Year
            ts = _utc(f"{year + 1}-{month}-{day}", clock)
        if ts is not None:
            self._last_yearless = ts
            self.saw_yearless = True
        return ts

    def _clock_ts(self, clock: str) -> float | None:
        """A stamp that is only a clock: the day of the last stamp, else the inferred one;
        a clock that goes back by more than half a day crossed midnight."""
        if self.last_ts is not None:
            day = datetime.fromtimestamp(self.last_ts, timezone.utc).strftime("%Y-%m-%d")
        else:
            day = self.year.day or f"{self.year.year or 1970}-01-01"
        ts = _utc(day, clock)
        if ts is not None and self.last_ts is not None and ts < self.last_ts - 43200:
            ts += 86400
        if ts is not None:
            self.saw_dateless = True
        return ts

    def _bracket_ts(self, m: re.Match) -> tuple[float | None, bool]:
        """(unix time, whether the stamp printed its year) of a bracketed stamp."""
        if m["date"]:
            ts = _utc(m["date"], m["t"], m["zone"])
            return (None if ts is None else ts + _fraction(m["frac"])), True
        ts = self._yearless_ts(m["mo"], m["d"], m["t"]) if m["mo"] else self._clock_ts(m["t"])
        return (None if ts is None else ts + _fraction(m["frac"])), False

    def read(self, lineno: int, raw: str) -> list[LogLine]:
        text = _ANSI.sub("", raw).replace("\x00", "").rstrip()
        if self.year.year is None and self._dated is None:
            self._gather_year_evidence(text)
        if text.lstrip().startswith("{"):
            lines = self._json(lineno, text)
            if lines is not None:
                return lines
        return [self._one(lineno, piece) for piece in split_records(text)]

    def _gather_year_evidence(self, text: str) -> None:
        """What a year decided later can rest on: the first dated line, the vLLM version."""
        if self._dated is None:
            m = next((m for m in DATED.finditer(text) if date_ts(int(m.group(1)), m.group(2), m.group(3))), None)
            if m:
                self._dated = (m.group(0), m.group(1), m.group(2), m.group(3))
        if self._version is None:
            self._version = vllm_version(text)

    def _json(self, lineno: int, text: str) -> list[LogLine] | None:
        try:
            record = json.loads(text.strip())
        except ValueError:
            return None
        if not isinstance(record, dict):
            return None
        message = next((record[k] for k in _JSON_MESSAGE_KEYS if isinstance(record.get(k), str)), None)
        if message is None:
            return None
        ts = None
        for key in _JSON_TIME_KEYS:
            value = record.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                ts = float(value)
                break
            if isinstance(value, str):
                m = re.match(_ISO, value.strip())
                if m:
                    ts = _utc(m["date"], m["t"], m["zone"])
                    if ts is not None:
                        ts += _fraction(m["frac"])
                        break
                m = re.match(r"(?P<mo>\d\d)-(?P<d>\d\d)\s+(?P<t>\d\d:\d\d:\d\d)", value.strip())
                if m:
                    ts = self._vllm_ts(m)
                    break
        parts: dict[str, int] = {}
        label = process = None
        for key in _JSON_PROC_KEYS:
            proc = record.get(key)
            if isinstance(proc, str) and proc:
                process = proc
                parts = _proc_parts(proc, None)
                if parts:
                    label = rank_label(parts)
                    break
        out = []
        for piece in message.splitlines() or [""]:
            line = self._one(lineno, piece)
            if ts is not None:
                line.ts = ts
                self.last_ts = ts
            if parts and line.rank is None:
                line.rank, line.rank_label = rank_key(parts), label
            line.process = line.process or process
            if isinstance(record.get("levelname"), str):
                line.level = line.level or record["levelname"].upper()
            out.append(line)
        return out

    def _one(self, lineno: int, text: str) -> LogLine:
        raw = text
        text = text.strip()
        line = LogLine(lineno, text)
        parts: dict[str, int] = {}
        pid = None
        for _ in range(10):
            m = _COMPOSE.match(text)
            if m and not text.startswith("|"):
                text = text[m.end():]
                continue
            m = _ISO_TS.match(text) or _LEVEL_ISO.match(text)
            if m:
                line.level = line.level or m["level"]
                if line.ts is None:
                    ts = _utc(m["date"], m["t"], m["zone"])
                    line.ts = None if ts is None else ts + _fraction(m["frac"])
                text = text[m.end():]
                continue
            m = _BRACKET.match(text)
            if m and line.ts is not None:
                text = text[m.end():]
                continue
            m = _PROC.match(text)
            if m:
                line.process = line.process or m["proc"]
                found = _proc_parts(m["proc"], m["rank"])
                parts.update(found)
                if not found:
                    pid = m["pid"] if "Worker" in m["proc"] or "Ray" in m["proc"] else pid
                text = text[m.end():]
                continue
            m = _RANK_BRACKET.match(text)
            if m:
                parts["rank"] = int(m["rank"])
                text = text[m.end():]
                continue
            m = _VLLM_TS.match(text)
            if m:
                line.level = line.level or m["level"]
                if line.ts is None:
                    line.ts = self._vllm_ts(m)
                    line.dated = False
                text = text[m.end():]
                continue
            m = _BRACKET_TS.match(text)
            if m:
                if line.ts is None:
                    line.ts, line.dated = self._bracket_ts(m)
                if m["ranks"].strip():
                    parts.update({k: int(v) for k, v in _PARTS.findall(m["ranks"])})
                text = text[m.end():]
                continue
            m = _RANKS_ONLY.match(text)
            if m:
                parts.update({k: int(v) for k, v in _PARTS.findall(m["ranks"])})
                text = text[m.end():]
                continue
            m = _BARE_CLOCK.match(text)
            if m and line.ts is None:
                ts = self._clock_ts(m["t"])
                line.ts, line.dated = (None if ts is None else ts + _fraction(m["frac"])), False
                text = text[m.end():]
                continue
            m = _LEVEL_FILE.match(text)
            if m:
                line.level = line.level or m["level"]
                text = text[m.end():]
                continue
            m = _UVICORN.match(text) or (_LEVEL_WORD.match(text) if line.ts is not None else None)
            if m:
                line.level = line.level or m["level"]
                text = text[m.end():]
                continue
            break
        text = _REPEATED.sub("", text).strip()
        stamped = line.ts is not None
        if line.ts is None:
            line.ts = self.last_ts
        else:
            self.last_ts = line.ts
        if parts or pid:
            line.rank = rank_key(parts) if parts else (("pid", int(pid)),)
            line.rank_label = rank_label(parts, pid)
        elif not stamped and _CONTINUATION.match(raw):
            line.rank, line.rank_label = self.last_rank
        if stamped or parts or pid:
            self.last_rank = (line.rank, line.rank_label)
        line.text = text
        return line


def _proc_parts(proc: str, rank: str | None) -> dict[str, int]:
    """Rank parts named by a vLLM process tag: EngineCore_DP0, Worker_TP1, Worker_DP0_TP1,
    Worker_PP1_TP0, VllmWorker rank=1."""
    found = {k: int(v) for k, v in _PARTS.findall(proc)}
    if rank is not None:
        found["rank"] = int(rank)
    return found


def split_lines(text: str) -> tuple[list[str], bool]:
    """Lines of a log, tqdm's carriage-return updates each their own line; and whether
    the text stops in the middle of a line (a truncated or still-growing file)."""
    ends_mid_line = bool(text) and not text.endswith(("\n", "\r"))
    pieces = re.split(r"\r\n|\n|\r", text)
    if pieces and pieces[-1] == "":
        pieces.pop()
    return pieces, ends_mid_line
