"""The fleet read: every run the filters select, by group and over time (``replayscope.collector.analysis.fleet``)."""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Query

from replayscope.collector import schemas
from replayscope.collector.analysis import fleet
from replayscope.collector.api.deps import StoreDep
from replayscope.collector.api.errors import READ, responses

router = APIRouter(prefix="/v1/fleet", tags=["fleet"], responses=responses(*READ))


@router.get("", response_model=schemas.Fleet)
def get_fleet(store: StoreDep, model: Optional[str] = None, backend: Optional[str] = None,
              device: Optional[str] = None, version: Optional[str] = None, source: Optional[str] = None,
              since: Optional[float] = Query(None, ge=0, description="runs started at or after (unix s)"),
              until: Optional[float] = Query(None, ge=0, description="runs started before (unix s)"),
              limit: int = Query(fleet.RUNS_LISTED, ge=1, le=50000, description="runs listed, newest first")) -> dict:
    """Every run the filters select, by group (model, backend, device, version) and over
    time, and the newest ``limit`` one by one with regressions against each run's
    baseline; from rollups kept for good."""
    data = fleet.fleet(store, fleet.Filters.of(model=model, backend=backend, device=device, version=version,
                                               source=source, since=since, until=until), runs_listed=limit)
    for run in data["runs"]:
        run.pop("step_sums", None)
    return {"groups": data["groups"], "runs": data["runs"], "runs_total": data["runs_total"],
            "series": data["series"]}
