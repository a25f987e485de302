"""What routes are given, as FastAPI dependencies: the app's store, metrics and
alert delivery (set on ``app.state`` once, by ``replayscope.collector.api.app.create_api``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from replayscope.collector.api.metrics import Metrics
from replayscope.collector.alerting.notifications import Delivery
from replayscope.collector.store import Store


def get_store(request: Request) -> Store:
    return request.app.state.store


def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


def get_delivery(request: Request) -> Delivery:
    return request.app.state.delivery


StoreDep = Annotated[Store, Depends(get_store)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
DeliveryDep = Annotated[Delivery, Depends(get_delivery)]
