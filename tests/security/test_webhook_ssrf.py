"""Webhooks cannot reach internal addresses: a rule naming a loopback, link-local or private
address is refused unless the operator allows it (REPLAYSCOPE_WEBHOOK_ALLOW), and a name
that resolves to one is refused when the notification is sent (the audit: 127.0.0.1,
169.254.169.254 and ``[::ffff:127.0.0.1]`` were accepted and their answers shown, an SSRF
reader). Against a real ``replayscope serve`` and a receiver on loopback."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from tests.receiver import LOOPBACK_ALLOW, Receiver

from .conftest import RULE, Collector, firing_run, http_json, migrated_sqlite, wait_for

FAST = {"REPLAYSCOPE_EVALUATE_EVERY_S": "0.5", "REPLAYSCOPE_NOTIFY_EVERY_S": "0.2"}
INTERNAL = ["http://127.0.0.1:{port}/hook", "http://169.254.169.254/latest/meta-data/",
            "http://[::ffff:127.0.0.1]:{port}/hook", "http://[::1]:{port}/hook", "http://127.1:{port}/hook",
            "http://2130706433:{port}/hook", "http://0x7f.0.0.1:{port}/hook", "http://0.0.0.0:{port}/hook",
            "http://localhost:{port}/hook", "http://10.0.0.5:6379/", "http://192.168.1.1/", "http://172.17.0.1/",
            "http://100.64.0.1/", "http://[fe80::1]/", "http://[fd00::1]/"]


def loopback_name() -> str:
    """A host name (not an address) that resolves to a non-public address on this machine."""
    name = socket.gethostname()
    try:
        addresses = {ipaddress.ip_address(info[4][0]) for info in socket.getaddrinfo(name, None)}
    except socket.gaierror:
        pytest.skip(f"this machine's name {name!r} does not resolve")
    if any(a.is_global for a in addresses):
        pytest.skip(f"this machine's name {name!r} resolves to a public address")
    return name


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    """``replayscope serve`` as started by default: no token, no allowance."""
    with Collector(migrated_sqlite(tmp_path_factory.mktemp("ssrf") / "s.db"), env=FAST) as c:
        yield c


@pytest.mark.parametrize("template", INTERNAL)
def test_a_rule_to_an_internal_address_is_refused_and_names_the_allowance(collector, template):
    url = template.format(port=collector.port)
    status, body, _ = http_json("POST", collector.url + "/v1/alert-rules",
                                {**RULE, "name": "ssrf", "webhook_url": url})
    assert status == 422 and body["field"] == "webhook_url", body
    assert "REPLAYSCOPE_WEBHOOK_ALLOW" in body["detail"], body
    assert all(r["name"] != "ssrf" for r in http_json("GET", collector.url + "/v1/alert-rules")[1])


def test_a_name_that_resolves_to_loopback_gets_nothing_and_the_outbox_says_why(collector):
    name = loopback_name()
    with Receiver() as receiver:
        status, rule, _ = http_json("POST", collector.url + "/v1/alert-rules",
                                    {**RULE, "name": "rebound", "webhook_url": f"http://{name}:{receiver.port}/hook"})
        assert status == 201, rule                     # a name: resolved when a notification is sent
        firing_run(collector.url, "ssrf-run")
        row = wait_for(lambda: next((r for r in http_json("GET", collector.url + "/v1/alert-notifications")[1]
                                     if r["last_error"]), None), 30, "the notification attempted")
        assert receiver.requests == 0, "nothing was posted to the internal address"
    assert row["state"] == "pending" and row["last_error"].startswith(f"refused: {name} resolves to a ")
    assert "REPLAYSCOPE_WEBHOOK_ALLOW" in row["last_error"]


def test_an_operator_allowance_lets_a_loopback_receiver_get_its_notification(tmp_path):
    with Receiver() as receiver, Collector(migrated_sqlite(tmp_path / "a.db"),
                                           env={**FAST, "REPLAYSCOPE_WEBHOOK_ALLOW": LOOPBACK_ALLOW}) as collector:
        status, rule, _ = http_json("POST", collector.url + "/v1/alert-rules",
                                    {**RULE, "name": "allowed", "webhook_url": receiver.url})
        assert status == 201, rule
        firing_run(collector.url, "allowed-run")
        wait_for(lambda: receiver.received, 30, "the notification delivered")
    assert receiver.alerts()[0][0] == "firing"


def test_a_default_receiver_on_an_internal_address_stops_the_collector_at_start(tmp_path):
    collector = Collector(migrated_sqlite(tmp_path / "d.db"), log=tmp_path / "d.log",
                          env={"REPLAYSCOPE_ALERT_WEBHOOK": "http://169.254.169.254/hook"})
    with pytest.raises(AssertionError, match="exited with 2"):
        collector.start()
    assert ("REPLAYSCOPE_ALERT_WEBHOOK (http://169.254.169.254/…): 169.254.169.254 is a link-local address"
            in (tmp_path / "d.log").read_text())
