"""The built-in eager-ratio rule (issue 34): every new store starts with it, so
``REPLAYSCOPE_ALERT_WEBHOOK`` or ``REPLAYSCOPE_ALERTMANAGER_URL`` alone get notified. Before,
a fresh ``serve`` answered ``GET /v1/alert-rules`` with ``[]`` and nothing was ever sent. It is
the Prometheus rule's (tests/collector/test_prometheus_rules.py), editable, and deleted it
stays deleted on the next start."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from replayscope.app.cli import main
from replayscope.collector.alerting import alerts
from replayscope.collector.alerting.alerts import BUILTIN_EAGER_RATIO_RULE as BUILTIN
from replayscope.collector.alerting.notifications import Delivery
from replayscope.collector.api import create_api
from replayscope.collector.ingest import ingest_events, ingest_run
from replayscope.collector.models import outbox, queries
from replayscope.collector.settings import Settings
from replayscope.collector.store import Store
from tests.live_server import LOOPBACK_BASE

from .conftest import run_record, step

NOW = time.time()
FIELDS = ("threshold", "window_s", "min_steps", "stage", "for_s", "keep_firing_for_s", "kind", "enabled")


def rules(url: str) -> list[dict]:
    store = Store.open(url)                      # a start: serve, import and db upgrade open it so
    try:
        return queries.alert_rules(store)
    finally:
        store.dispose()


def test_a_new_store_has_the_built_in_rule_and_the_api_shows_it(tmp_path):
    url = f"sqlite:///{tmp_path}/new.db"
    [rule] = rules(url)
    assert rule.name == BUILTIN["name"] and {k: getattr(rule, k) for k in FIELDS} == {k: BUILTIN[k] for k in FIELDS}
    assert (rule.threshold, rule.window_s, rule.stage) == (0.2, 300, "decode+mixed")
    store = Store.open(url)
    client = TestClient(create_api(store, Settings(run_services=False)), base_url=LOOPBACK_BASE)
    assert [r["name"] for r in client.get("/v1/alert-rules").json()] == [BUILTIN["name"]]
    store.dispose()


def test_a_store_made_by_db_upgrade_has_it_too(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/upgraded.db"
    assert main(["db", "upgrade", "--db", url]) == 0          # compose's migrate service
    assert [r.name for r in rules(url)] == [BUILTIN["name"]]


def test_an_edit_is_kept_and_a_deletion_stays_deleted_on_the_next_start(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/edited.db"
    [rule] = rules(url)
    store = Store.open(url)
    alerts.update_rule(store, rule.id, {"threshold": 0.35})
    store.dispose()
    assert [r.threshold for r in rules(url)] == [0.35]
    store = Store.open(url)
    alerts.delete_rule(store, rule.id)
    store.dispose()
    assert rules(url) == []
    assert main(["db", "upgrade", "--db", url]) == 0 and rules(url) == []


def test_it_fires_and_owes_the_default_webhook_a_notification(tmp_path):
    """What REPLAYSCOPE_ALERT_WEBHOOK alone now gets: decode steps 50% eager for six minutes."""
    store = Store.open(f"sqlite:///{tmp_path}/fires.db")
    t0 = NOW - 600
    ingest_run(store, run_record("run-1", started_at=t0))
    ingest_events(store, "run-1", [step(i, t0 + i / 2, mode="eager" if i % 2 else "graph") for i in range(720)])
    delivery = Delivery(default_webhook="http://127.0.0.1:9/hook", external_url="http://dash.example:8300")
    fired = alerts.evaluate_alerts(store, delivery=delivery)
    assert [(t.status, t.rule.name) for t in fired] == [("firing", BUILTIN["name"])]
    with store.read() as conn:
        owed = outbox.rows(conn)
    assert [(row["receiver"], row["url"], row["status"]) for row in owed] == [("webhook", "http://127.0.0.1:9/hook", "firing")]
    store.dispose()
