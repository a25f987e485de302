"""The alert notification outbox: what is owed to which receiver, and the sending of it.

The evaluator ``enqueue``s one row per alert transition and receiver in the transaction
that records the transition, so a notification exists exactly when its transition does,
and survives restarts. The notifier service (``replayscope.collector.services.loops.Notifier``, through
``replayscope.collector.alerting.receiver_lanes``) sends each row until its receiver answers 2xx or it
expires (``Delivery.expire_s``), with exponential backoff; a firing alert is re-sent every
``repeat_s`` while it fires (every minute to an Alertmanager, which forgets an alert it is
not reminded of). Rows are unique by (fingerprint, status, url): enqueuing a transition
twice changes nothing, and a receiver can deduplicate on fingerprint and status. A
resolved notification is never sent before its firing one.

A row's ``state``: ``pending`` (owed), ``unanswered`` (sent once, no answer in time: the
receiver may have it; tried once more, waiting twice as long), ``sent`` (2xx),
``unconfirmed`` (no answer twice: not sent again, so a slow receiver gets at most one
duplicate), ``expired`` (not delivered in time). ``last_error`` says what went wrong in
words any reader may see (``replayscope.collector.alerting.webhook_client``): never a URL, its credentials or
what the receiver answered.

Receivers: the rule's ``webhook_url`` or the default webhook get Alertmanager webhook
(version 4) JSON, one alert per POST; an Alertmanager gets the alert on ``/api/v2/alerts``.
Only addresses the ``TargetPolicy`` allows are posted to; redirects are never followed.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from sqlalchemy import exc as sa_exc

from replayscope.collector.alert_rule import AlertRule
from replayscope.collector.alerting import webhook_client, webhook_urls
from replayscope.collector.alerting.kinds import kind_of
from replayscope.collector.models import outbox as outbox_rows
from replayscope.collector.models.outbox import (DELIVERED, EXPIRED, PENDING, SENT, STATES, UNANSWERED,
                                                 UNCONFIRMED)
from replayscope.collector.store import Store
from replayscope.collector.alerting.webhook_urls import TargetPolicy
from replayscope.contract.errors import ReplayscopeError

log = logging.getLogger("replayscope.notifications")

ALERTMANAGER_RESEND_S = 60.0     # as Prometheus does: an Alertmanager drops alerts not re-sent
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 300.0


@dataclass(frozen=True)
class Delivery:
    """Where notifications go and how hard they are tried (from ``Settings``)."""

    default_webhook: str | None = None
    alertmanager_url: str | None = None
    external_url: str = ""
    expire_s: float = 12 * 3600.0
    repeat_s: float = 4 * 3600.0
    timeout_s: float = 30.0
    policy: TargetPolicy = TargetPolicy()      # non-public receivers the operator allows

    @classmethod
    def from_settings(cls, settings: Any) -> "Delivery":
        """From ``Settings``; a receiver URL that is not one replayscope posts to (or names a
        non-public address not in REPLAYSCOPE_WEBHOOK_ALLOW) is a ReplayscopeError naming its variable."""
        policy = TargetPolicy.from_setting(getattr(settings, "webhook_allow", None))
        for variable, url in (("REPLAYSCOPE_ALERT_WEBHOOK", settings.alert_webhook),
                              ("REPLAYSCOPE_ALERTMANAGER_URL", settings.alertmanager_url)):
            if url:
                try:
                    webhook_urls.checked(url, policy)
                except webhook_urls.BadURL as error:
                    raise ReplayscopeError(f"{variable} ({webhook_urls.redact(url)}): {error}") from None
        return cls(default_webhook=settings.alert_webhook or None,
                   alertmanager_url=(settings.alertmanager_url or "").rstrip("/") or None,
                   external_url=external_url(settings), expire_s=settings.notify_expire_s,
                   repeat_s=settings.notify_repeat_s, timeout_s=settings.webhook_timeout_s, policy=policy)

    def targets(self, rule: AlertRule) -> list[tuple[str, str]]:
        """(receiver, url) pairs a rule's notifications go to."""
        out = []
        webhook = rule.webhook_url or self.default_webhook
        if webhook:
            out.append(("webhook", webhook))
        if self.alertmanager_url:
            out.append(("alertmanager", self.alertmanager_url + "/api/v2/alerts"))
        return out

    def repeat_for(self, receiver: str) -> float:
        return ALERTMANAGER_RESEND_S if receiver == "alertmanager" else self.repeat_s

    def timeout_for(self, row: dict) -> float:
        """How long an attempt waits for its answer: twice as long after one went unanswered."""
        return self.timeout_s * (2 if row["state"] == UNANSWERED else 1)

    def post(self, url: str, body: Any, timeout_s: float) -> None:
        webhook_client.post_json(url, body, timeout_s=timeout_s, policy=self.policy)


def external_url(settings: Any) -> str:
    """The dashboard's address as users reach it: REPLAYSCOPE_EXTERNAL_URL, else the bind address."""
    if getattr(settings, "external_url", None):
        return settings.external_url.rstrip("/")
    host = settings.host
    if host in ("0.0.0.0", "::", ""):
        host = socket.getfqdn()
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.port}"


# -- the alert, as receivers see it ------------------------------------------------------------

def rfc3339(ts: float | None) -> str:
    if ts is None:
        return "0001-01-01T00:00:00Z"
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _parse_rfc3339(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def fingerprint(rule_name: str, run_id: str, alert_id: int) -> str:
    return hashlib.sha256(f"{rule_name}|{run_id}|{alert_id}".encode()).hexdigest()[:16]


def alert_body(status: str, alert: dict, rule: AlertRule, external: str) -> dict:
    """One alert in Alertmanager's form (the v4 webhook's ``alerts[]`` item). Times are the
    run's own clock (where on the run's timeline it fired and resolved)."""
    labels, annotations = kind_of(rule).labels(alert, rule, status)
    return {"status": status, "labels": labels, "annotations": annotations,
            "startsAt": rfc3339(alert["started_at"]),
            "endsAt": rfc3339(alert.get("ended_at") if status == "resolved" else None),
            "generatorURL": f"{external}/run/{alert['run_id']}" if external else "",
            "fingerprint": fingerprint(rule.name, alert["run_id"], alert["id"])}


def webhook_payload(alert: dict, external: str) -> dict:
    """The Alertmanager webhook (version 4) body for one alert."""
    labels = alert["labels"]
    group = {"alertname": labels["alertname"], "rule": labels["rule"]}
    return {"version": "4", "groupKey": f'{{}}:{{rule="{labels["rule"]}"}}', "truncatedAlerts": 0,
            "status": alert["status"], "receiver": "replayscope", "groupLabels": group,
            "commonLabels": labels, "commonAnnotations": alert["annotations"], "externalURL": external,
            "alerts": [alert]}


def alertmanager_payload(alert: dict, now: float) -> list[dict]:
    """The body of Alertmanager's ``POST /api/v2/alerts``: its clock decides what is firing,
    so a firing alert ends a few resends from now and a resolved one no later than now."""
    starts = _parse_rfc3339(alert["startsAt"])
    if alert["status"] == "firing":
        ends = now + 4 * ALERTMANAGER_RESEND_S
    else:
        ends = min(_parse_rfc3339(alert["endsAt"]), now)
    return [{"labels": alert["labels"], "annotations": alert["annotations"],
             "startsAt": rfc3339(min(starts, ends)), "endsAt": rfc3339(ends),
             "generatorURL": alert["generatorURL"]}]


# -- the outbox ------------------------------------------------------------------------------------

def enqueue(conn, status: str, alert: dict, rule: AlertRule, delivery: Delivery | None, now: float) -> int:
    """Owe one notification per receiver for an alert transition; returns how many rows were new."""
    if delivery is None:
        return 0
    body = alert_body(status, alert, rule, delivery.external_url)
    new = 0
    for receiver, url in delivery.targets(rule):
        new += outbox_rows.owe(conn, {
            "alert_id": alert["id"], "fingerprint": body["fingerprint"], "status": status, "receiver": receiver,
            "url": url, "alert": body, "state": PENDING, "created_at": now, "expires_at": now + delivery.expire_s,
            "next_attempt_at": now, "attempts": 0})
    return new


def pending_or_none(store: Store) -> int | None:
    """Notifications not yet delivered, for the pending gauge at scrape time; None while the
    store does not answer."""
    try:
        with store.read() as conn:
            return outbox_rows.owed_count(conn)
    except sa_exc.OperationalError:
        return None


@dataclass
class SendResult:
    sent: int = 0
    failed: int = 0
    expired: int = 0
    unconfirmed: int = 0

    unanswered: int = 0          # of ``failed``: sent, no answer in time (a slow receiver)

    def add(self, outcome: str) -> None:
        if outcome == "unanswered":
            self.unanswered += 1
            outcome = "failed"
        if outcome != "skipped":
            setattr(self, outcome, getattr(self, outcome) + 1)

    def merge(self, other: "SendResult") -> None:
        for outcome in ("sent", "failed", "expired", "unconfirmed", "unanswered"):
            setattr(self, outcome, getattr(self, outcome) + getattr(other, outcome))


Post = Callable[[str, Any, float], None]


def send_receiver(store: Store, delivery: Delivery, rows: list[dict], now: float, *,
                  clock: Callable[[], float] = time.time, post: Post | None = None) -> SendResult:
    """One receiver's due rows, in order, one at a time; stops at its first failure (the
    rest wait for the backoff, keeping the order)."""
    result = SendResult()
    for row in rows:
        outcome = send_one(store, delivery, row, now, clock=clock, post=post)
        result.add(outcome)
        if outcome in ("failed", "unanswered", "expired"):
            break
    return result


def by_receiver(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in rows:
        out.setdefault(row["url"], []).append(row)
    return out


def send_one(store: Store, delivery: Delivery, row: dict, now: float, *,
             clock: Callable[[], float] = time.time, post: Post | None = None) -> str:
    """Claim one row and post it: ``sent``; ``failed`` (not delivered, retried after a
    backoff); ``unanswered`` (sent, no answer in time: retried once, waiting twice as long);
    ``unconfirmed`` (no answer twice: given up); ``expired``; ``skipped`` (another notifier has it)."""
    timeout_s = delivery.timeout_for(row)
    with store.write() as conn:          # claim it: another notifier (or a retry) sees it leased
        claimed = outbox_rows.claim(conn, row, now + timeout_s + 30.0)
    if not claimed:
        return "skipped"       # another notifier took it
    alert = row["alert"]
    body = (alertmanager_payload(alert, clock()) if row["receiver"] == "alertmanager"
            else webhook_payload(alert, delivery.external_url))
    error, unanswered = None, False
    try:
        (post or delivery.post)(row["url"], body, timeout_s)
    except webhook_client.DeliveryFailed as failed:
        error, unanswered = str(failed), failed.unanswered
    except Exception as exc:    # any failure of the receiver is retried, never raised
        log.exception("alert notification %s to %s: unexpected error", row["fingerprint"], _shown(row["url"]))
        error = f"internal error ({type(exc).__name__}); see the collector's log"
    done = clock()
    attempts = row["attempts"] + 1
    shown = _shown(row["url"])
    with store.write() as conn:
        if error is None:
            outbox_rows.update(conn, row["id"], state=SENT, sent_at=done, last_error=None,
                               next_attempt_at=done + delivery.repeat_for(row["receiver"]))
            return "sent"
        if row["state"] in DELIVERED:        # a repeat that failed: the next repeat will remind it
            outbox_rows.update(conn, row["id"], last_error=error,
                               next_attempt_at=done + delivery.repeat_for(row["receiver"]))
            log.warning("alert notification %s (%s, repeat) to %s failed: %s", row["fingerprint"], row["status"],
                        shown, error)
            return "failed"
        if unanswered and row["state"] == UNANSWERED:
            error = (f"{error}; no answer twice (within {delivery.timeout_s:g}s, then {timeout_s:g}s): not sent "
                     f"again, so it may have arrived at most twice")
            outbox_rows.update(conn, row["id"], state=UNCONFIRMED, sent_at=done, last_error=error,
                               next_attempt_at=done + delivery.repeat_for(row["receiver"]))
            log.warning("alert notification %s (%s) to %s unconfirmed: %s", row["fingerprint"], row["status"],
                        shown, error)
            return "unconfirmed"
        if done >= row["expires_at"]:
            outbox_rows.update(conn, row["id"], state=EXPIRED, last_error=error)
            log.error("alert notification %s (%s) to %s expired after %d attempts: %s", row["fingerprint"],
                      row["status"], shown, attempts, error)
            return "expired"
        backoff = min(BACKOFF_FIRST_S * 2 ** (attempts - 1), BACKOFF_MAX_S)
        retry_at = min(done + backoff, row["expires_at"])      # one last attempt when it expires
        outbox_rows.update(conn, row["id"], next_attempt_at=retry_at, last_error=error,
                           state=UNANSWERED if unanswered else row["state"])
    if attempts == 1 or attempts % 10 == 0:
        log.warning("alert notification %s (%s) to %s failed (attempt %d, next in %.0fs): %s",
                    row["fingerprint"], row["status"], shown, attempts, backoff, error)
    return "unanswered" if unanswered else "failed"


def _shown(url: str) -> str:
    return webhook_urls.redact(url) or ""


def outbox(store: Store, states: Iterable[str] = STATES) -> list[dict]:
    """Outbox rows (newest first) for the API and tests."""
    with store.read() as conn:
        return outbox_rows.rows(conn, states)
