"""The alert notification outbox: what is owed to which receiver, and the sending of it.

The evaluator ``enqueue``s one row per alert transition and receiver in the transaction
that records the transition, so a notification exists exactly when its transition does,
and survives restarts. The notifier service (``collector.services.Notifier``) calls
``send_due``: each row is posted until its receiver answers 2xx or it expires
(``Delivery.expire_s``), with exponential backoff; a firing alert is re-sent every
``repeat_s`` while it fires (every minute to an Alertmanager, which forgets an alert
it is not reminded of). Rows are unique by (fingerprint, status, url): enqueuing a
transition twice changes nothing, and a receiver can deduplicate on fingerprint and
status. A resolved notification is never sent before its firing one.

Receivers: the rule's ``webhook_url`` or the default webhook get Alertmanager webhook
(version 4) JSON, one alert per POST; an Alertmanager gets the alert on ``/api/v2/alerts``.
Every POST goes through ``runner.http`` (the standard library), never following a redirect.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable
from urllib.parse import urlsplit

import sqlalchemy as sa

from collector.store import Store
from collector.tables import alert_events as ae, alert_notifications as an
from runner.errors import ReplayscopeError
from runner.wire import stages_of

log = logging.getLogger("replayscope.notifications")

ALERTNAME = "ReplayscopeEagerRatioHigh"
ALERTMANAGER_RESEND_S = 60.0     # as Prometheus does: an Alertmanager drops alerts not re-sent
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 300.0
MAX_PARALLEL_RECEIVERS = 8
RECEIVERS = ("webhook", "alertmanager")


@dataclass(frozen=True)
class Delivery:
    """Where notifications go and how hard they are tried (from ``Settings``)."""

    default_webhook: str | None = None
    alertmanager_url: str | None = None
    external_url: str = ""
    expire_s: float = 12 * 3600.0
    repeat_s: float = 4 * 3600.0
    timeout_s: float = 30.0

    @classmethod
    def from_settings(cls, settings: Any) -> "Delivery":
        """From ``Settings``; a receiver URL that is not http(s) is a ReplayscopeError naming it."""
        for variable, url in (("REPLAYSCOPE_ALERT_WEBHOOK", settings.alert_webhook),
                              ("REPLAYSCOPE_ALERTMANAGER_URL", settings.alertmanager_url)):
            if url and not _is_http(url):
                raise ReplayscopeError(f"{variable}={url!r}: must be an http(s) URL")
        return cls(default_webhook=settings.alert_webhook or None,
                   alertmanager_url=(settings.alertmanager_url or "").rstrip("/") or None,
                   external_url=external_url(settings), expire_s=settings.notify_expire_s,
                   repeat_s=settings.notify_repeat_s, timeout_s=settings.webhook_timeout_s)

    def targets(self, rule: dict) -> list[tuple[str, str]]:
        """(receiver, url) pairs a rule's notifications go to."""
        out = []
        webhook = rule.get("webhook_url") or self.default_webhook
        if webhook:
            out.append(("webhook", webhook))
        if self.alertmanager_url:
            out.append(("alertmanager", self.alertmanager_url + "/api/v2/alerts"))
        return out

    def repeat_for(self, receiver: str) -> float:
        return ALERTMANAGER_RESEND_S if receiver == "alertmanager" else self.repeat_s


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


def alert_body(status: str, alert: dict, rule: dict, external: str) -> dict:
    """One alert in Alertmanager's form (the v4 webhook's ``alerts[]`` item). Times are the
    run's own clock (where on the run's timeline it fired and resolved)."""
    labels = {"alertname": ALERTNAME, "rule": rule["name"], "run_id": alert["run_id"],
              "run_name": alert["run_name"], "stage": rule["stage"], "severity": "warning"}
    verb = "is" if status == "firing" else "was"
    annotations = {
        "summary": f"eager ratio of run {alert['run_name']} over {rule['window_s']}s {verb} above "
                   f"{rule['threshold']:.0%}",
        "description": f"{' and '.join(stages_of(rule['stage']))} steps ran eager at {alert['value']:.1%} (peak {alert['peak']:.1%} of "
                       f"{alert['steps']} steps, threshold {rule['threshold']:.0%}); dominant reason: "
                       f"{alert.get('reason') or 'none'}",
        "peak": f"{alert['peak']:.4f}", "value": f"{alert['value']:.4f}",
        "reason": alert.get("reason") or "",
    }
    if rule.get("kind") == "regression":      # a run beyond its baseline (collector.regressions)
        from collector import regressions
        labels, annotations = regressions.webhook_labels(dict(alert, status=status), rule)
    return {"status": status, "labels": labels, "annotations": annotations,
            "startsAt": rfc3339(alert["started_at"]),
            "endsAt": rfc3339(alert.get("ended_at") if status == "resolved" else None),
            "generatorURL": f"{external}/run/{alert['run_id']}" if external else "",
            "fingerprint": fingerprint(rule["name"], alert["run_id"], alert["id"])}


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

def enqueue(conn, status: str, alert: dict, rule: dict, delivery: Delivery | None, now: float) -> int:
    """Owe one notification per receiver for an alert transition; returns how many rows were new."""
    if delivery is None:
        return 0
    body = alert_body(status, alert, rule, delivery.external_url)
    new = 0
    for receiver, url in delivery.targets(rule):
        exists = conn.execute(sa.select(an.c.id).where(an.c.fingerprint == body["fingerprint"],
                                                       an.c.status == status, an.c.url == url)).first()
        if exists is not None:
            continue
        conn.execute(an.insert().values(
            alert_id=alert["id"], fingerprint=body["fingerprint"], status=status, receiver=receiver, url=url,
            alert=body, state="pending", created_at=now, expires_at=now + delivery.expire_s,
            next_attempt_at=now, attempts=0))
        new += 1
    return new


def due(conn, now: float, limit: int = 200) -> list[dict]:
    """Rows to send now, oldest first: pending ones, and firing ones due for a repeat; a
    resolved row waits while its firing row is still pending."""
    still_firing = sa.exists().where(ae.c.id == an.c.alert_id, ae.c.status == "firing")
    rows = conn.execute(
        sa.select(an).where(an.c.next_attempt_at <= now, sa.or_(
            an.c.state == "pending",
            sa.and_(an.c.state == "sent", an.c.status == "firing", still_firing)))
        .order_by(an.c.id).limit(limit)).mappings().all()
    if not rows:
        return []
    waiting_firing = {(r.fingerprint, r.url) for r in conn.execute(
        sa.select(an.c.fingerprint, an.c.url).where(
            an.c.state == "pending", an.c.status == "firing",
            sa.tuple_(an.c.fingerprint, an.c.url).in_([(r["fingerprint"], r["url"]) for r in rows])))}
    return [dict(r) for r in rows
            if not (r["status"] == "resolved" and (r["fingerprint"], r["url"]) in waiting_firing)]


def pending_count(conn) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(an).where(an.c.state == "pending")).scalar())


def _is_http(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _post(url: str, body: Any, timeout_s: float) -> None:
    from runner.http import post_json

    if not _is_http(url):              # never a file:, ftp: or data: URL, whatever the store holds
        raise ValueError(f"not an http(s) URL: {url!r}")
    post_json(url, body, timeout=timeout_s, decode=False, follow_redirects=False)


@dataclass
class SendResult:
    sent: int = 0
    failed: int = 0
    expired: int = 0


def send_due(store: Store, delivery: Delivery, now: float | None = None, *,
             clock: Callable[[], float] = time.time, post: Callable[[str, Any, float], None] = _post,
             metrics: Any = None) -> SendResult:
    """Send what is due (receivers in parallel, each receiver's rows in order)."""
    now = clock() if now is None else now
    with store.read() as conn:
        rows = due(conn, now)
    by_url: dict[str, list[dict]] = {}
    for row in rows:
        by_url.setdefault(row["url"], []).append(row)
    result = SendResult()
    if not by_url:
        return result

    def one_receiver(url_rows: list[dict]) -> SendResult:
        part = SendResult()
        for row in url_rows:
            outcome = _send_one(store, delivery, row, now, clock, post)
            if outcome == "skipped":
                continue
            setattr(part, outcome, getattr(part, outcome) + 1)
            if outcome != "sent":
                break          # keep this receiver's order; try the rest after the backoff
        return part

    groups = list(by_url.values())
    if len(groups) == 1:
        parts = [one_receiver(groups[0])]
    else:
        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_RECEIVERS, len(groups)),
                                thread_name_prefix="replayscope-notify") as pool:
            parts = list(pool.map(one_receiver, groups))
    for part in parts:
        result.sent += part.sent
        result.failed += part.failed
        result.expired += part.expired
    if metrics is not None:
        metrics.observe_notifications(result)
    return result


def _send_one(store: Store, delivery: Delivery, row: dict, now: float, clock, post) -> str:
    lease_s = delivery.timeout_s + 30.0
    with store.write() as conn:          # claim it: another notifier (or a retry) sees it leased
        claimed = conn.execute(an.update().where(an.c.id == row["id"],
                                                 an.c.next_attempt_at == row["next_attempt_at"])
                               .values(next_attempt_at=now + lease_s, attempts=an.c.attempts + 1)).rowcount
    if not claimed:
        return "skipped"       # another notifier took it
    alert = row["alert"]
    body = (alertmanager_payload(alert, clock()) if row["receiver"] == "alertmanager"
            else webhook_payload(alert, delivery.external_url))
    try:
        post(row["url"], body, delivery.timeout_s)
        error = None
    except Exception as exc:    # any failure of the receiver is retried, never raised
        error = str(exc)[:500] or type(exc).__name__
    done = clock()
    attempts = row["attempts"] + 1
    with store.write() as conn:
        if error is None:
            conn.execute(an.update().where(an.c.id == row["id"]).values(
                state="sent", sent_at=done, last_error=None,
                next_attempt_at=done + delivery.repeat_for(row["receiver"])))
            return "sent"
        if done >= row["expires_at"] and row["state"] == "pending":
            conn.execute(an.update().where(an.c.id == row["id"]).values(state="expired", last_error=error))
            log.error("alert notification %s (%s) to %s expired after %d attempts: %s", row["fingerprint"],
                      row["status"], _shown(row["url"]), attempts, error)
            return "expired"
        backoff = min(BACKOFF_FIRST_S * 2 ** (attempts - 1), BACKOFF_MAX_S)
        retry_at = done + backoff
        if row["state"] == "pending":
            retry_at = min(retry_at, row["expires_at"])      # one last attempt when it expires
        conn.execute(an.update().where(an.c.id == row["id"]).values(next_attempt_at=retry_at, last_error=error))
    if attempts == 1 or attempts % 10 == 0:
        log.warning("alert notification %s (%s) to %s failed (attempt %d, next in %.0fs): %s",
                    row["fingerprint"], row["status"], _shown(row["url"]), attempts, backoff, error)
    return "failed"


def _shown(url: str) -> str:
    from collector.auth import redact_url

    return redact_url(url)


def outbox(store: Store, states: Iterable[str] = ("pending", "sent", "expired")) -> list[dict]:
    """Outbox rows (newest first) for the API and tests."""
    with store.read() as conn:
        return [dict(r) for r in conn.execute(
            sa.select(an).where(an.c.state.in_(list(states))).order_by(an.c.id.desc()).limit(500)).mappings()]
