"""A webhook URL and what its receiver answers are secrets: a reader without the token, the
dashboard and the collector's log never see the URL's credentials, path or query, nor the
receiver's body; and ``user:password@`` in a webhook URL is sent as basic auth (the audit:
``GET /v1/alert-notifications`` showed ``cannot reach http://alice:SECRETPW@...?token=SECRETQ``
and ``HTTP 500: {"error": "INTERNAL-SECRET-DATA: db_password=hunter2"}``; such a webhook was
never delivered, ``Name or service not known``, until it expired)."""

from __future__ import annotations

import contextlib
import json

from tests.receiver import LOOPBACK_ALLOW, Receiver

from .conftest import RULE, Collector, firing_run, http_json, migrated_sqlite, wait_for

TOKEN = "collector-token"
WRITER = {"Authorization": f"Bearer {TOKEN}"}
SECRETS = ("SECRETPW", "SECRETQ", "alice", "/hook", "INTERNAL-SECRET-DATA", "hunter2")
RECEIVER_BODY = b'{"error": "INTERNAL-SECRET-DATA: db_password=hunter2"}'


def secret_url(receiver: Receiver) -> str:
    return f"http://alice:SECRETPW@127.0.0.1:{receiver.port}/hook?token=SECRETQ"


def reader_sees(url: str) -> str:
    """Everything a reader without the token can read about rules and their notifications."""
    texts = []
    for path in ("/v1/alert-rules", "/v1/alert-notifications", "/v1/alerts"):
        status, body, _ = http_json("GET", url + path)
        assert status == 200, (path, body)
        texts.append(json.dumps(body, ensure_ascii=False))
    return "\n".join(texts)


def outbox(url: str) -> list[dict]:
    return http_json("GET", url + "/v1/alert-notifications", headers=WRITER)[1]


@contextlib.contextmanager
def firing_into(receiver: Receiver, tmp_path, run_id: str):
    """A collector with a token whose rule posts to ``receiver`` through its secret URL, and
    a run that fires it."""
    with Collector(migrated_sqlite(tmp_path / "s.db"), log=tmp_path / "collector.log",
                   env={"REPLAYSCOPE_TOKEN": TOKEN, "REPLAYSCOPE_WEBHOOK_ALLOW": LOOPBACK_ALLOW,
                        "REPLAYSCOPE_EVALUATE_EVERY_S": "0.5", "REPLAYSCOPE_NOTIFY_EVERY_S": "0.2"}) as collector:
        status, rule, _ = http_json("POST", collector.url + "/v1/alert-rules",
                                    {**RULE, "name": run_id, "webhook_url": secret_url(receiver)}, headers=WRITER)
        assert status == 201, rule
        firing_run(collector.url, run_id, headers=WRITER)
        yield collector


def test_a_failing_receiver_with_secrets_in_its_url_and_answer_leaks_nothing_to_readers_or_the_log(tmp_path):
    with Receiver(status=500, answer=RECEIVER_BODY) as receiver, firing_into(receiver, tmp_path, "leaky") as collector:
        wait_for(lambda: receiver.requests >= 2, 30, "two attempts at the receiver")
        row = wait_for(lambda: next((r for r in outbox(collector.url) if r["last_error"]), None), 10,
                       "the failed attempt recorded")
        seen = reader_sees(collector.url)
    assert row["last_error"] == "the receiver answered HTTP 500 Internal Server Error"
    assert row["url"] == secret_url(receiver), "a writer sees the whole URL"
    for secret in SECRETS:
        assert secret not in seen, f"a reader sees {secret!r}: {seen}"
    assert f"http://127.0.0.1:{receiver.port}/…" in seen, "the reader sees scheme, host and port"
    logged = (tmp_path / "collector.log").read_text()
    assert "alert notification" in logged, "the failure is logged"
    for secret in SECRETS:
        assert secret not in logged, f"the log shows {secret!r}"


def test_a_basic_auth_webhook_is_delivered_with_an_authorization_header(tmp_path):
    with Receiver(basic_auth="alice:SECRETPW") as receiver, firing_into(receiver, tmp_path, "basic-run") as collector:
        wait_for(lambda: receiver.received, 30, "the notification delivered")
        [row] = wait_for(lambda: [r for r in outbox(collector.url) if r["state"] == "sent"], 10, "marked sent")
        seen = reader_sees(collector.url)
    assert receiver.authorizations == ["Basic YWxpY2U6U0VDUkVUUFc="], "sent once, as basic auth"
    assert receiver.received[0]["alerts"][0]["labels"]["run_id"] == "basic-run"
    assert row["attempts"] == 1 and row["last_error"] is None
    for secret in SECRETS:
        assert secret not in seen

