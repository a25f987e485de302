"""replayscope.collector.services.leader: a periodic job runs once per period however many collectors run it."""

from __future__ import annotations

import threading
import time

import pytest

from replayscope.collector.services import leader
from replayscope.collector.services.loops import Service
from replayscope.collector.store import Store
from tests.postgres import temporary_database


class Counting(Service):
    name = "counting"

    def __init__(self, store, interval_s):
        super().__init__(interval_s, store)
        self.calls = 0

    def tick(self, now):
        self.calls += 1


def test_a_job_runs_once_in_a_period_and_again_in_the_next(sqlite_store):
    interval = 0.5
    time.sleep(interval - time.time() % interval + 0.01)      # at the start of a period
    with leader.turn(sqlite_store, "job", interval) as first:
        pass
    with leader.turn(sqlite_store, "job", interval) as again:
        pass
    time.sleep(interval)
    with leader.turn(sqlite_store, "job", interval) as next_period:
        pass
    assert (first, again, next_period) == (True, False, True)
    assert leader.ticks(sqlite_store)["job"]["runs"] == 2


def test_jobs_have_periods_of_their_own(sqlite_store):
    with leader.turn(sqlite_store, "one", 60) as a, leader.turn(sqlite_store, "two", 60) as b:
        assert a and b


def test_a_service_without_a_store_always_ticks():
    service = Counting(None, 60)
    assert service.run_once() and service.run_once() and service.calls == 2


@pytest.fixture
def pg_url():
    with temporary_database("leader tests") as url:
        Store.open(url, upgrade=True).dispose()
        yield url


@pytest.mark.postgres
def test_while_one_collector_holds_a_job_the_others_skip_it(pg_url):
    a, b = Store(pg_url), Store(pg_url)
    try:
        with leader.exclusive(a, "job") as held_a:
            with leader.exclusive(b, "job") as held_b:
                assert held_a and not held_b
        with leader.exclusive(b, "job") as held_b:
            assert held_b
    finally:
        a.dispose()
        b.dispose()


@pytest.mark.postgres
def test_a_lock_held_by_a_connection_that_died_is_free_again(pg_url):
    a, b = Store(pg_url), Store(pg_url)
    try:
        conn = a.engine.raw_connection()
        cursor = conn.cursor()
        cursor.execute("SELECT pg_advisory_lock(%s)", (leader.lock_key("job"),))
        with leader.exclusive(b, "job") as held:
            assert not held
        conn.invalidate()                      # the collector's connection is gone
        deadline = time.monotonic() + 10       # the server frees it once it sees the socket closed
        while True:
            with leader.exclusive(b, "job") as held:
                if held or time.monotonic() > deadline:
                    break
            time.sleep(0.1)
        assert held
    finally:
        a.dispose()
        b.dispose()


@pytest.mark.postgres
def test_of_six_collectors_ticking_at_once_exactly_one_runs_each_period(pg_url):
    stores = [Store(pg_url) for _ in range(6)]
    services = [Counting(s, 2.0) for s in stores]
    try:
        for _period in range(3):
            time.sleep(2.0 - time.time() % 2.0 + 0.05)
            barrier = threading.Barrier(len(services))

            def attempt(service):
                barrier.wait()
                service.run_once()

            threads = [threading.Thread(target=attempt, args=(s,)) for s in services]
            for t in threads:
                t.start()
            for t in threads:
                t.join(10)
        assert sum(s.calls for s in services) == 3
        assert leader.ticks(stores[0])["counting"]["runs"] == 3
    finally:
        for s in stores:
            s.dispose()
