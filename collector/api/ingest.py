"""Writes of runs and their events: ``POST /v1/runs``, ``POST /v1/runs/{run_id}/events``,
``DELETE /v1/runs/{run_id}``. The event route parses its body itself (``json.loads`` and
``replayscope.contract.wire.validate_event`` inside ``replayscope.collector.ingest.ingest_events``: the hot path);
``replayscope.collector.schemas`` documents the bodies in OpenAPI."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from starlette.concurrency import run_in_threadpool

from replayscope.collector import schemas
from replayscope.collector.api.deps import DeliveryDep, MetricsDep, StoreDep
from replayscope.collector.api.errors import WRITE, responses
from replayscope.collector.api.guards import require_writer
from replayscope.collector.api.body import json_body
from replayscope.collector.services.deletion import delete_run
from replayscope.collector.ingest import InvalidBatch, UnknownRun, ingest_events, ingest_run
from replayscope.collector.store import StoreUnavailable
from replayscope.contract.errors import NotFound

router = APIRouter(prefix="/v1/runs", tags=["ingest"], dependencies=[Depends(require_writer)],
                   responses=responses(*WRITE))


@router.post("", response_model=schemas.RunCreated, status_code=201,
             responses={200: {"model": schemas.RunCreated, "description": "the run was already registered"}},
             openapi_extra=schemas.request_body(schemas.RunRecord))
async def post_run(request: Request, response: Response, store: StoreDep) -> dict:
    """Register a run (wire contract v1): 201 when new. Posting the same run again changes nothing (200)."""
    record = await json_body(request)
    result = await run_in_threadpool(ingest_run, store, record)
    response.status_code = 201 if result["created"] else 200
    return result


@router.post("/{run_id}/events", response_model=schemas.IngestResponse,
             openapi_extra=schemas.request_body(schemas.EventBatch))
async def post_events(run_id: str, request: Request, store: StoreDep, metrics: MetricsDep) -> dict:
    """Store a batch of events, all or nothing. A repeated ``seq`` is a retry: ignored."""
    payload = await json_body(request)
    events = payload.get("events") if isinstance(payload, dict) else None
    try:
        result = await run_in_threadpool(ingest_events, store, run_id, events)
    except InvalidBatch:
        metrics.observe_rejected(len(events) if isinstance(events, list) else 0)
        raise
    except UnknownRun:
        metrics.observe_rejected(len(events))
        raise
    except StoreUnavailable:
        metrics.observe_rejected(len(events), unavailable=True)
        raise
    metrics.observe_ingest(result)
    return {"accepted": result.accepted, "duplicates": result.duplicates}


@router.delete("/{run_id}", status_code=204, response_class=Response)
def remove_run(run_id: str, store: StoreDep, delivery: DeliveryDep) -> Response:
    """Delete a run and everything recorded for it (events, rollups, alerts; a firing
    alert is resolved and its receivers told). 404 for an unknown run."""
    if not delete_run(store, run_id, delivery=delivery):
        raise NotFound(f"unknown run {run_id!r}")
    return Response(status_code=204)
