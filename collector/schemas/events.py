"""The write side's models: the run record and every event kind, generated from
``replayscope.contract.wire``'s field tables so OpenAPI shows the real event schema (the hot ingest path
validates raw JSON with ``replayscope.contract.wire.validate_event``; these document it), the rows of
each event kind as a run's reads return them, and the writes' answers."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from replayscope.collector.schemas.base import Out, wire_field
from replayscope.contract import wire


def _title(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("_"))


def _event_model(kind: str) -> type[BaseModel]:
    fields = dict(wire_field(n, s) for n, s in wire.COMMON_EVENT_FIELDS.items() if n != "kind")
    fields["kind"] = (Literal[kind], Field(...))  # type: ignore[valid-type]
    fields.update(wire_field(n, s) for n, s in wire.EVENT_FIELDS[kind].items())
    return create_model(f"{_title(kind)}Event", __config__=ConfigDict(extra="allow", populate_by_name=True),
                        **fields)


EVENT_MODELS: dict[str, type[BaseModel]] = {kind: _event_model(kind) for kind in wire.EVENT_KINDS}
Event = Annotated[Union[tuple(EVENT_MODELS.values())], Field(discriminator="kind")]  # type: ignore[misc]


class EventBatch(BaseModel):
    """``POST /v1/runs/{run_id}/events``: all-or-nothing; a repeated seq is ignored."""

    events: list[Event]  # type: ignore[valid-type]


RunRecord = create_model("RunRecord", __config__=ConfigDict(extra="allow"),
                         **dict(wire_field(n, s) for n, s in wire.RUN_FIELDS.items()))


def _row_model(name: str, kind: str) -> type[BaseModel]:
    fields = {"seq": (int, ...), "ts": (float, ...)}
    fields.update(wire_field(n, s, all_optional=True) for n, s in wire.EVENT_FIELDS[kind].items())
    return create_model(name, __config__=ConfigDict(populate_by_name=True, extra="forbid"), **fields)


CaptureRow = _row_model("CaptureRow", "capture")
PhaseRow = _row_model("PhaseRow", "phase")
DegradeRow = _row_model("DegradeRow", "degrade")
ParityRow = _row_model("ParityRow", "parity")
WarningRow = _row_model("WarningRow", "warning")
RecordingRow = _row_model("RecordingRow", "recording")


class IngestResponse(Out):
    accepted: int
    duplicates: int


class RunCreated(Out):
    run_id: str
    created: bool
