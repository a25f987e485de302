"""Alert rules (read by anyone, written with the token), the notification outbox and the
alert history. Webhook URLs, often secrets themselves, reach only writers; readers see
their scheme and host (``replayscope.collector.alerting.webhook_urls.redact``)."""

from __future__ import annotations

from typing import Annotated, Optional

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from replayscope.collector import schemas
from replayscope.collector.alert_rule import AlertRule
from replayscope.collector.alerting import alerts, notifications, webhook_urls
from replayscope.collector.models import queries
from replayscope.collector.api.deps import DeliveryDep, StoreDep
from replayscope.collector.api.errors import READ, WRITE, responses
from replayscope.collector.api.guards import is_writer, require_writer
from replayscope.collector.api.body import json_body

router = APIRouter(tags=["alerts"])
writes = {"dependencies": [Depends(require_writer)], "responses": responses(*WRITE, 409)}
reads_for_writers = {"responses": responses(*READ, 429)}        # a wrong token counts here too

# Rule ids are database integers: anything outside SQLite's and PostgreSQL's BIGINT is a 422.
RuleId = Annotated[int, Path(ge=1, le=2**63 - 1, description="the rule's id")]

_OUTBOX_FIELDS = ("id", "fingerprint", "status", "receiver", "state", "created_at", "expires_at",
                  "next_attempt_at", "attempts", "sent_at", "last_error")


@router.get("/v1/alert-rules", response_model=list[schemas.AlertRule], **reads_for_writers)
def get_rules(request: Request, store: StoreDep) -> list[AlertRule]:
    """Every rule; webhook URLs (often secrets themselves) only to writers, else scheme and host."""
    writer = is_writer(request)
    return [alerts.public_rule(r, writer) for r in queries.alert_rules(store)]


@router.post("/v1/alert-rules", status_code=201, response_model=schemas.AlertRule,
             openapi_extra=schemas.request_body(schemas.AlertRuleIn), **writes)
async def post_rule(request: Request, store: StoreDep, delivery: DeliveryDep) -> AlertRule:
    """Create a rule; 422 says which field is wrong, 409 if the name is taken."""
    data = await json_body(request)
    return await run_in_threadpool(lambda: alerts.create_rule(store, data, policy=delivery.policy))


@router.get("/v1/alert-rules/{rule_id}", response_model=schemas.AlertRule, **reads_for_writers)
def get_rule(rule_id: RuleId, request: Request, store: StoreDep) -> AlertRule:
    """One rule (its webhook URL redacted for readers)."""
    return alerts.public_rule(alerts.get_rule(store, rule_id), is_writer(request))


@router.put("/v1/alert-rules/{rule_id}", response_model=schemas.AlertRule,
            openapi_extra=schemas.request_body(schemas.AlertRuleIn), **writes)
async def put_rule(rule_id: RuleId, request: Request, store: StoreDep, delivery: DeliveryDep) -> AlertRule:
    """Replace a rule (omitted optional fields return to their defaults)."""
    data = await json_body(request)
    return await run_in_threadpool(alerts.update_rule, store, rule_id, data, partial=False, delivery=delivery)


@router.patch("/v1/alert-rules/{rule_id}", response_model=schemas.AlertRule,
              openapi_extra=schemas.request_body(schemas.AlertRulePatch), **writes)
async def patch_rule(rule_id: RuleId, request: Request, store: StoreDep, delivery: DeliveryDep) -> AlertRule:
    """Change the given fields of a rule."""
    data = await json_body(request)
    return await run_in_threadpool(alerts.update_rule, store, rule_id, data, partial=True, delivery=delivery)


@router.delete("/v1/alert-rules/{rule_id}", status_code=204, response_class=Response, **writes)
def delete_rule(rule_id: RuleId, store: StoreDep, delivery: DeliveryDep) -> Response:
    """Delete a rule; its firing alerts resolve, the history stays."""
    alerts.delete_rule(store, rule_id, delivery=delivery)
    return Response(status_code=204)


@router.get("/v1/alert-notifications", response_model=list[schemas.Notification], **reads_for_writers)
def get_notifications(request: Request, store: StoreDep) -> list[dict]:
    """The notification outbox, newest first: each transition per receiver, its state
    (pending, unanswered, sent, unconfirmed, expired), attempts and last error (never the
    URL nor what the receiver answered). URLs redacted unless a writer asks."""
    writer = is_writer(request)
    return [{k: row[k] for k in _OUTBOX_FIELDS}
            | {"url": row["url"] if writer else webhook_urls.redact(row["url"]), "labels": row["alert"]["labels"]}
            for row in notifications.outbox(store)]


@router.get("/v1/alerts", response_model=list[schemas.AlertEvent], responses=responses(*READ))
def get_alerts(store: StoreDep, run_id: Optional[str] = None, limit: int = Query(200, ge=1, le=5000)) -> list[dict]:
    """Alert history, newest first."""
    return queries.alert_events(store, run_id=run_id, limit=limit)
