"""``Authorization: Bearer`` is parsed as RFC 6750 (2.1) writes it (issue 36): the scheme in any
case (RFC 7235: schemes are case-insensitive), one or more spaces, the token, nothing else.
The audit: any case and any spacing was accepted (the token was stripped of whitespace);
now a tab, a space after the token, quotes or anything else around it carry no token (401).
And a configured token no header could carry is a one-line error before anything serves.
Against a real ``replayscope serve``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from replayscope.collector.api import auth
from replayscope.contract.environment import token as configured_token
from replayscope.contract.errors import ReplayscopeError
from tests.faults.conftest import REPO, Collector, http_json, migrated_sqlite

TOKEN = "s3cret-Token_0.9~+/=="
ACCEPTED = [f"Bearer {TOKEN}", f"bearer {TOKEN}", f"BEARER {TOKEN}", f"Bearer  {TOKEN}"]
REFUSED = [f"Bearer\t{TOKEN}", f"Bearer \t{TOKEN}", f"Bearer {TOKEN} x", f'Bearer "{TOKEN}"', f"Bearer{TOKEN}",
           f"Bearer {TOKEN},", f"Bearer {TOKEN}\t;", f"Basic {TOKEN}", f"Bearer {TOKEN}=x", f"Bearer ={TOKEN}",
           f"Bearer,{TOKEN}", f"Bearer {TOKEN[:-2]} =="]


def test_the_parser_takes_rfc_6750s_grammar_only():
    assert [auth.bearer(h) for h in ACCEPTED] == [TOKEN] * len(ACCEPTED)
    assert [auth.bearer(h) for h in REFUSED] == [None] * len(REFUSED)
    assert auth.bearer(f"Bearer {TOKEN}\n") is None and auth.bearer(f"Bearer {TOKEN} ") is None


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    db = migrated_sqlite(tmp_path_factory.mktemp("bearer") / "b.db")
    with Collector(db, env={"REPLAYSCOPE_TOKEN": TOKEN}) as c:
        yield c


@pytest.mark.parametrize("header", ACCEPTED)
def test_a_well_formed_header_writes(collector, header):
    status, body, _ = http_json("POST", collector.url + "/v1/alert-rules", {"name": f"ok-{ACCEPTED.index(header)}", "threshold": 0.5},
                                headers={"Authorization": header})
    assert status == 201, body


@pytest.mark.parametrize("header", REFUSED)
def test_anything_around_the_token_carries_no_token(collector, header):
    status, body, _ = http_json("POST", collector.url + "/v1/alert-rules", {"name": "no", "threshold": 0.5},
                                headers={"Authorization": header})
    assert status == 401, (header, body)


@pytest.mark.parametrize("value", ["has space", "tab\there", "quo\"te", "comma,", "=lead", "ünï"])
def test_a_token_no_header_could_carry_is_refused_where_it_is_configured(value):
    with pytest.raises(ReplayscopeError, match="REPLAYSCOPE_TOKEN: a bearer token is letters, digits"):
        configured_token(environ={"REPLAYSCOPE_TOKEN": value})
    with pytest.raises(ReplayscopeError, match="--token: a bearer token"):
        configured_token(value, environ={})


def test_serve_with_such_a_token_is_a_one_line_usage_error(tmp_path):
    result = subprocess.run([sys.executable, "-m", "replayscope", "serve", "--no-dashboard", "--db",
                             f"sqlite:///{tmp_path}/x.db"], cwd=REPO, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "REPLAYSCOPE_TOKEN": "my token"})
    assert result.returncode == 2, result.stderr
    assert "REPLAYSCOPE_TOKEN: a bearer token is letters, digits" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.db").exists()
