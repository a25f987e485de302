"""The notification outbox: delivered once per transition whatever the receiver does
(down for a while, slow), retried with backoff until it expires, re-sent while firing,
counted on /metrics, and accepted by a real Alertmanager."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request

import pytest
import sqlalchemy as sa

from replayscope.collector.alerting import alerts, notifications
from replayscope.collector.ingest import ingest_events, ingest_run
from replayscope.collector.alerting.notifications import Delivery, SendResult
from replayscope.collector.models import outbox
from replayscope.collector.tables import alert_notifications as an
from replayscope.collector.alerting.webhook_urls import TargetPolicy
from tests.live_server import LOOPBACK_BASE, free_port, wait_answering
from tests.receiver import LOOPBACK_ALLOW, Receiver

from .conftest import run_record
from .test_alerts import RULE, T0, steps_at
from tests.stores import without_builtin_rule

EXTERNAL = "http://dash.example:8300"
LOOPBACK = TargetPolicy.from_setting(LOOPBACK_ALLOW)      # the receivers here listen on 127.0.0.1


def outbox_rows(store) -> list[dict]:
    with store.read() as conn:
        return [dict(r) for r in conn.execute(sa.select(an).order_by(an.c.id)).mappings()]


def fire_and_resolve(store, delivery: Delivery, runs: int = 1, resolve: bool = True) -> list[str]:
    """Each run's alert fires (and resolves); returns the fingerprints, in order."""
    alerts.create_rule(store, RULE, now=time.time() - 1)
    for k in range(runs):
        run_id = f"run-{k}"
        ingest_run(store, run_record(run_id, started_at=T0))
        ingest_events(store, run_id, steps_at(0, T0, 60, 4, 1.0))
    fired = alerts.evaluate_alerts(store, delivery=delivery)
    if resolve:
        for k in range(runs):
            ingest_events(store, f"run-{k}", steps_at(1000, T0 + 60, 120, 4, 0.0))
        alerts.evaluate_alerts(store, delivery=delivery)
    return [notifications.fingerprint(RULE["name"], t.alert["run_id"], t.alert["id"]) for t in fired]


def send_due(store, delivery: Delivery, now: float | None = None, *, clock=time.time) -> SendResult:
    """What the notifier's lanes send in one round (``replayscope.collector.alerting.receiver_lanes``:
    the due rows by receiver, each receiver's through ``send_receiver``), one receiver after
    the other and waited for, without the lanes' own backoff: the rows' states alone."""
    now = clock() if now is None else now
    with store.read() as conn:
        groups = notifications.by_receiver(outbox.due(conn, now))
    result = SendResult()
    for rows in groups.values():
        result.merge(notifications.send_receiver(store, delivery, rows, now, clock=clock))
    return result


class Clock:
    """Virtual time for the notifier: retries and expiry without real waits."""

    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


def run_notifier(store, delivery: Delivery, clock: Clock, until: float, step_s: float = 1.0) -> None:
    while clock.t < until:
        send_due(store, delivery, clock.t, clock=clock)
        clock.t += step_s


def test_a_webhook_gets_alertmanager_v4_json_linking_to_the_run_page(sqlite_store):
    with Receiver() as receiver:
        delivery = Delivery(default_webhook=receiver.url, external_url=EXTERNAL, policy=LOOPBACK)
        [fp] = fire_and_resolve(sqlite_store, delivery, resolve=False)
        result = send_due(sqlite_store, delivery)
    assert (result.sent, result.failed) == (1, 0)
    [payload] = receiver.received
    assert payload["version"] == "4" and payload["status"] == "firing" and payload["externalURL"] == EXTERNAL
    [alert] = payload["alerts"]
    assert alert["fingerprint"] == fp and alert["generatorURL"] == f"{EXTERNAL}/run/run-0"
    assert alert["labels"]["alertname"] == "ReplayscopeEagerRatioHigh" and alert["labels"]["run_id"] == "run-0"
    assert alert["annotations"]["reason"] == "batch_too_large"
    assert alert["startsAt"].endswith("Z") and alert["endsAt"] == "0001-01-01T00:00:00Z"


def test_a_receiver_down_for_40_s_gets_every_transition_once_when_it_is_back(sqlite_store):
    receiver = Receiver()                          # its port is chosen; nothing listens yet
    delivery = Delivery(default_webhook=receiver.url, external_url=EXTERNAL, policy=LOOPBACK)
    fingerprints = fire_and_resolve(sqlite_store, delivery, runs=3)
    clock = Clock(time.time())
    start = clock.t
    run_notifier(sqlite_store, delivery, clock, until=start + 40)
    assert receiver.received == [] and all(r["state"] == "pending" for r in outbox_rows(sqlite_store))
    with receiver:
        run_notifier(sqlite_store, delivery, clock, until=start + 400)
    expected = sorted((status, fp) for fp in fingerprints for status in ("firing", "resolved"))
    got = receiver.alerts()
    assert sorted(got) == expected, "every transition exactly once"
    for fp in fingerprints:                        # and each alert's firing before its resolution
        assert [s for s, f in got if f == fp] == ["firing", "resolved"]
    assert {r["state"] for r in outbox_rows(sqlite_store)} == {"sent"}


def test_a_slow_receiver_gets_each_notification_once_and_evaluation_goes_on(tmp_path):
    from fastapi.testclient import TestClient

    from replayscope.collector.api import create_api
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    store = without_builtin_rule(Store.open(f"sqlite:///{tmp_path}/slow.db", upgrade=True))
    with Receiver(delay_s=3.0) as receiver:
        settings = Settings(alert_webhook=receiver.url, evaluate_every_s=0.1, notify_every_s=0.1,
                            webhook_timeout_s=10.0, external_url=EXTERNAL, webhook_allow=LOOPBACK_ALLOW)
        app = create_api(store, settings)
        with TestClient(app, base_url=LOOPBACK_BASE) as client:
            assert client.post("/v1/alert-rules", json=RULE).status_code == 201
            assert client.post("/v1/runs", json=run_record("slow", started_at=T0)).status_code == 201
            events = steps_at(0, T0, 60, 4, 1.0)
            assert client.post("/v1/runs/slow/events", json={"events": events}).status_code == 200
            assert receiver.arrived.wait(10), "the notifier posted the firing alert"
            ticks = app.state.evaluator.ticks
            time.sleep(1.5)                        # the receiver is still holding the POST
            assert receiver.received == []
            assert app.state.evaluator.ticks >= ticks + 5, "evaluation does not wait for a receiver"
            more = steps_at(1000, T0 + 60, 120, 4, 0.0)
            assert client.post("/v1/runs/slow/events", json={"events": more}).status_code == 200
            deadline = time.monotonic() + 20
            while len(receiver.received) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.0)
    store.dispose()
    assert [status for status, _ in receiver.alerts()] == ["firing", "resolved"]
    assert receiver.requests == 2, "no notification was sent twice"


def test_an_undeliverable_notification_is_retried_with_backoff_then_expires(sqlite_store):
    dead = f"http://127.0.0.1:{free_port()}/hook"
    delivery = Delivery(default_webhook=dead, external_url=EXTERNAL, expire_s=3600, policy=LOOPBACK)
    fire_and_resolve(sqlite_store, delivery, resolve=False)
    clock = Clock(time.time())
    start = clock.t
    run_notifier(sqlite_store, delivery, clock, until=start + 3700, step_s=5.0)
    [row] = outbox_rows(sqlite_store)
    assert row["state"] == "expired" and "cannot connect to the receiver (connection refused)" in row["last_error"]
    assert 8 <= row["attempts"] <= 30, "backoff, not one attempt per round"
    attempts = row["attempts"]
    run_notifier(sqlite_store, delivery, clock, until=clock.t + 600, step_s=5.0)
    assert outbox_rows(sqlite_store)[0]["attempts"] == attempts, "an expired notification is left alone"


def test_a_firing_alert_is_re_sent_at_the_repeat_interval_until_it_resolves(sqlite_store):
    with Receiver() as receiver:
        delivery = Delivery(default_webhook=receiver.url, external_url=EXTERNAL, repeat_s=600, policy=LOOPBACK)
        [fp] = fire_and_resolve(sqlite_store, delivery, resolve=False)
        clock = Clock(time.time())
        start = clock.t
        run_notifier(sqlite_store, delivery, clock, until=start + 1900, step_s=10.0)
        assert receiver.alerts() == [("firing", fp)] * 4          # at 0, 600, 1200, 1800
        ingest_events(sqlite_store, "run-0", steps_at(1000, T0 + 60, 120, 4, 0.0))
        alerts.evaluate_alerts(sqlite_store, delivery=delivery)
        run_notifier(sqlite_store, delivery, clock, until=clock.t + 1900, step_s=10.0)
    assert receiver.alerts() == [("firing", fp)] * 4 + [("resolved", fp)]


def test_notification_counters_and_the_pending_gauge_are_on_metrics(tmp_path):
    from fastapi.testclient import TestClient

    from replayscope.collector.api import create_api
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    store = without_builtin_rule(Store.open(f"sqlite:///{tmp_path}/m.db", upgrade=True))
    with Receiver() as receiver:
        settings = Settings(run_services=False, alert_webhook=receiver.url, notify_expire_s=3600,
                            webhook_allow=LOOPBACK_ALLOW)
        app = create_api(store, settings)
        delivery = Delivery.from_settings(settings)
        fire_and_resolve(store, delivery, runs=2, resolve=False)
        with store.write() as conn:                  # one of them to a receiver that is not there
            conn.execute(an.update().where(an.c.id == 1).values(url=f"http://127.0.0.1:{free_port()}/x"))
        app.state.notifier.tick(time.time())
        assert app.state.notifier.lanes.wait(10)
        text = TestClient(app, base_url=LOOPBACK_BASE).get("/metrics").text
    store.dispose()
    assert 'replayscope_alert_notifications_total{result="sent"} 1.0' in text
    assert 'replayscope_alert_notifications_total{result="failed"} 1.0' in text
    assert "replayscope_alert_notifications_pending 1.0" in text


ALERTMANAGER = "/usr/bin/prometheus-alertmanager"


@pytest.fixture
def alertmanager(tmp_path):
    if not shutil.which(ALERTMANAGER):
        if os.environ.get("CI"):
            pytest.fail("CI must test against a real Alertmanager: apt-get install prometheus-alertmanager")
        pytest.skip("needs Debian's prometheus-alertmanager")
    config = tmp_path / "alertmanager.yml"
    config.write_text("route:\n  receiver: none\nreceivers:\n  - name: none\n")
    port = free_port()
    proc = subprocess.Popen([ALERTMANAGER, f"--config.file={config}", f"--storage.path={tmp_path / 'am'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_answering(url + "/-/ready", proc, 30, "alertmanager")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def alertmanager_alerts(url: str) -> list[dict]:
    query = "/api/v2/alerts?active=true&silenced=true&inhibited=true&unprocessed=true"
    with urllib.request.urlopen(url + query, timeout=5) as response:
        return json.loads(response.read())


def test_a_real_alertmanager_gets_the_alert_firing_then_resolved(sqlite_store, alertmanager):
    delivery = Delivery(alertmanager_url=alertmanager, external_url=EXTERNAL, policy=LOOPBACK)
    fire_and_resolve(sqlite_store, delivery, resolve=False)
    assert send_due(sqlite_store, delivery).sent == 1
    [alert] = alertmanager_alerts(alertmanager)
    assert alert["labels"]["alertname"] == "ReplayscopeEagerRatioHigh" and alert["labels"]["run_id"] == "run-0"
    assert alert["generatorURL"] == f"{EXTERNAL}/run/run-0" and alert["status"]["state"] == "active"
    ingest_events(sqlite_store, "run-0", steps_at(1000, T0 + 60, 120, 4, 0.0))
    alerts.evaluate_alerts(sqlite_store, delivery=delivery)
    assert send_due(sqlite_store, delivery).sent == 1
    assert alertmanager_alerts(alertmanager) == [], "resolved: no longer active in Alertmanager"


def test_migration_0011_downgrades_and_upgrades_again(db_url):
    """Down to just before 0005 removes exactly its tables and columns; up again restores them."""
    from alembic import command
    from alembic.script import ScriptDirectory

    from replayscope.collector.store import Store, _alembic_config

    store = without_builtin_rule(Store.open(db_url, upgrade=True))
    try:
        with store.engine.begin() as conn:
            config = _alembic_config(db_url)
            config.attributes["connection"] = conn
            before = ScriptDirectory.from_config(config).get_revision("0005").down_revision
            command.downgrade(config, before)               # to just before 0005, wherever it is chained
        with store.read() as conn:
            assert "alert_notifications" not in sa.inspect(conn).get_table_names()
        store.upgrade()
        with store.read() as conn:
            tables = sa.inspect(conn).get_table_names()
            columns = {c["name"] for c in sa.inspect(conn).get_columns("alert_rules")}
        assert {"alert_notifications", "alert_state"} <= set(tables)
        assert {"for_s", "keep_firing_for_s", "resolve_threshold"} <= columns
    finally:
        store.dispose()


@pytest.mark.parametrize("variable, value", [("alert_webhook", "file:///etc/passwd"),
                                             ("alertmanager_url", "gopher://127.0.0.1:6379")])
def test_a_receiver_setting_that_is_not_http_is_refused_at_start(variable, value):
    from replayscope.collector.settings import Settings
    from replayscope.contract.errors import ReplayscopeError

    with pytest.raises(ReplayscopeError, match="must be an http\\(s\\) URL"):
        Delivery.from_settings(Settings(**{variable: value}))


def test_nothing_but_http_is_ever_posted_whatever_the_outbox_holds(sqlite_store, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    delivery = Delivery(default_webhook=f"file://{secret}", external_url=EXTERNAL, policy=LOOPBACK)
    fire_and_resolve(sqlite_store, delivery, resolve=False)
    result = send_due(sqlite_store, delivery)
    [row] = outbox_rows(sqlite_store)
    assert result.failed == 1 and "not a receiver URL: must be an http(s) URL" in row["last_error"]
