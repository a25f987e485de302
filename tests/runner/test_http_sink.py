"""replayscope.runner.emitter.HttpSink never silently loses an event: what is refused is isolated and
recorded as a warning, the rest is stored; what cannot be sent now is spooled and sent
later (at the end of the run it waits for the collector, bounded); a spool imports; and
SIGTERM ends a run ``interrupted`` like Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from replayscope.contract import wire
from replayscope.runner.emitter import Emitter
from replayscope.contract.sinks import HttpSink
from tests.live_server import free_port, serving
from tests.stub_server import QuietHandler, start_server, stop_server


@pytest.fixture(autouse=True)
def sink_in_this_process(monkeypatch):
    """These tests look at the sink's own state as it writes (its spool, its clock, what it
    posted): the emitter's thread writes it here, not the writer process (tests/runner/
    test_event_writer.py sends to a collector through the writer)."""
    monkeypatch.setenv("REPLAYSCOPE_EVENTS_IN_PROCESS", "1")

REPO = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0


def run_record(run_id: str = "sink-1") -> dict:
    return {"run_id": run_id, "name": run_id, "source": "library", "started_at": T0, "backend": "static",
            "model": "tiny", "device": "cpu", "config": {}}


def steps(seq0: int, n: int) -> list[dict]:
    return [{"seq": seq0 + i, "ts": T0 + (seq0 + i) * 0.01, "kind": "step", "stage": "decode", "mode": "graph",
             "raw_bs": 4, "graph_bs": 4, "num_tokens": 4, "padded_tokens": 0, "reason": None, "duration_s": 0.001}
            for i in range(n)]


DROP = "drop"   # the collector dies before answering: the connection closes, nothing is stored
CUT = "cut"     # the collector dies mid-answer: the batch is stored, the answer stops after its headers


class FakeCollector:
    """The collector's two write routes, with a rule for which batches to refuse and how
    (a status and body, or DROP or CUT)."""

    def __init__(self, answer=None):
        self.answer = answer or (lambda events: (200, None))
        self.stored: dict[int, dict] = {}
        self.records: list[dict] = []   # the run records posted, in order
        self.arrivals: list[int] = []   # seqs in the order they were first stored
        self.posts = 0
        self.post_times: list[float] = []   # replayscope.runner.emitter's clock at each events post
        self.clock = None
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "FakeCollector":
        fake = self

        class Handler(QuietHandler):
            def do_POST(self):
                body = self.json_body()
                if self.path == "/v1/runs":
                    fake.records.append(body)
                    return self._reply(201, {"run_id": body["run_id"], "created": True})
                fake.posts += 1
                if fake.clock is not None:
                    fake.post_times.append(fake.clock.monotonic())
                outcome = fake.answer(body["events"])
                if outcome == DROP:
                    return                      # HTTP/1.0: the connection closes with no answer
                if outcome != CUT and outcome[0] >= 300:
                    return self._reply(*outcome)
                for event in body["events"]:
                    if event["seq"] not in fake.stored:
                        fake.arrivals.append(event["seq"])
                    fake.stored[event["seq"]] = event
                if outcome == CUT:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "100")
                    self.end_headers()
                    self.wfile.write(b'{"acc')
                    return
                return self._reply(200, {"accepted": len(body["events"]), "duplicates": 0})

            def _reply(self, status, payload):
                self.answer(status, json.dumps(payload).encode(), "application/json")

        self.server = start_server(Handler, self.port)
        return self

    def __exit__(self, *exc) -> None:
        stop_server(self.server)


def sink_to(url: str, tmp_path: Path, **kwargs) -> HttpSink:
    sink = HttpSink(url, **{"spool_path": str(tmp_path / "spool.jsonl"), "retries": 1, "backoff_s": 0.01,
                            "timeout_s": 5, **kwargs})
    sink.open(run_record())
    return sink


class FakeTime:
    """replayscope.runner.emitter's ``time``: its monotonic clock moves only when the sink sleeps or the
    test advances it, so waiting and backoff are checked without waiting."""

    def __init__(self):
        self.now = 1000.0
        self.slept = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds

    def advance(self, seconds: float) -> None:
        self.now += seconds

    @staticmethod
    def time() -> float:
        return time.time()


@pytest.fixture
def fake_time(monkeypatch) -> FakeTime:
    import replayscope.contract.sinks

    clock = FakeTime()
    monkeypatch.setattr(replayscope.contract.sinks, "time", clock)
    return clock


def spool_lines(sink: HttpSink) -> list[dict]:
    return [json.loads(line) for line in Path(sink.spool_path).read_text().splitlines()]


def test_an_event_the_wire_contract_refuses_becomes_a_warning_and_the_rest_is_stored(tmp_path, capsys):
    with FakeCollector() as collector:
        sink = sink_to(collector.url, tmp_path)
        events = steps(0, 10)
        events[3]["duration_s"] = 1e308
        sink.write(events)
    assert sorted(collector.stored) == list(range(10))
    warning = collector.stored[3]
    assert warning["kind"] == "warning" and warning["code"] == "rejected_event"
    assert "duration_s" in warning["message"] and "the wire contract" in warning["message"]
    wire.validate_event(warning)
    assert all(collector.stored[s]["kind"] == "step" for s in range(10) if s != 3)
    assert sink.rejected == 1 and "event 3 (step) was not stored" in capsys.readouterr().err


def test_a_batch_the_collector_refuses_is_narrowed_to_the_event_it_names(tmp_path, monkeypatch):
    """A collector stricter than this runner (another version) refuses seq 7 and 4000 of a
    batch of 5000: those two become warnings, the other 4998 and the run_end are stored."""
    from replayscope.collector import ingest
    from replayscope.collector.api import create_api
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    real = ingest.validate_event

    def stricter(event):
        if event.get("seq") in (7, 4000) and event.get("kind") == "step":
            raise wire.WireError("num_tokens", "this collector allows fewer tokens")
        real(event)

    monkeypatch.setattr(ingest, "validate_event", stricter)
    store = Store.open(f"sqlite:///{tmp_path}/c.db", upgrade=True)
    with serving(create_api(store, Settings(run_services=False))) as url:
        sink = HttpSink(url, spool_path=str(tmp_path / "spool.jsonl"), retries=1, backoff_s=0.01)
        emitter = Emitter(sink, run_record(), flush_interval_s=60, heartbeat_s=600).start()
        for _ in range(5000):                   # one batch: flushed at close
            emitter.step("decode", "graph", 4, 4, 4, 0, None, 0.001)
        emitter.close()
    from replayscope.collector.models import queries
    summary = queries.run_summary(store, "sink-1")
    warnings = queries.warnings(store, "sink-1")
    store.dispose()
    assert summary["steps"] == 4998 and summary["status"] == "finished"
    assert [(w["seq"], w["code"]) for w in warnings] == [(7, "rejected_event"), (4000, "rejected_event")]
    assert "this collector allows fewer tokens" in warnings[0]["message"]


def test_a_refusal_without_an_index_is_narrowed_down_by_halves(tmp_path):
    def refuse(events):
        if any(e["seq"] == 13 and e["kind"] == "step" for e in events):
            return 400, {"detail": "something in here"}
        return 200, None

    with FakeCollector(refuse) as collector:
        sink = sink_to(collector.url, tmp_path)
        sink.write(steps(0, 64))
    assert sorted(collector.stored) == list(range(64))
    assert collector.stored[13]["kind"] == "warning" and "something in here" in collector.stored[13]["message"]
    assert collector.posts <= 2 * 7 + 2, "a binary search, not one post per event"


def test_a_5xx_spools_the_batch_and_the_next_attempt_sends_it_first(tmp_path, fake_time):
    failures = {"left": 2}

    def flaky(events):
        if failures["left"]:
            failures["left"] -= 1
            return 503, {"detail": "the store cannot take writes right now"}
        return 200, None

    with FakeCollector(flaky) as collector:
        sink = sink_to(collector.url, tmp_path)
        sink.write(steps(0, 100))
        assert sink.spooled == 100 and collector.stored == {}
        fake_time.advance(60)
        sink.write(steps(100, 100))           # the drain fails once more: still spooled, in order
        assert sink.spooled == 200
        fake_time.advance(60)
        sink.write(steps(200, 100))
        assert sink.spooled == 0 and not Path(sink.spool_path).exists()
    assert collector.arrivals == list(range(300))


def test_an_answer_cut_off_by_a_dying_collector_is_retried_not_lost(tmp_path):
    """The collector is killed after it stored the batch and sent its answer's headers: the
    sink sees an answer cut short, which is a failure to retry like no answer at all."""
    answers = iter([CUT])

    with FakeCollector(lambda events: next(answers, (200, None))) as collector:
        sink = sink_to(collector.url, tmp_path, retries=2)
        sink.write(steps(0, 10))
    assert sorted(collector.stored) == list(range(10)) and collector.posts == 2
    assert sink.spooled == 0 and sink.sent == 10


def test_while_the_collector_is_down_writes_go_to_the_spool_until_the_backoff_has_passed(tmp_path, fake_time):
    """A collector that died does not make every flush re-read the spool and retry: after
    one failed attempt, writes only append to the spool until the backoff is over."""
    down = {"now": True}

    with FakeCollector(lambda events: DROP if down["now"] else (200, None)) as collector:
        collector.clock = fake_time
        sink = sink_to(collector.url, tmp_path, backoff_s=1.0)
        for i in range(50):                          # 50 flushes within one backoff
            sink.write(steps(10 * i, 10))
        assert collector.posts == 1 and fake_time.slept == 0
        assert sink.spooled == 500 and [e["seq"] for e in spool_lines(sink)[1:]] == list(range(500))
        down["now"] = False
        fake_time.advance(1.0)
        sink.write(steps(500, 10))
    assert collector.arrivals == list(range(510)) and collector.posts == 3     # the spool, then the new batch
    assert sink.spooled == 0 and not Path(sink.spool_path).exists()


def test_the_backoff_while_the_collector_stays_down_doubles_up_to_five_seconds(tmp_path, fake_time):
    with FakeCollector(lambda events: DROP) as collector:
        collector.clock = fake_time
        sink = sink_to(collector.url, tmp_path, backoff_s=1.0)
        start = fake_time.now
        for i in range(60):                          # a flush every half second for 30 s
            sink.write(steps(10 * i, 10))
            fake_time.advance(0.5)
    gaps = [b - a for a, b in zip(collector.post_times, collector.post_times[1:])]
    assert collector.post_times[0] == start
    assert gaps == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0]
    assert sink.spooled == 600


def test_a_collector_back_mid_run_gets_every_event_once_in_order_with_run_end_last(tmp_path, fake_time):
    """Down, up for one post, down again (killed mid-ingest), then up for good while the run
    goes on: the spool is sent before newer events, nothing is missing, the spool is gone."""
    script = iter([DROP, (200, None), DROP] + [DROP] * 3)

    with FakeCollector(lambda events: next(script, (200, None))) as collector:
        sink = sink_to(collector.url, tmp_path, batch_size=25, backoff_s=0.5)
        for i in range(40):
            sink.write(steps(10 * i, 10))
            fake_time.advance(0.5)
        end = {"seq": 400, "ts": T0 + 5, "kind": "run_end", "status": "finished"}
        sink.write([end])
        sink.close()
    assert collector.arrivals == list(range(401)) and collector.stored[400]["kind"] == "run_end"
    assert sink.spooled == 0 and not Path(sink.spool_path).exists()


def test_a_spool_batch_cut_short_by_a_second_outage_keeps_only_what_was_not_stored(tmp_path, fake_time):
    """Back from an outage, the collector refuses event 5 of the spool and dies again while
    the warning standing for it is posted: the spool keeps that warning and events 6-19 (not
    0-4, not the refused step), and the warning is made once."""
    script = iter([DROP, (400, {"detail": "refused", "index": 5}), (200, None), DROP])

    with FakeCollector(lambda events: next(script, (200, None))) as collector:
        sink = sink_to(collector.url, tmp_path, batch_size=20, backoff_s=1.0)
        sink.write(steps(0, 20))
        fake_time.advance(1.0)
        sink.write(steps(20, 5))
        assert sorted(collector.stored) == [0, 1, 2, 3, 4]
        kept = spool_lines(sink)[1:]
        assert [(e["seq"], e["kind"]) for e in kept[:2]] == [(5, "warning"), (6, "step")]
        assert [e["seq"] for e in kept] == list(range(5, 25)) and sink.spooled == 20
        fake_time.advance(2.0)
        sink.write(steps(25, 5))
    assert collector.arrivals == list(range(30)) and collector.stored[5]["kind"] == "warning"
    assert sink.rejected == 1 and not Path(sink.spool_path).exists()


def test_close_gives_up_after_drain_timeout_and_keeps_exactly_what_was_not_sent(tmp_path, fake_time, capsys):
    """The collector takes the first batch of the spool and dies for good: the runner still
    ends, after drain_timeout_s, and the spool holds the events it did not send."""
    script = iter([DROP, (200, None)])

    with FakeCollector(lambda events: next(script, DROP)) as collector:
        sink = sink_to(collector.url, tmp_path, batch_size=10, backoff_s=1.0, drain_timeout_s=30)
        sink.write(steps(0, 30))
        fake_time.advance(1.0)
        started = fake_time.now
        sink.close()
    assert sorted(collector.stored) == list(range(10))
    assert fake_time.now - started <= 30
    assert [e["seq"] for e in spool_lines(sink)[1:]] == list(range(10, 30))
    assert spool_lines(sink)[0]["kind"] == "run"
    err = capsys.readouterr().err
    assert "20 events kept in" in err and "replayscope import events" in err


def test_opening_sends_nothing_so_a_down_or_hung_collector_never_holds_up_the_programs_start(tmp_path):
    """open() runs in the program's own thread (the runner's start, a traced engine's first
    event): it makes no connection. The first write, on the emitter's thread, posts the run
    record and then its events."""
    import socket

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)
    hung.settimeout(0.5)
    try:
        url = f"http://127.0.0.1:{hung.getsockname()[1]}"
        sink = HttpSink(url, spool_path=str(tmp_path / "spool.jsonl"), retries=3, timeout_s=30)
        sink.open(run_record())
        with pytest.raises(socket.timeout):
            hung.accept()                       # nobody connected
    finally:
        hung.close()
    assert not (tmp_path / "spool.jsonl").exists()
    with FakeCollector() as collector:
        sink = sink_to(collector.url, tmp_path)
        assert collector.posts == 0
        sink.write(steps(0, 3))
        sink.close()
    assert sorted(collector.stored) == [0, 1, 2] and sink.sent == 3


def test_close_is_bounded_even_when_the_collector_accepts_but_never_answers(tmp_path):
    """A hung collector (accepting connections, never answering) does not hold the runner
    past drain_timeout_s for another retries x timeout_s."""
    import socket

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)                     # the kernel accepts; nobody ever answers
    try:
        url = f"http://127.0.0.1:{hung.getsockname()[1]}"
        sink = sink_to(url, tmp_path, retries=3, timeout_s=0.2, drain_timeout_s=1.0)
        sink.write(steps(0, 5))
        sink.timeout_s = 30.0           # from now on only the drain timeout can end close()
        started = time.monotonic()
        sink.close()
        elapsed = time.monotonic() - started
    finally:
        hung.close()
    assert elapsed < 10, f"close() took {elapsed:.1f}s with drain_timeout_s=1"
    assert sink.spooled == 5


def test_at_the_end_of_a_run_the_sink_waits_for_the_collector_to_come_back(tmp_path):
    from replayscope.collector.api import create_api
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    store = Store.open(f"sqlite:///{tmp_path}/back.db", upgrade=True)
    port = free_port()
    sink = HttpSink(f"http://127.0.0.1:{port}", spool_path=str(tmp_path / "spool.jsonl"), retries=1,
                    backoff_s=0.05, timeout_s=5, drain_timeout_s=60)
    emitter = Emitter(sink, run_record(), flush_interval_s=0.02, heartbeat_s=600).start()
    for _ in range(50):
        emitter.step("decode", "graph", 4, 4, 4, 0, None, 0.001)
    time.sleep(0.3)
    assert sink.spooled > 0

    def collector_back_later():
        time.sleep(1.5)
        server.run()

    import uvicorn
    server = uvicorn.Server(uvicorn.Config(create_api(store, Settings(run_services=False)), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=collector_back_later, daemon=True)
    thread.start()
    try:
        emitter.close()                       # returns once the spool is delivered
    finally:
        server.should_exit = True
        thread.join(10)
    from replayscope.collector.models import queries
    summary = queries.run_summary(store, "sink-1")
    store.dispose()
    assert summary["steps"] == 50 and summary["status"] == "finished"
    assert not (tmp_path / "spool.jsonl").exists()


def test_a_newer_record_of_the_run_is_posted_with_the_next_write_and_replaces_the_spools(tmp_path, fake_time):
    """``replayscope follow`` learns a run's device and headline ranks as the log goes on:
    the sink posts the newer record before its next events, and a spool left behind holds
    the newer one (what ``import events`` would post)."""
    down = {"now": False}
    with FakeCollector(lambda events: (503, {"detail": "down"}) if down["now"] else (200, None)) as collector:
        sink = sink_to(collector.url, tmp_path)
        sink.write(steps(0, 2))
        newer = dict(run_record(), device="cuda", config={"capture_count": 4})
        down["now"] = True
        sink.update_run(newer)
        sink.write(steps(2, 2))                      # the collector fails the events: spooled
        assert spool_lines(sink)[0]["device"] == "cuda"
        newest = dict(newer, backend="full")
        sink.update_run(newest)
        head, *spooled = spool_lines(sink)
        assert {k: v for k, v in head.items() if k != "kind"} == newest and [e["seq"] for e in spooled] == [2, 3]
        down["now"] = False
        fake_time.advance(60)
        sink.write(steps(4, 1))
    assert [r.get("device") for r in collector.records] == ["cpu", "cuda", "cuda"]
    assert collector.records[-1] == newest and sorted(collector.stored) == [0, 1, 2, 3, 4]


def test_a_spool_left_behind_imports_with_replayscope_import_events(tmp_path, capsys):
    from replayscope.app.cli import main
    from replayscope.collector.models import queries
    from replayscope.collector.store import Store

    sink = HttpSink(f"http://127.0.0.1:{free_port()}", spool_path=str(tmp_path / "spool.jsonl"), retries=1,
                    backoff_s=0.01, timeout_s=2, drain_timeout_s=0.2)
    emitter = Emitter(sink, run_record(), flush_interval_s=0.02, heartbeat_s=600).start()
    for i in range(30):
        emitter.step("decode", "eager" if i % 3 else "graph", 4, None if i % 3 else 4, 4, 0,
                     "batch_too_large" if i % 3 else None, 1e308 if i == 5 else 0.001)
    emitter.close()
    assert "re-send them with `replayscope import events" in capsys.readouterr().err
    url = f"sqlite:///{tmp_path}/import.db"
    assert main(["import", "events", str(tmp_path / "spool.jsonl"), "--db", url]) == 0
    store = Store(url)
    summary = queries.run_summary(store, "sink-1")
    warnings = queries.warnings(store, "sink-1")
    store.dispose()
    assert summary["steps"] == 29 and summary["status"] == "finished"
    assert [w["seq"] for w in warnings] == [5]


def test_a_refused_token_keeps_every_event_in_the_spool(tmp_path, capsys):
    from replayscope.collector.api import create_api
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    store = Store.open(f"sqlite:///{tmp_path}/t.db", upgrade=True)
    with serving(create_api(store, Settings(run_services=False, token="right"))) as url:
        sink = HttpSink(url, token="wrong", spool_path=str(tmp_path / "spool.jsonl"), retries=1,
                        backoff_s=0.01, drain_timeout_s=0.1)
        emitter = Emitter(sink, run_record(), flush_interval_s=0.02, heartbeat_s=600).start()
        for _ in range(20):
            emitter.step("decode", "graph", 4, 4, 4, 0, None, 0.001)
        emitter.close()
    store.dispose()
    err = capsys.readouterr().err
    assert err.count("HTTP 401") == 1, "told once, not at every write: " + err
    assert "21 events kept in" in err and "--token" in err
    lines = (tmp_path / "spool.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["kind"] == "run" and len(lines) == 1 + 21


def _sigint_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("sig, started", [(signal.SIGTERM, None), (signal.SIGINT, None),
                                          (signal.SIGINT, _sigint_ignored)],
                         ids=["SIGTERM", "SIGINT", "SIGINT-ignored-at-start"])
def test_sigterm_ends_the_run_interrupted_like_ctrl_c(tmp_path, sig, started):
    """SIGTERM and SIGINT end the run ``interrupted``, SIGINT also in a process started with it
    ignored (a script's background job inherits that; the demo stops its runner with SIGINT)."""
    events = tmp_path / "run.jsonl"
    # -X faulthandler: should it not end, SIGABRT makes it print where each of its threads is
    runner = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "replayscope", "run", "--backend", "static",
                               "--preset", "tiny", "--workload", "mixed", "--steps", "1000000", "--events", str(events),
                               "--quiet"],
                              cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, preexec_fn=started)
    try:
        deadline = time.monotonic() + 120
        while not (events.exists() and events.read_text().count('"kind": "step"') >= 20):
            assert runner.poll() is None and time.monotonic() < deadline, "the runner did not start stepping"
            time.sleep(0.1)
        runner.send_signal(sig)
        try:
            _, err = runner.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            runner.send_signal(signal.SIGABRT)
            _, stacks = runner.communicate(timeout=30)
            pytest.fail(f"the runner did not end within 60 s of {sig.name}; its threads:\n{stacks}")
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert runner.returncode == 130, err
    last = json.loads(events.read_text().splitlines()[-1])
    assert (last["kind"], last["status"]) == ("run_end", "interrupted")
