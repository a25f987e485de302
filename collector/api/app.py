"""The app factory: ``create_api(store, settings) -> FastAPI``.

Builds the app's state (store, settings, metrics, alert delivery, background services),
adds the guards (``replayscope.collector.api.guards``), the one error handler
(``replayscope.collector.api.errors``), mounts the routers of ``ROUTERS`` and completes the OpenAPI
document with the bodies the write routes parse themselves.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from replayscope.collector import schemas
from replayscope.collector.alerting import notifications
from replayscope.collector.models import queries
from replayscope.collector.api import alerts, fleet, ingest, ops, runs
from replayscope.collector.api.errors import HANDLED, problem
from replayscope.collector.api.guards import BodyLimit, HostGuard, WriteGuard
from replayscope.collector.api.hosts import served_hosts
from replayscope.collector.api.metrics import Metrics
from replayscope.collector.services.loops import Evaluator, Notifier, Retention
from replayscope.collector.settings import Settings
from replayscope.collector.store import Store
from replayscope.collector.api.throttle import WrongTokens

# One router per resource, mounted in this order.
ROUTERS = (ingest.router, runs.router, fleet.router, alerts.router, ops.router)

# Bodies the write routes parse themselves, documented as components for their requestBody.
PARSED_BODIES = (schemas.RunRecord, schemas.EventBatch, schemas.AlertRuleIn, schemas.AlertRulePatch)


def create_api(store: Store, settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    metrics = Metrics(store_gauges=lambda: queries.gauge_counts(store),
                      outbox_pending=lambda: notifications.pending_or_none(store))
    evaluator = Evaluator(store, settings)
    notifier = Notifier(store, settings, metrics)
    services = (evaluator, notifier, Retention(store, settings))

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
                              "(wire contract v1). Every error is `{\"detail\": ..., \"field\"?: ..., "
                              "\"index\"?: ...}`; writes need the bearer token when one is set.",
                  lifespan=lifespan)
    state = app.state
    state.store, state.settings, state.metrics = store, settings, metrics
    state.evaluator, state.notifier, state.services = evaluator, notifier, services
    state.delivery = notifications.Delivery.from_settings(settings)
    state.wrong_tokens = WrongTokens()
    app.add_middleware(WriteGuard)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(HostGuard, hosts=served_hosts(settings))      # outermost: checked first
    for error in HANDLED:
        app.add_exception_handler(error, problem)
    for router in ROUTERS:
        app.include_router(router)

    default_openapi = app.openapi

    def openapi():
        if app.openapi_schema is None:
            app.openapi_schema = schemas.add_component_schemas(default_openapi(), list(PARSED_BODIES))
        return app.openapi_schema

    app.openapi = openapi
    return app
