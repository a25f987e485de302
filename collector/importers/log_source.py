"""A log file as the importers read it, with a bounded working set whatever its size.

``open_log_file(path)`` refuses what is not a log before anything is parsed or written: a
missing path, a directory, anything that is not a regular file (``/dev/zero``, a FIFO, a
socket: they may never end), a file over ``MAX_FILE_BYTES``, binary content (a NUL byte
anywhere, or control characters in its head). That first pass reads the file once in
``READ_CHUNK`` pieces: its SHA-256 (the run ids), its head (which engine, which year) and
its size. ``LogFile.lines()`` then reads it again, a chunk at a time, as the lines the parser
takes (tqdm's carriage-return redraws each their own line), never more than the size the
first pass saw (a log still growing is read as it was). A line longer than
``MAX_LINE_CHARS`` is cut into pieces of that length.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
from dataclasses import dataclass
from typing import Iterator

from replayscope.contract.errors import ReplayscopeError
from replayscope.contract.events_file import regular_file

READ_CHUNK = 1 << 20
MAX_FILE_BYTES = 2 * 2**30
MAX_LINE_CHARS = 1 << 20
HEAD_CHARS = 4_000_000          # what tells the engine and the year apart (years.infer_year reads as much)
_BREAK = re.compile(r"\r\n|\n|\r")


def looks_binary(data: bytes) -> bool:
    """A NUL byte, or more than 5 % control characters (besides tabs, newlines, escapes) in
    the first 64 KiB."""
    if b"\x00" in data:
        return True
    head = data[:65536]
    if not head:
        return False
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 13, 27, 12, 8))
    return controls > len(head) * 0.05


def check_log_path(path: str, max_bytes: int | None = MAX_FILE_BYTES) -> os.stat_result:
    """The path's stat when it names a regular file a log importer reads (``max_bytes`` None:
    any size, a followed log grows); else the one-line error that says why not."""
    info = regular_file(path, "a log file", "a log file is read to its end, and this may have none (a stream: "
                                            "`replayscope follow ENGINE -` reads standard input)")
    if max_bytes is not None and info.st_size > max_bytes:
        raise ReplayscopeError(f"{path}: {info.st_size} bytes is more than a log importer reads (2 GiB)")
    return info


@dataclass
class LogFile:
    """A checked log file: where it is, its date, content hash, size and head."""
    path: str
    mtime: float
    digest: str
    size: int
    head: str
    ends_mid_line: bool = False      # known once ``lines()`` has been read to its end

    def lines(self) -> Iterator[str]:
        """The file's lines, read again a chunk at a time (its first ``size`` bytes): what
        ``lines.split_lines`` gives of the whole text, with ``ends_mid_line`` set at the end."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""                  # the text after the last line break
        left = self.size
        try:
            with open(self.path, "rb") as handle:
                while left > 0:
                    chunk = handle.read(min(READ_CHUNK, left))
                    if not chunk:
                        break
                    left -= len(chunk)
                    text = pending + decoder.decode(chunk, final=left <= 0)
                    hold_cr = text.endswith("\r") and left > 0    # maybe the first half of "\r\n"
                    pieces = _BREAK.split(text[:-1] if hold_cr else text)
                    pending = pieces.pop()
                    for piece in pieces:
                        yield from _bounded(piece)
                    while len(pending) > MAX_LINE_CHARS:
                        yield pending[:MAX_LINE_CHARS]
                        pending = pending[MAX_LINE_CHARS:]
                    if hold_cr:
                        pending += "\r"
        except OSError as error:
            raise ReplayscopeError(f"{self.path}: cannot read: {error.strerror or error}") from None
        pending += decoder.decode(b"", final=True)
        self.ends_mid_line = pending != ""
        if pending:
            yield from _bounded(pending)


def _bounded(piece: str) -> Iterator[str]:
    if len(piece) <= MAX_LINE_CHARS:
        yield piece
        return
    for start in range(0, len(piece), MAX_LINE_CHARS):
        yield piece[start:start + MAX_LINE_CHARS]


def refuse_binary(path: str, chunk: bytes, *, first: bool) -> None:
    """ReplayscopeError when ``chunk`` (the file's first one, or a later one) is binary."""
    if (first and looks_binary(chunk)) or b"\x00" in chunk:
        raise ReplayscopeError(f"{path} is a binary file, not a server log")


def open_log_file(path: str) -> LogFile:
    """Check ``path`` and read it once (hash, head, binary content); ReplayscopeError for
    anything that is not a text log."""
    info = check_log_path(path)
    digest = hashlib.sha256()
    head = bytearray()
    size = 0
    try:
        with open(path, "rb") as handle:
            while size < info.st_size:
                chunk = handle.read(min(READ_CHUNK, info.st_size - size))
                if not chunk:
                    break
                refuse_binary(path, chunk, first=size == 0)
                digest.update(chunk)
                if len(head) < HEAD_CHARS:
                    head += chunk[:HEAD_CHARS - len(head)]
                size += len(chunk)
    except OSError as error:
        raise ReplayscopeError(f"{path}: cannot read: {error.strerror or error}") from None
    return LogFile(path, info.st_mtime, digest.hexdigest(), size, head.decode("utf-8", errors="replace"))
