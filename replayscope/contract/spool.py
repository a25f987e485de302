"""The HTTP sink's spool: the events it could not send yet, oldest first, in an events file.

The file is an events file (``replayscope.contract.events_file``: the run record, then one event per
line), so a spool left behind re-sends with ``replayscope import events``. New events are
appended at the end; the oldest are taken from the front one batch at a time and, once
delivered, skipped by offset: while the collector is down nothing is re-read or rewritten,
so each event costs one write and one read however long the outage lasts. The file goes
when everything in it was delivered; ``compact`` leaves only the undelivered events in it.
"""

from __future__ import annotations

import os
from typing import Any

from replayscope.contract.events_file import append_events, read_events_from, write_events_file


class Spool:
    def __init__(self, path: str, run: dict[str, Any]):
        self.path = path
        self.run = run
        self.count = 0            # events not delivered yet
        self._start = 0           # where they start in the file (0: just after the run record)
        self._front_end = 0       # where the batch ``front`` returned ends

    def append(self, events: list[dict[str, Any]]) -> None:
        append_events(self.path, self.run, events)
        self.count += len(events)

    def front(self, limit: int) -> list[dict[str, Any]]:
        """The oldest ``limit`` undelivered events (none when the file is gone)."""
        if not os.path.exists(self.path):
            self._front_end = self._start
            return []
        events, self._front_end = read_events_from(self.path, self._start, limit)
        return events

    def delivered(self, count: int) -> None:
        """The ``count`` events ``front`` returned were delivered."""
        self._start = self._front_end
        self.count -= count
        if self.count <= 0:
            self.clear()

    def replace_front(self, undelivered: list[dict[str, Any]]) -> None:
        """Part of what ``front`` returned was delivered: ``undelivered`` takes its place."""
        rest, _ = read_events_from(self.path, self._front_end)
        write_events_file(self.path, self.run, undelivered + rest)
        self._start = self._front_end = 0
        self.count = len(undelivered) + len(rest)

    def set_run(self, run: dict[str, Any]) -> None:
        """A newer record of the run: the file's first line becomes it."""
        self.run = run
        if os.path.exists(self.path):
            rest, _ = read_events_from(self.path, self._start)
            write_events_file(self.path, run, rest)
            self._start = self._front_end = 0

    def compact(self) -> None:
        """Leave only the undelivered events in the file (it is left for the user)."""
        if self._start and os.path.exists(self.path):
            self._front_end = self._start
            self.replace_front([])

    def clear(self) -> None:
        if os.path.exists(self.path):
            os.remove(self.path)
        self.count = 0
        self._start = self._front_end = 0
