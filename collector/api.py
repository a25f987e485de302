"""The collector's HTTP API: ``create_api(store, settings) -> FastAPI``.

Validation at the edge, persistence behind ``collector.ingest`` / ``collector.alerts``,
reads through ``collector.queries``. The event route parses its body itself
(``json.loads`` + ``runner.wire.validate_event`` inside ``ingest_events``); the models in
``collector.schemas`` document it in OpenAPI (/docs). Bodies above
``settings.max_body_bytes`` are refused with 413 before parsing, from Content-Length and
while reading. With a token set, writes need ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import hmac
import json
from contextlib import asynccontextmanager
from itertools import accumulate
from typing import Annotated, Any, Literal, Optional

import sqlalchemy as sa
from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import exc as sa_exc
from starlette.concurrency import run_in_threadpool

from collector import alerts, fleet, leader, queries, regressions, schemas
from collector.ingest import InvalidBatch, InvalidRun, UnknownRun, ingest_events, ingest_run
from collector.metrics import Metrics
from collector.services import Evaluator, Retention
from collector.settings import Settings
from collector.store import Store, StoreUnavailable
from collector.tables import alert_events, runs
from runner.wire import STEP_STAGES

StageName = Literal[STEP_STAGES]  # type: ignore[valid-type]

try:  # optional: a faster parser for the hot path, same results for valid JSON
    import orjson as _orjson

    def _loads(body: bytes) -> Any:
        try:
            return _orjson.loads(body)
        except _orjson.JSONDecodeError as error:
            if "recursion" in str(error).lower():
                raise RecursionError from None
            raise ValueError(str(error)) from None
except ImportError:  # pragma: no cover
    def _loads(body: bytes) -> Any:
        return json.loads(body)


MAX_JSON_DEPTH = 32
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
_BRACKET_STEP = [0] * 256
for _c in b"[{":
    _BRACKET_STEP[_c] = 1
for _c in b"]}":
    _BRACKET_STEP[_c] = -1


def json_depth_bound(body: bytes) -> int:
    """Nesting depth of a JSON text, counted in C before parsing (brackets inside strings
    count too, so it is approximate; a deep text is refused before any parser sees it)."""
    brackets = body.translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0)


class _BodyTooLarge(Exception):
    pass


class BodyLimit:
    """ASGI middleware: 413 for a body over ``limit`` bytes, declared or streamed."""

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.limit:
                    return await self._refuse(send)
        seen = 0
        started = False

        async def limited_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _BodyTooLarge
            return message

        async def tracking_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send):
        body = json.dumps({"detail": f"request body larger than {self.limit} bytes "
                                     f"(REPLAYSCOPE_MAX_BODY_BYTES); send smaller batches"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class ApiError(Exception):
    def __init__(self, status: int, detail: str, **extra: Any):
        self.status, self.detail, self.extra = status, detail, extra


async def _json_body(request: Request) -> Any:
    body = await request.body()
    if not body:
        raise ApiError(400, "empty body: expected JSON")
    if json_depth_bound(body) > MAX_JSON_DEPTH:
        raise ApiError(400, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return _loads(body)
    except RecursionError:
        raise ApiError(400, "JSON nested too deeply") from None
    except ValueError as error:
        raise ApiError(400, f"invalid JSON: {error}") from None


# Rule ids are database integers: anything outside SQLite's and PostgreSQL's BIGINT is a 422.
RuleId = Annotated[int, Path(ge=1, le=2**63 - 1, description="the rule's id")]


def create_api(store: Store, settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    evaluator = Evaluator(store, settings)
    services = [evaluator, Retention(store, settings)]

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        if settings.run_services:
            for service in services:
                service.start()
        try:
            yield
        finally:
            if settings.run_services:
                for service in services:
                    await service.stop()

    app = FastAPI(title="replayscope collector", version="1",
                  description="Ingest and query CUDA-graph capture, replay and fallback telemetry "
                              "(wire contract v1).", lifespan=lifespan)
    app.state.store = store
    app.state.settings = settings
    app.state.evaluator = evaluator
    app.state.services = services
    metrics = Metrics(store_gauges=lambda: _store_gauges(store))
    app.state.metrics = metrics
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)

    def require_writer(request: Request) -> None:
        if not settings.token:
            return
        header = request.headers.get("authorization", "")
        scheme, _, supplied = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(supplied.strip().encode(), settings.token.encode()):
            raise ApiError(401, "writes need 'Authorization: Bearer <token>' (REPLAYSCOPE_TOKEN)",
                           headers={"WWW-Authenticate": "Bearer"})

    writer = [Depends(require_writer)]

    @app.exception_handler(ApiError)
    async def _api_error(_request, error: ApiError):
        headers = error.extra.pop("headers", None)
        return JSONResponse({"detail": error.detail, **error.extra}, status_code=error.status, headers=headers)

    @app.exception_handler(StoreUnavailable)
    async def _unavailable(_request, error: StoreUnavailable):
        return JSONResponse({"detail": str(error)}, status_code=503, headers={"Retry-After": "1"})

    @app.exception_handler(sa_exc.OperationalError)
    async def _db_error(_request, error: sa_exc.OperationalError):
        text = str(error.orig).strip().splitlines()[0] if error.orig else "database error"
        return JSONResponse({"detail": f"the store is unavailable ({text}); retry later"}, status_code=503,
                            headers={"Retry-After": "1"})

    @app.exception_handler(alerts.InvalidRule)
    async def _bad_rule(_request, error: alerts.InvalidRule):
        status = 409 if isinstance(error, alerts.DuplicateRule) else 422
        return JSONResponse({"detail": str(error), "field": error.field}, status_code=status)

    @app.exception_handler(alerts.UnknownRule)
    async def _no_rule(_request, error):
        return JSONResponse({"detail": str(error)}, status_code=404)

    errors = {400: {"model": schemas.Problem}, 404: {"model": schemas.Problem},
              413: {"model": schemas.Problem}, 422: {"model": schemas.Problem},
              503: {"model": schemas.Problem}}
    write_errors = {**errors, 401: {"model": schemas.Problem}}

    # -- writes ---------------------------------------------------------------------------
    @app.post("/v1/runs", dependencies=writer, response_model=schemas.RunCreated, tags=["ingest"],
              openapi_extra=schemas.request_body(schemas.RunRecord), responses=write_errors)
    async def post_run(request: Request):
        """Register a run (wire contract v1). Posting the same run again changes nothing."""
        record = await _json_body(request)
        try:
            result = await run_in_threadpool(ingest_run, store, record)
        except InvalidRun as error:
            raise ApiError(422, str(error), field=error.field) from None
        return JSONResponse(result, status_code=201 if result["created"] else 200)

    @app.post("/v1/runs/{run_id}/events", dependencies=writer, response_model=schemas.IngestResponse,
              tags=["ingest"], openapi_extra=schemas.request_body(schemas.EventBatch), responses=write_errors)
    async def post_events(run_id: str, request: Request):
        """Store a batch of events, all or nothing. A repeated ``seq`` is a retry: ignored."""
        payload = await _json_body(request)
        events = payload.get("events") if isinstance(payload, dict) else None
        try:
            result = await run_in_threadpool(ingest_events, store, run_id, events)
        except InvalidBatch as error:
            metrics.observe_rejected(len(events) if isinstance(events, list) else 0)
            raise ApiError(422, str(error), index=error.index, field=error.field) from None
        except UnknownRun as error:
            metrics.observe_rejected(len(events))
            raise ApiError(404, str(error)) from None
        except StoreUnavailable:
            metrics.observe_rejected(len(events), unavailable=True)
            raise
        metrics.observe_ingest(result)
        return JSONResponse({"accepted": result.accepted, "duplicates": result.duplicates})

    # -- reads ----------------------------------------------------------------------------
    def run_or_404(run_id: str) -> None:
        if not queries.run_exists(store, run_id):
            raise ApiError(404, f"unknown run {run_id!r}")

    @app.get("/v1/runs", response_model=list[schemas.RunListItem], tags=["runs"])
    def get_runs(limit: int = Query(500, ge=1, le=5000)):
        """Runs, newest first, with their step totals."""
        return JSONResponse(queries.list_runs(store, limit=limit))

    @app.get("/v1/runs/{run_id}", response_model=schemas.RunSummary, tags=["runs"], responses=errors)
    def get_run(run_id: str):
        """One run with its summary: steps, modes, reasons, eager_ratio, padded_tokens."""
        summary = queries.run_summary(store, run_id)
        if summary is None:
            raise ApiError(404, f"unknown run {run_id!r}")
        return JSONResponse(summary)

    def _run_read(path: str, fn, model, doc: str, with_stage: bool = False, with_bucket: bool = False):
        if with_bucket:
            def handler(run_id: str, bucket_s: Optional[int] = Query(None, ge=1, le=86400),
                        stage: Optional[StageName] = None):
                run_or_404(run_id)
                return JSONResponse(fn(store, run_id, bucket_s=bucket_s, stage=stage))
        elif with_stage:
            def handler(run_id: str, stage: Optional[StageName] = None):
                run_or_404(run_id)
                return JSONResponse(fn(store, run_id, stage=stage))
        else:
            def handler(run_id: str):
                run_or_404(run_id)
                return JSONResponse(fn(store, run_id))
        handler.__doc__ = doc
        handler.__name__ = "get_" + path.replace("-", "_")
        app.get(f"/v1/runs/{{run_id}}/{path}", response_model=list[model], tags=["runs"],
                responses=errors)(handler)

    _run_read("timeline", queries.mode_timeline, schemas.TimelinePoint,
              "Steps per mode per time bucket (bucket chosen from the run's length unless given).",
              with_bucket=True)
    _run_read("reasons", queries.reason_breakdown, schemas.ReasonRow, "Eager steps per reason.")
    _run_read("batch-sizes", queries.batch_histogram, schemas.BatchRow,
              "Steps per raw batch size and mode.", with_stage=True)
    _run_read("step-times", queries.step_time_by_mode, schemas.StepTimeRow, "Step time per stage and mode.")
    _run_read("captures", queries.captures, schemas.CaptureRow, "Graph captures, in order.")
    _run_read("phases", queries.phases, schemas.PhaseRow, "Startup phases, in order.")
    _run_read("degrades", queries.degrades, schemas.DegradeRow, "Steps down the degradation ladder.")
    _run_read("parity", queries.parity, schemas.ParityRow, "Graph-vs-eager parity checks.")
    _run_read("warnings", queries.warnings, schemas.WarningRow,
              "What the reader should know that is not a step or a phase (rejected events, missing hooks).")

    @app.get("/v1/runs/{run_id}/regressions", tags=["runs"], responses=errors)
    def get_regressions(run_id: str):
        """The run against the earlier finished runs of its model and configuration: the
        baseline (named), figures beyond its spread (regressions) or better than it."""
        result = regressions.run_regressions(store, run_id)
        if result is None:
            raise ApiError(404, f"unknown run {run_id!r}")
        return JSONResponse(result)

    @app.get("/v1/fleet", tags=["fleet"])
    def get_fleet(model: Optional[str] = None, backend: Optional[str] = None, device: Optional[str] = None,
                  version: Optional[str] = None, source: Optional[str] = None,
                  since: Optional[float] = Query(None, ge=0, description="runs started at or after (unix s)"),
                  until: Optional[float] = Query(None, ge=0, description="runs started before (unix s)"),
                  limit: int = Query(fleet.RUNS_LISTED, ge=1, le=50000, description="runs listed, newest first")):
        """Every run the filters select, by group (model, backend, device, version) and over
        time, and the newest ``limit`` one by one with regressions against each run's
        baseline; from rollups kept for good."""
        data = fleet.fleet(store, fleet.Filters.of(model=model, backend=backend, device=device, version=version,
                                                   source=source, since=since, until=until), runs_listed=limit)
        for run in data["runs"]:
            run.pop("step_sums", None)
        return JSONResponse({"groups": data["groups"], "runs": data["runs"], "runs_total": data["runs_total"],
                             "series": data["series"]})

    # -- alerts ---------------------------------------------------------------------------
    @app.get("/v1/alert-rules", response_model=list[schemas.AlertRule], tags=["alerts"])
    def get_rules():
        return JSONResponse(queries.alert_rules(store))

    @app.post("/v1/alert-rules", dependencies=writer, status_code=201, response_model=schemas.AlertRule,
              tags=["alerts"], openapi_extra=schemas.request_body(schemas.AlertRuleIn), responses=write_errors)
    async def post_rule(request: Request):
        """Create a rule; 422 says which field is wrong, 409 if the name is taken."""
        data = await _json_body(request)
        return JSONResponse(await run_in_threadpool(alerts.create_rule, store, data), status_code=201)

    @app.get("/v1/alert-rules/{rule_id}", response_model=schemas.AlertRule, tags=["alerts"], responses=errors)
    def get_rule(rule_id: RuleId):
        return JSONResponse(alerts.get_rule(store, rule_id))

    @app.put("/v1/alert-rules/{rule_id}", dependencies=writer, response_model=schemas.AlertRule,
             tags=["alerts"], openapi_extra=schemas.request_body(schemas.AlertRuleIn), responses=write_errors)
    async def put_rule(rule_id: RuleId, request: Request):
        """Replace a rule (omitted optional fields return to their defaults)."""
        data = await _json_body(request)
        return JSONResponse(await run_in_threadpool(alerts.update_rule, store, rule_id, data, partial=False))

    @app.patch("/v1/alert-rules/{rule_id}", dependencies=writer, response_model=schemas.AlertRule,
               tags=["alerts"], openapi_extra=schemas.request_body(schemas.AlertRulePatch),
               responses=write_errors)
    async def patch_rule(rule_id: RuleId, request: Request):
        """Change the given fields of a rule."""
        data = await _json_body(request)
        return JSONResponse(await run_in_threadpool(alerts.update_rule, store, rule_id, data, partial=True))

    @app.delete("/v1/alert-rules/{rule_id}", dependencies=writer, status_code=204, tags=["alerts"],
                responses=write_errors)
    def delete_rule(rule_id: RuleId):
        """Delete a rule; its firing alerts resolve, the history stays."""
        alerts.delete_rule(store, rule_id)
        return Response(status_code=204)

    @app.get("/v1/alerts", response_model=list[schemas.AlertEvent], tags=["alerts"])
    def get_alerts(run_id: Optional[str] = None, limit: int = Query(200, ge=1, le=5000)):
        """Alert history, newest first."""
        return JSONResponse(queries.alert_events(store, run_id=run_id, limit=limit))

    # -- operations ---------------------------------------------------------------------------
    @app.get("/healthz", tags=["ops"])
    def healthz():
        """200 when the store answers."""
        with store.read() as conn:
            conn.execute(sa.text("SELECT 1"))
        return {"status": "ok", "db": store.dialect}

    @app.get("/v1/services", tags=["ops"])
    def get_services():
        """The periodic jobs: each one's last period across every collector on this store
        (slot, ran_at, holder, runs) and what this collector did (ran, skipped)."""
        shared = leader.ticks(store)
        return [{"name": s.name, "interval_s": s.interval_s, "ran_here": s.ticks, "skipped_here": s.skipped,
                 **{k: v for k, v in shared.get(s.name, {}).items() if k != "name"}} for s in services]

    @app.get("/metrics", tags=["ops"], response_class=Response)
    def get_metrics():
        """Prometheus exposition."""
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    default_openapi = app.openapi

    def openapi():
        if app.openapi_schema is None:
            schema = default_openapi()
            app.openapi_schema = schemas.add_component_schemas(
                schema, [schemas.RunRecord, schemas.EventBatch, schemas.AlertRuleIn, schemas.AlertRulePatch])
        return app.openapi_schema

    app.openapi = openapi
    return app


def _store_gauges(store: Store) -> tuple[dict[str, int], dict[str, int]]:
    try:
        with store.read() as conn:
            firing = dict(conn.execute(sa.select(alert_events.c.rule_name, sa.func.count())
                                       .where(alert_events.c.status == "firing")
                                       .group_by(alert_events.c.rule_name)).all())
            by_status = dict(conn.execute(sa.select(runs.c.status, sa.func.count()).group_by(runs.c.status)).all())
    except sa_exc.OperationalError:
        return {}, {}
    return firing, by_status
