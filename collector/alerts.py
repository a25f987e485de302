"""Eager-ratio alerts: validated rules, the evaluator, and the Alertmanager-style webhook.

A rule fires for a run when, over the last ``window_s`` seconds of the run's event time,
at least ``min_steps`` steps of ``stage`` ran and the share of them that ran eager is
above ``threshold``. It resolves when the share falls back to the threshold or below
(with ``min_steps`` steps), or when the window holds no steps at all (the run went
quiet); in between it holds. Each firing is one ``alert_events`` row: start, end, peak
ratio, latest ratio and the dominant eager reason at the peak.

``evaluate_alerts(store, now)`` does one evaluation and returns the transitions;
``notify(transitions, ...)`` posts them. ``collector.services`` runs both in a loop.
"""

from __future__ import annotations

import fnmatch
import hashlib
import math
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable
from urllib.parse import urlsplit

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from collector.store import Store
from collector.tables import alert_events as ae, alert_rules as ar, runs, step_rollups as sr
from runner.errors import ReplayscopeError
from runner.wire import STEP_STAGES

RULE_DEFAULTS: dict[str, Any] = {
    "window_s": 300, "min_steps": 100, "run_pattern": None, "stage": "decode",
    "webhook_url": None, "enabled": True, "kind": "eager_ratio", "metric": None,
}
RULE_FIELDS = ("name", "threshold", "window_s", "min_steps", "run_pattern", "stage", "webhook_url", "enabled",
               "kind", "metric")
# eager_ratio: the share of eager steps over a window; regression: collector.regressions.
RULE_KINDS = ("eager_ratio", "regression")
MAX_WINDOW_S = 7 * 24 * 3600
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.:-]{0,99}$")


class InvalidRule(ReplayscopeError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class UnknownRule(ReplayscopeError):
    def __init__(self, rule_id: int):
        super().__init__(f"no alert rule with id {rule_id}")
        self.rule_id = rule_id


class DuplicateRule(InvalidRule):
    def __init__(self, name: str):
        super().__init__("name", f"a rule named {name!r} already exists")


# -- rules ---------------------------------------------------------------------------------

def _check_rule_field(name: str, value: Any) -> Any:
    if name == "name":
        if not isinstance(value, str) or not _NAME.match(value):
            raise InvalidRule(name, "1-100 characters: letters, digits, space, _ . : -, starting with a letter or digit")
        return value
    if name == "threshold":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InvalidRule(name, "must be a number")
        if not 0 <= value <= 1:
            raise InvalidRule(name, f"{value:g} is outside 0..1 (it is an eager ratio)")
        return float(value)
    if name == "window_s":
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidRule(name, "must be a whole number of seconds")
        if not 1 <= value <= MAX_WINDOW_S:
            raise InvalidRule(name, f"must be 1..{MAX_WINDOW_S} seconds")
        return value
    if name == "min_steps":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidRule(name, "must be an integer >= 1")
        return value
    if name == "run_pattern":
        if value is None or value == "":
            return None
        if not isinstance(value, str) or len(value) > 200:
            raise InvalidRule(name, "must be a glob on run names (up to 200 characters) or null for all runs")
        try:
            re.compile(fnmatch.translate(value))
        except re.error as error:
            raise InvalidRule(name, f"not a valid glob: {error}") from None
        return value
    if name == "stage":
        if value not in STEP_STAGES:
            raise InvalidRule(name, f"{value!r} is not one of {', '.join(STEP_STAGES)}")
        return value
    if name == "webhook_url":
        if value is None or value == "":
            return None
        parts = urlsplit(value) if isinstance(value, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc or len(value) > 2000:
            raise InvalidRule(name, "must be an http(s) URL or null (then REPLAYSCOPE_ALERT_WEBHOOK is used)")
        return value
    if name == "enabled":
        if not isinstance(value, bool):
            raise InvalidRule(name, "must be true or false")
        return value
    if name == "kind":
        if value not in RULE_KINDS:
            raise InvalidRule(name, f"{value!r} is not one of {', '.join(RULE_KINDS)}")
        return value
    if name == "metric":
        from collector.regressions import METRICS
        if value is not None and value not in METRICS:
            raise InvalidRule(name, f"{value!r} is not one of {', '.join(METRICS)} (or null: any)")
        return value
    raise InvalidRule(name, f"unknown field (known: {', '.join(RULE_FIELDS)})")


def validate_rule(data: Any, *, partial: bool = False) -> dict[str, Any]:
    """The rule's fields, checked and normalised; defaults filled unless ``partial``."""
    if not isinstance(data, dict):
        raise InvalidRule("(rule)", "must be a JSON object")
    out: dict[str, Any] = {}
    for name, value in data.items():
        out[name] = _check_rule_field(name, value)
    if not partial:
        for required in ("name", "threshold"):
            if required not in out:
                raise InvalidRule(required, "is required")
        for name, default in RULE_DEFAULTS.items():
            out.setdefault(name, default)
    if out.get("metric") is not None and out.get("kind", "regression") != "regression":
        raise InvalidRule("metric", "only a regression rule watches a metric")
    return out


def _rule_dict(conn, rule_id: int) -> dict:
    row = conn.execute(sa.select(ar).where(ar.c.id == rule_id)).mappings().first()
    if row is None:
        raise UnknownRule(rule_id)
    return dict(row)


def get_rule(store: Store, rule_id: int) -> dict:
    with store.read() as conn:
        return _rule_dict(conn, rule_id)


def create_rule(store: Store, data: Any, *, now: float | None = None) -> dict:
    fields = validate_rule(data)
    now = time.time() if now is None else now
    try:
        with store.write() as conn:
            rule_id = conn.execute(ar.insert().values(**fields, created_at=now, updated_at=now)).inserted_primary_key[0]
            return _rule_dict(conn, rule_id)
    except sa_exc.IntegrityError:
        raise DuplicateRule(fields["name"]) from None


def update_rule(store: Store, rule_id: int, data: Any, *, partial: bool = True,
                now: float | None = None) -> dict:
    """Change a rule (``partial``: only the given fields; else a full replacement)."""
    fields = validate_rule(data, partial=partial)
    now = time.time() if now is None else now
    try:
        with store.write() as conn:
            _rule_dict(conn, rule_id)
            conn.execute(ar.update().where(ar.c.id == rule_id).values(**fields, updated_at=now))
            if fields.get("enabled") is False:
                _resolve_open(conn, rule_id, now)
            return _rule_dict(conn, rule_id)
    except sa_exc.IntegrityError:
        raise DuplicateRule(fields.get("name", "")) from None


def delete_rule(store: Store, rule_id: int, *, now: float | None = None) -> None:
    """Delete a rule; its open alerts resolve, its history stays."""
    now = time.time() if now is None else now
    with store.write() as conn:
        _rule_dict(conn, rule_id)
        _resolve_open(conn, rule_id, now)
        conn.execute(ae.update().where(ae.c.rule_id == rule_id).values(rule_id=None))
        conn.execute(ar.delete().where(ar.c.id == rule_id))


def _resolve_open(conn, rule_id: int, now: float) -> None:
    conn.execute(ae.update().where(ae.c.rule_id == rule_id, ae.c.status == "firing")
                 .values(status="resolved", ended_at=now))


# -- evaluation ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Transition:
    """An alert that started firing or resolved in one evaluation."""

    status: str                 # firing | resolved
    alert: dict                 # the alert_events row (with run_id, run_name)
    rule: dict                  # the rule row


@dataclass(frozen=True)
class WindowStats:
    steps: int
    eager: int
    reason: str | None          # dominant eager reason

    @property
    def ratio(self) -> float:
        return self.eager / self.steps if self.steps else 0.0


def window_stats(conn, rule: dict, run_pks: list[int], now: float) -> dict[int, WindowStats]:
    """Steps of ``rule['stage']`` per run over ``(now - window_s, now]`` (1 s rollups)."""
    if not run_pks:
        return {}
    start = math.floor(now - rule["window_s"]) + 1
    rows = conn.execute(
        sa.select(sr.c.run_pk, sr.c.mode, sr.c.reason, sa.func.sum(sr.c.steps))
        .where(sr.c.run_pk.in_(run_pks), sr.c.bucket_s == 1, sr.c.stage == rule["stage"],
               sr.c.t >= start, sr.c.t <= math.floor(now))
        .group_by(sr.c.run_pk, sr.c.mode, sr.c.reason))
    per_run: dict[int, list] = {}
    for pk, mode, reason, n in rows:
        acc = per_run.setdefault(pk, [0, 0, {}])
        acc[0] += int(n)
        if mode == "eager":
            acc[1] += int(n)
            acc[2][reason] = acc[2].get(reason, 0) + int(n)
    out = {}
    for pk, (steps, eager, reasons) in per_run.items():
        top = min(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[0] if reasons else None
        out[pk] = WindowStats(steps, eager, top or None)
    return out


def evaluate_alerts(store: Store, now: float | None = None) -> list[Transition]:
    """One evaluation of every rule over the runs in scope; returns what changed."""
    now = time.time() if now is None else now
    transitions: list[Transition] = []
    with store.write() as conn:
        rules = [dict(r) for r in conn.execute(sa.select(ar).order_by(ar.c.id)).mappings()]
        for rule in rules:
            if not rule["enabled"]:
                _resolve_open(conn, rule["id"], now)
                continue
            if rule.get("kind") == "regression":
                from collector import regressions
                transitions.extend(Transition(status, alert, rule)
                                   for status, alert in regressions.evaluate_rule(conn, rule, now))
                continue
            transitions.extend(_evaluate_rule(conn, rule, now))
    return transitions


def _evaluate_rule(conn, rule: dict, now: float) -> list[Transition]:
    open_rows = {r.run_pk: dict(r._mapping) for r in conn.execute(
        sa.select(ae).where(ae.c.rule_id == rule["id"], ae.c.status == "firing"))}
    active = conn.execute(
        sa.select(runs.c.id, runs.c.run_id, runs.c.name)
        .where(sa.or_(runs.c.last_event_ts > now - rule["window_s"], runs.c.id.in_(list(open_rows) or [-1])))
    ).all()
    pattern = rule["run_pattern"]
    in_scope = {r.id: r for r in active if pattern is None or fnmatch.fnmatchcase(r.name, pattern)}
    stats = window_stats(conn, rule, list(in_scope), now)
    out: list[Transition] = []
    for pk, run in in_scope.items():
        s = stats.get(pk, WindowStats(0, 0, None))
        current = open_rows.get(pk)
        over = s.steps >= rule["min_steps"] and s.ratio > rule["threshold"]
        back = s.steps == 0 or (s.steps >= rule["min_steps"] and s.ratio <= rule["threshold"])
        names = {"run_id": run.run_id, "run_name": run.name}
        if current is None and over:
            values = {"rule_id": rule["id"], "rule_name": rule["name"], "run_pk": pk, "status": "firing",
                      "threshold": rule["threshold"], "started_at": now, "ended_at": None,
                      "peak": s.ratio, "value": s.ratio, "steps": s.steps, "reason": s.reason}
            alert_id = conn.execute(ae.insert().values(**values)).inserted_primary_key[0]
            out.append(Transition("firing", {"id": alert_id, **values, **names}, rule))
        elif current is not None and back:
            conn.execute(ae.update().where(ae.c.id == current["id"])
                         .values(status="resolved", ended_at=now, value=s.ratio))
            current.update(status="resolved", ended_at=now, value=s.ratio, **names)
            out.append(Transition("resolved", current, rule))
        elif current is not None:
            values: dict[str, Any] = {"value": s.ratio}
            if s.steps and s.ratio > current["peak"]:
                values.update(peak=s.ratio, steps=s.steps, reason=s.reason)
            conn.execute(ae.update().where(ae.c.id == current["id"]).values(**values))
    return out


# -- webhook ---------------------------------------------------------------------------------

def _rfc3339(ts: float | None) -> str:
    if ts is None:
        return "0001-01-01T00:00:00Z"
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def webhook_payload(transition: Transition, external_url: str = "") -> dict:
    """The Alertmanager webhook (version 4) body for one transition."""
    a, rule = transition.alert, transition.rule
    if rule.get("kind") == "regression":
        from collector import regressions
        labels, annotations = regressions.webhook_labels(a, rule)
    else:
        labels = {"alertname": "ReplayscopeEagerRatioHigh", "rule": rule["name"], "run_id": a["run_id"],
                  "run_name": a["run_name"], "stage": rule["stage"], "severity": "warning"}
        if a.get("reason"):
            labels["reason"] = a["reason"]
        annotations = {
            "summary": f"eager ratio of run {a['run_name']} over {rule['window_s']}s "
                       f"{'is' if transition.status == 'firing' else 'was'} above {rule['threshold']:.0%}",
            "description": f"{rule['stage']} steps ran eager at {a['value']:.1%} (peak {a['peak']:.1%}, "
                           f"threshold {rule['threshold']:.0%}); dominant reason: {a.get('reason') or 'none'}",
            "peak": f"{a['peak']:.4f}", "value": f"{a['value']:.4f}",
        }
    fingerprint = hashlib.sha256(f"{rule['name']}|{a['run_id']}|{a['id']}".encode()).hexdigest()[:16]
    alert = {"status": transition.status, "labels": labels, "annotations": annotations,
             "startsAt": _rfc3339(a["started_at"]), "endsAt": _rfc3339(a.get("ended_at")),
             "generatorURL": f"{external_url}/runs/{a['run_id']}" if external_url else "",
             "fingerprint": fingerprint}
    group = {"alertname": labels["alertname"], "rule": rule["name"]}
    return {"version": "4", "groupKey": f"{{}}:{{rule=\"{rule['name']}\"}}", "truncatedAlerts": 0,
            "status": transition.status, "receiver": "replayscope", "groupLabels": group,
            "commonLabels": labels, "commonAnnotations": annotations, "externalURL": external_url,
            "alerts": [alert]}


def post_webhook(url: str, payload: dict, *, retries: int = 3, timeout_s: float = 5.0,
                 backoff_s: float = 0.5, client=None) -> bool:
    """POST with retries (exponential backoff) on connection errors, 429 and 5xx."""
    import httpx

    own = client is None
    client = client or httpx.Client(timeout=timeout_s)
    try:
        for attempt in range(retries + 1):
            try:
                response = client.post(url, json=payload)
                if response.status_code < 300:
                    return True
                if response.status_code != 429 and response.status_code < 500:
                    return False
            except httpx.HTTPError:
                pass
            if attempt < retries:
                time.sleep(backoff_s * (2 ** attempt))
        return False
    finally:
        if own:
            client.close()


def notify(transitions: Iterable[Transition], default_url: str | None, **kwargs) -> list[tuple[str, bool]]:
    """Post each transition to its rule's webhook (or ``default_url``); returns (url, delivered)."""
    results = []
    for transition in transitions:
        url = transition.rule.get("webhook_url") or default_url
        if url:
            results.append((url, post_webhook(url, webhook_payload(transition), **kwargs)))
    return results
