"""Nobody can lock a runner out (issue 36). The audit: while an address was limited for wrong
tokens, every token from it was refused unchecked, the right one included; one wrong token a
second from the runner's host kept 59 % of a real runner's events in its spool, and the
dashboard's sign-in with the right token was refused too. And the limit was bypassed: uvicorn
believed ``X-Forwarded-For`` from 127.0.0.1, so each forged value got a fresh allowance, as did
each of 200 source addresses in 127/8. Now the right token is always checked and accepted,
wrong ones are limited per peer (every loopback address one), and ``X-Forwarded-For`` is
believed only from the proxies ``--forwarded-allow-ips`` names. Against a real
``replayscope serve``, with a real ``replayscope.contract.sinks.HttpSink``."""

from __future__ import annotations

import http.client
import json
import threading
import time
from urllib.parse import urlsplit

import pytest

from replayscope.contract.sinks import HttpSink

from tests.faults.conftest import REPO, Collector, http_json, migrated_sqlite, stored_seqs
from .test_sign_in_rate import sign_in

TOKEN = "the-runners-token"
RULE = {"name": "guess", "threshold": 0.5}


class Hammer:
    """An attacker on the runner's address: wrong bearer tokens, back to back, until stopped."""

    def __init__(self, url: str):
        self.url = url
        self.stop = threading.Event()
        self.statuses: list[int] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            status, _, _ = http_json("POST", self.url + "/v1/alert-rules", RULE,
                                     headers={"Authorization": f"Bearer wrong-{i}"})
            self.statuses.append(status)
            i += 1
            time.sleep(0.01)

    def __enter__(self) -> "Hammer":
        self.thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.stop.set()
        self.thread.join(15)


def steps(seq0: int, n: int) -> list[dict]:
    t = time.time()
    return [{"seq": seq0 + i, "ts": t + i * 1e-4, "kind": "step", "stage": "decode", "mode": "graph", "raw_bs": 8,
             "graph_bs": 8, "num_tokens": 8, "padded_tokens": 0, "reason": None, "duration_s": 0.002}
            for i in range(n)]


def test_a_guesser_on_the_runners_address_loses_it_no_event_and_the_sign_in_still_works(tmp_path):
    db = migrated_sqlite(tmp_path / "lockout.db")
    with Collector(db, dashboard=True, env={"REPLAYSCOPE_TOKEN": TOKEN}) as collector:
        sink = HttpSink(collector.url, token=TOKEN, spool_path=str(tmp_path / "spool.jsonl"), retries=1,
                        backoff_s=0.05, drain_timeout_s=5.0)
        sink.open({"run_id": "streamed", "name": "streamed", "source": "runner", "started_at": time.time(),
                   "backend": "static", "model": "tiny", "device": "cpu"})
        with Hammer(collector.url) as hammer:
            time.sleep(0.5)                            # the address is limited before the runner starts
            for k in range(30):                        # 30 flushes of 40 steps, as the emitter sends them
                sink.write(steps(k * 40, 40))
                time.sleep(0.05)
            signed_in = sign_in(collector, TOKEN)
            sink.close()
            refused = sum(1 for s in hammer.statuses if s == 429)
        print(f"attacker: {len(hammer.statuses)} wrong tokens ({refused} answered 429); runner: {sink.sent} events "
              f"sent, {sink.spooled} left in its spool")
        assert sink.spooled == 0, "nothing left in the runner's spool (the old code kept all 1200 there)"
        stored = stored_seqs(db, "streamed")
    assert refused > 20, "the attacker's address was limited the whole time"
    assert sorted(stored) == list(range(1200)) and set(stored.values()) == {1}, "every event stored once"
    assert signed_in == "Signed in: you can change rules."


def wrong_token(url: str, source: str = "127.0.0.1", headers: dict | None = None) -> int:
    """One wrong bearer token on a connection from ``source`` (any address of 127/8)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10, source_address=(source, 0))
    try:
        conn.request("POST", "/v1/alert-rules", json.dumps(RULE),
                     {"Content-Type": "application/json", "Authorization": "Bearer wrong", **(headers or {})})
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.fixture
def collector(tmp_path):
    with Collector(migrated_sqlite(tmp_path / "t.db"), env={"REPLAYSCOPE_TOKEN": TOKEN}) as c:
        yield c


def test_forged_x_forwarded_for_values_share_the_peers_allowance(collector):
    statuses = [wrong_token(collector.url, headers={"X-Forwarded-For": f"203.0.113.{i}"}) for i in range(12)]
    assert statuses == [401] * 5 + [429] * 7, statuses


def test_every_loopback_source_address_is_one_client(collector):
    statuses = [wrong_token(collector.url, source=f"127.0.{i // 250}.{1 + i % 250}") for i in range(30)]
    assert statuses == [401] * 5 + [429] * 25, statuses


def test_a_trusted_proxy_names_the_client(tmp_path):
    env = {"REPLAYSCOPE_TOKEN": TOKEN, "REPLAYSCOPE_FORWARDED_ALLOW_IPS": "127.0.0.1"}
    with Collector(migrated_sqlite(tmp_path / "p.db"), env=env) as collector:
        spread = [wrong_token(collector.url, headers={"X-Forwarded-For": f"203.0.113.{i}"}) for i in range(8)]
        one = [wrong_token(collector.url, headers={"X-Forwarded-For": "198.51.100.7"}) for _ in range(7)]
    assert spread == [401] * 8, "behind the proxy, each client it names has its own allowance"
    assert one == [401] * 5 + [429] * 2, one


def test_a_bad_forwarded_allow_ips_is_a_one_line_usage_error(tmp_path):
    import subprocess
    import sys


    result = subprocess.run([sys.executable, "-m", "replayscope", "serve", "--no-dashboard", "--db",
                             f"sqlite:///{tmp_path}/x.db", "--forwarded-allow-ips", "10.0.0.5,proxy.example"],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "'proxy.example' is not an IP address or network" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.db").exists(), "nothing was created"
