"""Operations: health, the periodic jobs, Prometheus exposition."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from replayscope.collector import schemas
from replayscope.collector.models import health
from replayscope.collector.services import leader
from replayscope.collector.api.deps import MetricsDep, StoreDep
from replayscope.collector.api.errors import responses
from replayscope.collector.api.guards import is_writer
from replayscope.collector.store import StoreUnavailable
from replayscope.contract import formats

router = APIRouter(tags=["ops"], responses=responses(400, 503))


@router.get("/healthz", response_model=schemas.Health)
def healthz(store: StoreDep) -> dict:
    """200 when the store answers and its last write committed; 503 (degraded) when it does
    not answer, or while writes fail (a full disk, a lock): the detail says since when and why."""
    with store.read() as conn:
        health.ping(conn)
    if store.write_failure is not None:
        since, reason = store.write_failure
        raise StoreUnavailable(f"degraded: the store answers reads but refused the last write "
                               f"({formats.when(since)}): {reason}")
    return {"status": "ok", "db": store.dialect}


@router.get("/v1/services", response_model=list[schemas.ServiceState], response_model_exclude_unset=True)
def get_services(request: Request, store: StoreDep) -> list[dict]:
    """The periodic jobs: each one's last period across every collector on this store
    (slot, ran_at, holder, runs) and what this collector did (ran, skipped). ``holder``
    (the host and pid of the collector that ran it) only to writers: to anyone else it
    maps the collectors' hosts."""
    shared = leader.ticks(store)
    hidden = {"name"} if is_writer(request) else {"name", "holder"}
    return [{"name": s.name, "interval_s": s.interval_s, "ran_here": s.ticks, "skipped_here": s.skipped,
             **{k: v for k, v in shared.get(s.name, {}).items() if k not in hidden}}
            for s in request.app.state.services]


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}},
                             "description": "Prometheus text exposition"}})
def get_metrics(metrics: MetricsDep) -> Response:
    """Prometheus exposition."""
    return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
