"""Wrong tokens are limited: the audit's dashboard sign-in took 450 guesses a second, no
limit. Now wrong tokens from one address are limited (5 at once, then one every 12 s) on the
dashboard's sign-in and the API's bearer token alike; the right token is still accepted from
a limited address (issue 36: a guesser sharing it must not lock a runner out,
tests/security/test_no_lockout.py). Against a real ``replayscope serve``."""

from __future__ import annotations

import time

import pytest

from tests.app.test_dashboard_auth import callback_request

from .conftest import Collector, http_json, migrated_sqlite

TOKEN = "the-right-token"


@pytest.fixture
def collector(tmp_path):
    with Collector(migrated_sqlite(tmp_path / "t.db"), dashboard=True, env={"REPLAYSCOPE_TOKEN": TOKEN}) as c:
        yield c


def sign_in_body(collector, token: str) -> dict:
    """The body Dash's renderer posts for the sign-in callback (read from the live layout)."""
    from types import SimpleNamespace

    status, dependencies, _ = http_json("GET", collector.url + "/_dash-dependencies")
    assert status == 200
    callback_map = {d["output"]: {"inputs": d["inputs"], "state": d["state"]} for d in dependencies}
    return callback_request(SimpleNamespace(callback_map=callback_map), "auth-status.children",
                            "auth-sign-in.n_clicks", {"auth-token.value": token, "auth-sign-in.n_clicks": 1})


def sign_in(collector, token: str) -> str:
    status, body, _ = http_json("POST", collector.url + "/_dash-update-component", sign_in_body(collector, token))
    assert status == 200, body
    return body["response"]["auth-status"]["children"]


def test_wrong_tokens_at_the_sign_in_are_limited_but_the_right_one_still_signs_in(collector):
    started = time.monotonic()
    answers = [sign_in(collector, f"guess-{i}") for i in range(40)]
    elapsed = time.monotonic() - started
    wrong = [a for a in answers if a == "That is not the collector's token."]
    refused = [a for a in answers
               if a.startswith("That is not the collector's token, and too many wrong tokens from this address")]
    assert len(wrong) == 5 and len(refused) == 35, answers[:7]
    print(f"40 sign-in guesses in {elapsed:.2f}s: {len(wrong)} answered wrong, {len(refused)} refused as too many")
    assert sign_in(collector, TOKEN) == "Signed in: you can change rules.", "the right one is never locked out"


def test_guessing_the_bearer_token_is_limited_with_a_429_and_retry_after(collector):
    statuses = []
    for i in range(12):
        status, body, headers = http_json("POST", collector.url + "/v1/alert-rules", {"name": "g", "threshold": 0.5},
                                          headers={"Authorization": f"Bearer guess-{i}"})
        statuses.append(status)
    assert statuses == [401] * 5 + [429] * 7, statuses
    assert "too many wrong tokens" in body["detail"] and 1 <= int(headers["retry-after"]) <= 12
    status, body, _ = http_json("GET", collector.url + "/v1/alert-rules", headers={"Authorization": "Bearer guess-x"})
    assert status == 429, "reads with a wrong bearer token are limited too (the right one shows writers' URLs)"
    assert sign_in(collector, "guess-y").startswith("That is not the collector's token, and too many"), \
        "one limit for the API and the dashboard"
    status, body, _ = http_json("POST", collector.url + "/v1/alert-rules", {"name": "g", "threshold": 0.5},
                                headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == 201, body


def test_a_wrong_token_now_and_then_never_locks_anyone_out(collector):
    for i in range(3):
        assert sign_in(collector, f"typo-{i}") == "That is not the collector's token."
    assert sign_in(collector, TOKEN) == "Signed in: you can change rules."
