"""DNS rebinding: a web page points a name it controls at the collector's address, and the
user's browser sends it requests carrying ``Host: evil.example`` with a matching ``Origin``.
The audit: against a token-less ``replayscope serve`` (its default), such a POST created an
alert rule (201) where ``Host: 127.0.0.1`` with the same Origin was refused (403). Now a
request naming a host the collector does not serve changes and shows nothing."""

from __future__ import annotations

import pytest

from .conftest import RULE, Collector, http_json, migrated_sqlite


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    with Collector(migrated_sqlite(tmp_path_factory.mktemp("rebind") / "r.db"), dashboard=True) as c:
        yield c


def rebound(collector) -> dict:
    return {"Host": f"evil.example:{collector.port}", "Origin": f"http://evil.example:{collector.port}"}


def test_a_rebound_write_is_refused_and_creates_nothing(collector):
    before = http_json("GET", collector.url + "/v1/alert-rules")[1]        # the built-in rule
    status, body, _ = http_json("POST", collector.url + "/v1/alert-rules", {**RULE, "name": "rebound"},
                                headers=rebound(collector))
    assert status == 400 and "REPLAYSCOPE_ALLOWED_HOSTS" in body["detail"], body
    assert http_json("GET", collector.url + "/v1/alert-rules")[1] == before


@pytest.mark.parametrize("path", ["/v1/runs", "/v1/alert-rules", "/v1/alert-notifications", "/alerts", "/metrics"])
def test_a_rebound_read_gets_nothing(collector, path):
    status, body, _ = http_json("GET", collector.url + path, headers=rebound(collector))
    assert status == 400 and "is not a name this collector serves" in body["detail"]


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}"])
def test_the_names_it_serves_still_work(collector, host):
    status, body, _ = http_json("GET", collector.url + "/v1/runs", headers={"Host": host.format(port=collector.port)})
    assert status == 200, body


def test_a_name_the_operator_lists_is_served(tmp_path):
    with Collector(migrated_sqlite(tmp_path / "n.db"),
                   env={"REPLAYSCOPE_ALLOWED_HOSTS": "replayscope.internal"}) as collector:
        status, body, _ = http_json("POST", collector.url + "/v1/alert-rules", {**RULE, "name": "named"},
                                    headers={"Host": f"replayscope.internal:{collector.port}",
                                             "Origin": f"http://replayscope.internal:{collector.port}"})
    assert status == 201, body
