"""Reads of runs: the list, one run's summary, its charts' rows, its post-mortem
(diagnosis), capture-size advice and regressions. Every route returns its declared
``replayscope.collector.schemas`` model, validated by FastAPI; 404 for an unknown run."""

from __future__ import annotations

from typing import Callable, Literal, Optional

from fastapi import APIRouter, Query

from replayscope.collector import schemas
from replayscope.collector.analysis import diagnosis, regressions
from replayscope.collector.models import queries
from replayscope.collector.analysis.advisor.stored import advice_for_run
from replayscope.collector.api.deps import StoreDep
from replayscope.collector.api.errors import READ, responses
from replayscope.collector.store import Store
from replayscope.contract.errors import NotFound
from replayscope.contract.wire import RULE_STAGES, RUN_STATUSES, SOURCES

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=responses(*READ))

# A stage, or decode+mixed (the decode stages, as the run page shows them; %2B in a URL).
StageName = Literal[RULE_STAGES]  # type: ignore[valid-type]
SourceName = Literal[SOURCES]  # type: ignore[valid-type]
RunStatus = Literal[RUN_STATUSES]  # type: ignore[valid-type]


def known(store: Store, run_id: str) -> str:
    """The run id, once the store knows it (else 404); after the parameters were validated."""
    if not queries.run_exists(store, run_id):
        raise NotFound(f"unknown run {run_id!r}")
    return run_id


@router.get("", response_model=list[schemas.RunListItem])
def get_runs(store: StoreDep, limit: int = Query(500, ge=1, le=5000),
             source: Optional[SourceName] = Query(None, description="only runs from this source"),
             status: Optional[RunStatus] = Query(None, description="only runs in this status"),
             model: Optional[str] = Query(None, max_length=512, description="only runs of this model")) -> list[dict]:
    """Runs, newest first, with their step totals (``replayscope runs list``)."""
    return queries.list_runs(store, limit=limit, source=source, status=status, model=model)


@router.get("/{run_id}", response_model=schemas.RunSummary)
def get_run(run_id: str, store: StoreDep) -> dict:
    """One run with its summary: steps, modes, reasons, eager_ratio, padded_tokens, and how
    much step detail is stored (``step_detail``)."""
    summary = queries.run_summary(store, run_id)
    if summary is None:
        raise NotFound(f"unknown run {run_id!r}")
    return summary


@router.get("/{run_id}/timeline", response_model=list[schemas.TimelinePoint])
def get_timeline(run_id: str, store: StoreDep, bucket_s: Optional[int] = Query(None, ge=1, le=86400),
                 stage: Optional[StageName] = None) -> list[dict]:
    """Steps per mode per time bucket (bucket chosen from the run's length unless given)."""
    return queries.mode_timeline(store, known(store, run_id), bucket_s=bucket_s, stage=stage)


@router.get("/{run_id}/batch-sizes", response_model=list[schemas.BatchRow])
def get_batch_sizes(run_id: str, store: StoreDep, stage: Optional[StageName] = None) -> list[dict]:
    """Steps per raw batch size and mode."""
    return queries.batch_histogram(store, known(store, run_id), stage=stage)


# The run's rows that take no parameter: path -> (query, row model, what they are).
RUN_ROWS = {
    "reasons": (queries.reason_breakdown, schemas.ReasonRow, "Eager steps per reason."),
    "step-times": (queries.step_time_by_mode, schemas.StepTimeRow, "Step time per stage and mode."),
    "captures": (queries.captures, schemas.CaptureRow, "Graph captures, in order."),
    "phases": (queries.phases, schemas.PhaseRow, "Startup phases, in order."),
    "degrades": (queries.degrades, schemas.DegradeRow, "Steps down the degradation ladder."),
    "parity": (queries.parity, schemas.ParityRow, "Graph-vs-eager parity checks."),
    "warnings": (queries.warnings, schemas.WarningRow,
                 "What the reader should know that is not a step or a phase (rejected events, missing hooks)."),
    "recordings": (queries.recordings, schemas.RecordingRow,
                   "CUDA graphs PyTorch Inductor recorded of compiled functions, with their causes, in order."),
}


def _rows_route(path: str, read: Callable[[Store, str], list[dict]], doc: str) -> Callable[..., list[dict]]:
    def handler(run_id: str, store: StoreDep) -> list[dict]:
        return read(store, known(store, run_id))
    handler.__name__, handler.__doc__ = "get_" + path.replace("-", "_"), doc
    return handler


for _path, (_read, _model, _doc) in RUN_ROWS.items():
    router.add_api_route(f"/{{run_id}}/{_path}", _rows_route(_path, _read, _doc), methods=["GET"],
                         response_model=list[_model])


@router.get("/{run_id}/diagnosis", response_model=schemas.Diagnosis)
def get_diagnosis(run_id: str, store: StoreDep) -> dict:
    """The startup post-mortem: the run's outcome first, then findings ranked by the seconds
    over what was expected, each with its evidence and provenance and what to do per engine."""
    found = diagnosis.diagnose_run(store, run_id)
    if found is None:
        raise NotFound(f"unknown run {run_id!r}")
    return found.as_dict()


@router.get("/{run_id}/advice", response_model=schemas.Advice)
def get_advice(run_id: str, store: StoreDep,
               budget: Optional[int] = Query(None, ge=1, le=4096, description="graphs to capture at most "
                                             "(default: the run's current count; with graphs off, the "
                                             "engine's default count)"),
               eager_weight: Optional[float] = Query(None, ge=0, le=1000, description="score rows computed, "
                                                     "an eager row counted 1 + W times (default: the run's "
                                                     "measured step times on a GPU, else W = 3)")) -> dict:
    """Capture sizes for a budget of K graphs, chosen exactly on the first 70% of the run's
    decode steps and scored on the rest, priced in capture time and pool memory, checked
    against each engine's rules, with the flags to copy."""
    found = advice_for_run(store, run_id, budget, eager_weight)
    if found is None:
        raise NotFound(f"unknown run {run_id!r}")
    return found


@router.get("/{run_id}/regressions", response_model=schemas.RunRegressions)
def get_regressions(run_id: str, store: StoreDep) -> dict:
    """The run against the earlier finished runs of its model and configuration: the
    baseline (named), figures beyond its spread (regressions) or better than it."""
    result = regressions.run_regressions(store, run_id)
    if result is None:
        raise NotFound(f"unknown run {run_id!r}")
    return result
