"""Malformed dashboard callback requests are a 400, never a 500 (issue 36). The audit: Dash
answered ``{}``, ``[]`` and garbage posted to ``/_dash-update-component`` with 500. Now the
body is checked against the dashboard's callbacks before Dash reads it
(``replayscope.app.callback_bodies``); what passes is a callback request Dash can dispatch, whatever the
values in it. Against the real server (uvicorn), every callback of every page."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from replayscope.collector.settings import Settings
from replayscope.collector.store import Store
from tests.live_server import serving

MALFORMED = [b"{}", b"[]", b"garbage", b"null", b'"x"', b"1", b'{"output": 5}', b'{"output": "nope.children"}',
             b'{"output": "_pages_dummy.children"', b"\xff\xfe\x00", b"", b'{"output": null, "inputs": []}']
ODD = [None, 1, "x", [], {}, [None], [{}], {"id": 1, "property": 2}]


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    from replayscope.app.server import create_server

    store = Store.open(f"sqlite:///{tmp_path_factory.mktemp('cb')}/cb.db", upgrade=True)
    app = create_server(store, Settings(run_services=False))
    with serving(app) as url:
        yield url, app.state.dash.callback_map
    store.dispose()


def post(url: str, body: bytes) -> tuple[int, str]:
    request = urllib.request.Request(url + "/_dash-update-component", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8", "replace")


def well_formed(output: str, spec: dict, value=None) -> dict:
    """The body Dash's renderer posts for the callback ``output``, each value ``value``."""
    def props(items):
        return [{"id": i["id"], "property": i["property"], "value": value} for i in items]

    if output.startswith(".."):
        outputs = [{"id": p.rsplit(".", 1)[0], "property": p.rsplit(".", 1)[1]} for p in output.strip(".").split("...")]
    else:
        outputs = {"id": output.rsplit(".", 1)[0], "property": output.rsplit(".", 1)[1]}
    return {"output": output, "outputs": outputs, "inputs": props(spec["inputs"]), "state": props(spec["state"]),
            "changedPropIds": [f"{i['id']}.{i['property']}" for i in spec["inputs"][:1]]}


@pytest.mark.parametrize("body", MALFORMED)
def test_a_body_that_is_no_callback_request_is_a_400_that_says_so(dashboard, body):
    url, _ = dashboard
    status, text = post(url, body)
    assert status == 400, (body, status, text)
    assert json.loads(text)["detail"].startswith("not a dashboard callback request: ")


def test_every_callback_with_any_part_replaced_by_an_odd_value_is_never_a_500(dashboard):
    url, callbacks = dashboard
    answered = {}
    for output, spec in callbacks.items():
        good = well_formed(output, spec)
        if "callback" not in spec:                    # a clientside callback: the browser runs it
            status, text = post(url, json.dumps(good).encode())
            assert status == 400 and "no callback this dashboard runs on the server" in text, (output, status)
            continue
        status, text = post(url, json.dumps(good).encode())
        assert status in (200, 204), (output, status, text)
        for key in good:
            for odd in ODD + ["<deleted>"]:
                body = {k: v for k, v in good.items() if k != key}
                if odd != "<deleted>":
                    body[key] = odd
                status, text = post(url, json.dumps(body).encode())
                answered[status] = answered.get(status, 0) + 1
                assert status < 500, (output, key, odd, status, text)
        for odd in ODD + [-1, 1e308, "\u202e", [[[]]]]:
            status, text = post(url, json.dumps(well_formed(output, spec, odd)).encode())
            answered[status] = answered.get(status, 0) + 1
            assert status < 500, (output, "values", odd, status, text)
    print(f"{sum(answered.values())} mutated callback requests: {answered}")
    assert answered.get(400, 0) > 0


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_arbitrary_json_around_a_real_callback_is_never_a_500(dashboard, data):
    url, callbacks = dashboard
    output = data.draw(st.sampled_from(sorted(k for k, spec in callbacks.items() if "callback" in spec)))
    body = well_formed(output, callbacks[output])
    key = data.draw(st.sampled_from(sorted(body)))
    body[key] = data.draw(JSON)
    status, text = post(url, json.dumps(body).encode())
    assert status < 500, (body, status, text)


def test_a_callback_body_passes_the_collectors_size_limit_before_dash_reads_it(tmp_path):
    """Dash put its middleware outermost, where it read a callback's whole body before the
    collector's ``BodyLimit``: a chunked body (no Content-Length) of any size was read and
    dispatched. Now the collector's guards come first."""
    import http.client
    from urllib.parse import urlsplit

    from replayscope.app.server import create_server

    store = Store.open(f"sqlite:///{tmp_path}/limit.db", upgrade=True)
    app = create_server(store, Settings(run_services=False, max_body_bytes=4096))
    try:
        with serving(app) as url:
            output = next(k for k in app.state.dash.callback_map if "runs-table" in k)
            body = well_formed(output, app.state.dash.callback_map[output])
            body["padding"] = "x" * 20_000
            parts = urlsplit(url)
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
            raw = json.dumps(body).encode()
            conn.request("POST", "/_dash-update-component", body=iter([raw[:1000], raw[1000:]]),
                         headers={"Content-Type": "application/json"}, encode_chunked=True)
            response = conn.getresponse()
            status, text = response.status, response.read().decode()
            conn.close()
    finally:
        store.dispose()
    assert status == 413, (status, text[:200])
