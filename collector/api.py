"""The collector's HTTP API: ``create_api(store, settings) -> FastAPI``.

Validation at the edge, persistence behind ``collector.ingest`` / ``collector.alerts``,
reads through ``collector.queries``. The event route parses its body itself
(``json.loads`` + ``runner.wire.validate_event`` inside ``ingest_events``); the models in
``collector.schemas`` document it in OpenAPI (/docs). Bodies above
``settings.max_body_bytes`` are refused with 413 before parsing, from Content-Length and
while reading, and checked for depth and size of structure before any parser runs. With a
token set, every write needs it (``collector.auth``); every write is JSON from this server's
own pages or a non-browser client (``WriteGuard``), and every request names a host this
collector serves (``collector.hosts``: no DNS rebinding). Errors are
``runner.errors.ReplayscopeError`` subclasses carrying their HTTP status; one handler turns
any of them (and a database that stopped answering) into ``{"detail": ..., <body fields>}``.
"""

from __future__ import annotations

import json
import re
from contextlib import asynccontextmanager
from itertools import accumulate
from typing import Annotated, Any, Literal, Optional

import sqlalchemy as sa
from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import exc as sa_exc
from starlette.concurrency import run_in_threadpool

from collector import auth, schemas
from collector.alerting import alerts, notifications, webhook_urls
from collector.analysis import diagnosis, fleet, regressions
from collector.services import leader
from collector.models import queries
from collector.analysis.advisor.stored import advice_for_run
from collector.deletion import delete_run
from collector.hosts import is_served, served_hosts
from collector.ingest import InvalidBatch, UnknownRun, ingest_events, ingest_run
from collector.metrics import Metrics
from collector.services.loops import Evaluator, Notifier, Retention
from collector.settings import Settings
from collector.store import Store, StoreUnavailable
from collector.throttle import WrongTokens
from collector.tables import alert_events, runs
from runner.errors import Forbidden, NotFound, ReplayscopeError, TooLarge, Unauthorized, UnsupportedMediaType
from runner.wire import RULE_STAGES

# A stage, or decode+mixed (the decode stages, as the run page shows them; %2B in a URL).
StageName = Literal[RULE_STAGES]  # type: ignore[valid-type]

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
    def _not_json(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    def _loads(body: bytes) -> Any:
        return json.loads(body, parse_constant=_not_json)     # as orjson: no NaN, no Infinity


MAX_JSON_DEPTH = 32
# Objects and arrays in one body: a runner's batch of 5000 events has ~5000; parsing millions
# (an 8 MB body of nested brackets) would hold the interpreter for seconds.
MAX_JSON_CONTAINERS = 200_000
OFF_LOOP_BYTES = 64 * 1024          # larger bodies are checked and parsed in a worker thread
_NOT_QUOTES_OR_BRACKETS = bytes(c for c in range(256) if c not in b'"[]{}')
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
_AS_SQUARE = bytes.maketrans(b"{}", b"[]")
_STEP = [0] * 256
_STEP[ord("[")], _STEP[ord("]")] = 1, -1
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def _structure(body: bytes) -> bytes:
    """The JSON text's brackets outside strings, as ``[`` and ``]``, at C speed."""
    if b"\\" in body:                         # escapes: take the strings out properly
        return _STRING.sub(b"", body).translate(_AS_SQUARE, _NOT_BRACKETS)
    marks = body.translate(None, _NOT_QUOTES_OR_BRACKETS)
    # Without escapes quotes alternate open/close: when every string's quotes are adjacent
    # here, no string holds a bracket; else keep every other piece between quotes.
    brackets = marks.replace(b'""', b"")
    if b'"' in brackets:
        brackets = b"".join(marks.split(b'"')[0::2])
    return brackets.translate(_AS_SQUARE)


def _bracket_depth(brackets: bytes, limit: int) -> int:
    """Deepest nesting of a text of ``[`` and ``]``; exact up to ``limit`` + 1 for balanced text."""
    if b"[" * (limit + 1) in brackets:
        return limit + 1
    removed = 0
    while brackets and removed < 3:            # the common shallow case, at C speed
        shorter = brackets.replace(b"[]", b"")
        if shorter == brackets:
            break
        brackets, removed = shorter, removed + 1
    deepest = 0
    for level in accumulate(map(_STEP.__getitem__, brackets)):
        if level > deepest:
            deepest = level
            if removed + deepest > limit:
                break
    return removed + deepest


def json_depth(body: bytes, limit: int = MAX_JSON_DEPTH) -> int:
    """Nesting depth of a JSON text's structure, counted before any parser runs; brackets
    inside strings never count. Exact up to ``limit`` + 1."""
    return _bracket_depth(_structure(body), limit)


def check_structure(body: bytes) -> None:
    """Refuse, before parsing, a body nested too deep or holding too many objects and arrays."""
    structure = _structure(body)
    too_deep = ReplayscopeError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    if b"[" * (MAX_JSON_DEPTH + 1) in structure:          # the plainest deep text, at C speed
        raise too_deep
    if structure.count(b"[") > MAX_JSON_CONTAINERS:
        raise ReplayscopeError(f"JSON with more than {MAX_JSON_CONTAINERS} objects and arrays; send smaller batches")
    if _bracket_depth(structure, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise too_deep


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
        await _send_error(send, TooLarge(f"request body larger than {self.limit} bytes "
                                         f"(REPLAYSCOPE_MAX_BODY_BYTES); send smaller batches"))


async def _send_error(send, error: ReplayscopeError) -> None:
    """An error answered from ASGI middleware, before FastAPI's handler can see it: same body."""
    body = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _decode(body: bytes) -> Any:
    check_structure(body)
    try:
        return _loads(body)
    except RecursionError:
        raise ReplayscopeError("JSON nested too deeply") from None
    except ValueError as error:
        raise ReplayscopeError(f"invalid JSON: {error}") from None


async def _problem(_request: Request, error: Exception) -> JSONResponse:
    """The one error handler: any ReplayscopeError answers with its status and body."""
    if isinstance(error, sa_exc.OperationalError):
        text = str(error.orig).strip().splitlines()[0] if error.orig else "database error"
        error = StoreUnavailable(f"the store is unavailable ({text}); retry later")
    return JSONResponse(error.body(), status_code=error.status, headers=dict(error.headers) or None)


async def _json_body(request: Request) -> Any:
    body = await request.body()
    if not body:
        raise ReplayscopeError("empty body: expected JSON")
    if len(body) > OFF_LOOP_BYTES:     # never hold up other requests while a big body is checked
        return await run_in_threadpool(_decode, body)
    return _decode(body)


_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class WriteGuard:
    """ASGI middleware for every write, API and dashboard alike: a browser may write only
    from this server's own pages (``Origin``), and only JSON (``Content-Type``), so no
    other web page can forge a write with a simple cross-origin form or text POST."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in _WRITE_METHODS:
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())}
        if not auth.origin_allowed(headers):
            return await _send_error(send, Forbidden(f"cross-origin write refused (Origin "
                                                     f"{headers.get('origin')!r} is not this server)"))
        if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:   # it has a body
            media = headers.get("content-type", "").split(";")[0].strip().lower()
            if media != "application/json" and not media.endswith("+json"):
                return await _send_error(send, UnsupportedMediaType(
                    f"writes take application/json, not {media or 'no content type'}"))
        return await self.app(scope, receive, send)


class HostGuard:
    """ASGI middleware for every request, API and dashboard alike: the ``Host`` it names is one
    this collector serves (``collector.hosts``), so a rebound DNS name reaches nothing."""

    def __init__(self, app, hosts: frozenset[str] | None):
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.hosts is None:
            return await self.app(scope, receive, send)
        host = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"), None)
        if not is_served(host, self.hosts):
            return await _send_error(send, ReplayscopeError(
                f"Host {host!r} is not a name this collector serves; if it is, add it to "
                f"REPLAYSCOPE_ALLOWED_HOSTS"))
        return await self.app(scope, receive, send)


# Rule ids are database integers: anything outside SQLite's and PostgreSQL's BIGINT is a 422.
RuleId = Annotated[int, Path(ge=1, le=2**63 - 1, description="the rule's id")]


def create_api(store: Store, settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    metrics = Metrics(store_gauges=lambda: _store_gauges(store), outbox_pending=lambda: _outbox_pending(store))
    evaluator = Evaluator(store, settings)
    notifier = Notifier(store, settings, metrics)
    services = (evaluator, notifier, Retention(store, settings))
    delivery = notifications.Delivery.from_settings(settings)

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
    app.state.notifier = notifier
    app.state.services = services
    app.state.metrics = metrics
    app.add_middleware(WriteGuard)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(HostGuard, hosts=served_hosts(settings))      # outermost: checked first

    wrong_tokens = WrongTokens()
    app.state.wrong_tokens = wrong_tokens

    def is_writer(request: Request) -> bool:
        client = request.client.host if request.client else None
        return auth.is_writer(request.headers, request.cookies, settings.token, client=client, limiter=wrong_tokens)

    def require_writer(request: Request) -> None:
        if not is_writer(request):
            raise Unauthorized("writes need 'Authorization: Bearer <token>' (REPLAYSCOPE_TOKEN)")

    writer = [Depends(require_writer)]

    app.add_exception_handler(ReplayscopeError, _problem)
    app.add_exception_handler(sa_exc.OperationalError, _problem)

    errors = {400: {"model": schemas.Problem}, 404: {"model": schemas.Problem},
              413: {"model": schemas.Problem}, 422: {"model": schemas.Problem},
              503: {"model": schemas.Problem}}
    write_errors = {**errors, 401: {"model": schemas.Problem}, 403: {"model": schemas.Problem},
                    415: {"model": schemas.Problem}}

    # -- writes ---------------------------------------------------------------------------
    @app.post("/v1/runs", dependencies=writer, response_model=schemas.RunCreated, tags=["ingest"],
              openapi_extra=schemas.request_body(schemas.RunRecord), responses=write_errors)
    async def post_run(request: Request):
        """Register a run (wire contract v1). Posting the same run again changes nothing."""
        record = await _json_body(request)
        result = await run_in_threadpool(ingest_run, store, record)
        return JSONResponse(result, status_code=201 if result["created"] else 200)

    @app.post("/v1/runs/{run_id}/events", dependencies=writer, response_model=schemas.IngestResponse,
              tags=["ingest"], openapi_extra=schemas.request_body(schemas.EventBatch), responses=write_errors)
    async def post_events(run_id: str, request: Request):
        """Store a batch of events, all or nothing. A repeated ``seq`` is a retry: ignored."""
        payload = await _json_body(request)
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
        return JSONResponse({"accepted": result.accepted, "duplicates": result.duplicates})

    @app.delete("/v1/runs/{run_id}", dependencies=writer, status_code=204, tags=["ingest"],
                responses=write_errors)
    def remove_run(run_id: str):
        """Delete a run and everything recorded for it (events, rollups, alerts; a firing
        alert is resolved and its receivers told). 404 for an unknown run."""
        if not delete_run(store, run_id, delivery=delivery):
            raise NotFound(f"unknown run {run_id!r}")
        return Response(status_code=204)

    # -- reads ----------------------------------------------------------------------------
    def run_or_404(run_id: str) -> None:
        if not queries.run_exists(store, run_id):
            raise NotFound(f"unknown run {run_id!r}")

    @app.get("/v1/runs", response_model=list[schemas.RunListItem], tags=["runs"])
    def get_runs(limit: int = Query(500, ge=1, le=5000)):
        """Runs, newest first, with their step totals."""
        return JSONResponse(queries.list_runs(store, limit=limit))

    @app.get("/v1/runs/{run_id}", response_model=schemas.RunSummary, tags=["runs"], responses=errors)
    def get_run(run_id: str):
        """One run with its summary: steps, modes, reasons, eager_ratio, padded_tokens."""
        summary = queries.run_summary(store, run_id)
        if summary is None:
            raise NotFound(f"unknown run {run_id!r}")
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
    _run_read("recordings", queries.recordings, schemas.RecordingRow,
              "CUDA graphs PyTorch Inductor recorded of compiled functions, with their causes, in order.")

    @app.get("/v1/runs/{run_id}/diagnosis", response_model=schemas.Diagnosis, tags=["runs"], responses=errors)
    def get_diagnosis(run_id: str):
        """The startup post-mortem: the run's outcome first, then findings ranked by the seconds
        over what was expected, each with its evidence and provenance and what to do per engine."""
        found = diagnosis.diagnose_run(store, run_id)
        if found is None:
            raise NotFound(f"unknown run {run_id!r}")
        return JSONResponse(found.as_dict())

    @app.get("/v1/runs/{run_id}/advice", response_model=schemas.Advice, tags=["runs"], responses=errors)
    def get_advice(run_id: str,
                   budget: Optional[int] = Query(None, ge=1, le=4096, description="graphs to capture at most "
                                                 "(default: the run's current count; with graphs off, the "
                                                 "engine's default count)"),
                   eager_weight: Optional[float] = Query(None, ge=0, le=1000, description="score rows computed, "
                                                         "an eager row counted 1 + W times (default: the run's "
                                                         "measured step times on a GPU, else W = 3)")):
        """Capture sizes for a budget of K graphs, chosen exactly on the first 70% of the run's
        decode steps and scored on the rest, priced in capture time and pool memory, checked
        against each engine's rules, with the flags to copy."""
        found = advice_for_run(store, run_id, budget, eager_weight)
        if found is None:
            raise NotFound(f"unknown run {run_id!r}")
        return JSONResponse(found)

    @app.get("/v1/runs/{run_id}/regressions", tags=["runs"], responses=errors)
    def get_regressions(run_id: str):
        """The run against the earlier finished runs of its model and configuration: the
        baseline (named), figures beyond its spread (regressions) or better than it."""
        result = regressions.run_regressions(store, run_id)
        if result is None:
            raise NotFound(f"unknown run {run_id!r}")
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
    def get_rules(request: Request):
        """Every rule; webhook URLs (often secrets themselves) only to writers, else scheme and host."""
        writer = is_writer(request)
        return JSONResponse([alerts.public_rule(r, writer) for r in queries.alert_rules(store)])

    @app.post("/v1/alert-rules", dependencies=writer, status_code=201, response_model=schemas.AlertRule,
              tags=["alerts"], openapi_extra=schemas.request_body(schemas.AlertRuleIn), responses=write_errors)
    async def post_rule(request: Request):
        """Create a rule; 422 says which field is wrong, 409 if the name is taken."""
        data = await _json_body(request)
        return JSONResponse(await run_in_threadpool(lambda: alerts.create_rule(store, data, policy=delivery.policy)),
                            status_code=201)

    @app.get("/v1/alert-rules/{rule_id}", response_model=schemas.AlertRule, tags=["alerts"], responses=errors)
    def get_rule(rule_id: RuleId, request: Request):
        return JSONResponse(alerts.public_rule(alerts.get_rule(store, rule_id), is_writer(request)))

    @app.put("/v1/alert-rules/{rule_id}", dependencies=writer, response_model=schemas.AlertRule,
             tags=["alerts"], openapi_extra=schemas.request_body(schemas.AlertRuleIn), responses=write_errors)
    async def put_rule(rule_id: RuleId, request: Request):
        """Replace a rule (omitted optional fields return to their defaults)."""
        data = await _json_body(request)
        return JSONResponse(await run_in_threadpool(alerts.update_rule, store, rule_id, data, partial=False,
                                                    delivery=delivery))

    @app.patch("/v1/alert-rules/{rule_id}", dependencies=writer, response_model=schemas.AlertRule,
               tags=["alerts"], openapi_extra=schemas.request_body(schemas.AlertRulePatch),
               responses=write_errors)
    async def patch_rule(rule_id: RuleId, request: Request):
        """Change the given fields of a rule."""
        data = await _json_body(request)
        return JSONResponse(await run_in_threadpool(alerts.update_rule, store, rule_id, data, partial=True,
                                                    delivery=delivery))

    @app.delete("/v1/alert-rules/{rule_id}", dependencies=writer, status_code=204, tags=["alerts"],
                responses=write_errors)
    def delete_rule(rule_id: RuleId):
        """Delete a rule; its firing alerts resolve, the history stays."""
        alerts.delete_rule(store, rule_id, delivery=delivery)
        return Response(status_code=204)

    @app.get("/v1/alert-notifications", tags=["alerts"])
    def get_notifications(request: Request):
        """The notification outbox, newest first: each transition per receiver, its state
        (pending, unanswered, sent, unconfirmed, expired), attempts and last error (never the
        URL nor what the receiver answered). URLs redacted unless a writer asks."""
        writer = is_writer(request)
        rows = []
        for row in notifications.outbox(store):
            rows.append({k: row[k] for k in ("id", "fingerprint", "status", "receiver", "state", "created_at",
                                             "expires_at", "next_attempt_at", "attempts", "sent_at", "last_error")}
                        | {"url": row["url"] if writer else webhook_urls.redact(row["url"]),
                           "labels": row["alert"]["labels"]})
        return JSONResponse(rows)

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


def _outbox_pending(store: Store) -> int | None:
    try:
        with store.read() as conn:
            return notifications.pending_count(conn)
    except sa_exc.OperationalError:
        return None


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
