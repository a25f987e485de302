"""Where ``replayscope import`` writes: a store (``DbSink``, through ``replayscope.collector.ingest``) or
a running collector (``CollectorSink``, its HTTP API), chosen by ``open_sink`` from the
flags; ``StreamedWriter``, a streamed import's writes into one of them (each run's record
before its events, again at its end).
"""

from __future__ import annotations

import argparse
import os
import urllib.parse
from typing import Any, Callable

from replayscope.contract.errors import ReplayscopeError

BATCH = 500


class DbSink:
    """Writes through replayscope.collector.ingest into the store at ``url``."""

    def __init__(self, url: str, migrate: bool = False):
        from replayscope.collector import ingest
        from replayscope.collector.store import Store

        self._ingest = ingest
        self.store = Store.open(url, upgrade=migrate)
        self.url = self.store.safe_url

    def write_run(self, record: dict[str, Any]) -> None:
        self._ingest.ingest_run(self.store, record)

    def write_events(self, run_id: str, events: list[dict[str, Any]]) -> tuple[int, int]:
        accepted = duplicates = 0
        for i in range(0, len(events), BATCH):
            result = self._ingest.ingest_events(self.store, run_id, events[i:i + BATCH])
            accepted += result.accepted
            duplicates += result.duplicates
        return accepted, duplicates

    def close(self) -> None:
        self.store.dispose()

    def describe(self) -> str:
        return f"store {self.url}"


class CollectorSink:
    """Posts to a collector's HTTP API (``POST /v1/runs``, ``/v1/runs/{id}/events``)."""

    def __init__(self, url: str, token: str | None = None):
        self.url = url.rstrip("/")
        self.token = token

    def _post(self, path: str, payload: Any) -> Any:
        from replayscope.contract.http import HttpError, post_json

        try:
            return post_json(self.url + path, payload, token=self.token, timeout=30.0)
        except HttpError as error:
            raise ReplayscopeError(f"collector {self.url}: {error}") from None

    def write_run(self, record: dict[str, Any]) -> None:
        self._post("/v1/runs", record)

    def write_events(self, run_id: str, events: list[dict[str, Any]]) -> tuple[int, int]:
        accepted = duplicates = 0
        for i in range(0, len(events), BATCH):
            answer = self._post(f"/v1/runs/{urllib.parse.quote(run_id, safe='')}/events",
                                {"events": events[i:i + BATCH]})
            if isinstance(answer, dict):
                accepted += int(answer.get("accepted", 0) or 0)
                duplicates += int(answer.get("duplicates", 0) or 0)
        return accepted, duplicates

    def close(self) -> None:
        pass

    def describe(self) -> str:
        return f"collector {self.url}"


def open_sink(args: argparse.Namespace):
    from replayscope.collector.settings import resolve

    settings = resolve(args)
    if getattr(args, "collector", None):
        return CollectorSink(args.collector, settings.token)
    return DbSink(settings.db, migrate=getattr(args, "migrate", False))



class StreamedWriter:
    """A streamed import's writes: each run's record before its first events, the record
    again at its end (complete by then: the store takes the newer description), its events
    in batches as the parser drains them. The sink is opened at the first write, so an
    import that writes nothing creates no store."""

    def __init__(self, open_target: Callable[[], Any], log_file: str):
        self.open_target = open_target
        self.log_file = os.path.basename(log_file) or log_file
        self.sink = None
        self.target: str | None = None
        self.written: dict[str, dict[str, Any]] = {}

    def drain(self, run, name: str, events: list[dict[str, Any]], final: bool) -> None:
        if self.sink is None:
            self.sink = self.open_target()
            self.target = self.sink.describe()
        tally = self.written.get(run.run_id)
        if tally is None or final:
            self.sink.write_run(run.record(name=name, log_file=self.log_file))
            tally = self.written.setdefault(run.run_id, {"run_id": run.run_id, "accepted": 0, "duplicates": 0})
        if events:
            accepted, duplicates = self.sink.write_events(run.run_id, events)
            tally["accepted"] += accepted
            tally["duplicates"] += duplicates

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()
