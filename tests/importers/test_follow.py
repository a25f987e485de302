"""``replayscope follow``: a log another process writes, rotates and truncates; a restart
that resumes at the saved offset; standard input; and alerts firing in a running
collector while the log grows."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import textwrap
import time
import urllib.request
from datetime import datetime, timezone

import pytest

from replayscope.collector.models import queries
from replayscope.app.cli import imports as cli
from replayscope.collector.importers import ENGINE_SPECS
from replayscope.collector.importers.follow import follow
from replayscope.collector.store import Store

START = [
    "[2025-05-05 10:00:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', device='cuda', "
    "tp_size=1, disable_cuda_graph=False, cuda_graph_max_bs=8, decode_log_interval=40)",
    "[2025-05-05 10:00:01 TP0] Load weight begin. avail mem=78.50 GB",
    "[2025-05-05 10:00:06 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.50 GB, "
    "mem usage=15.00 GB.",
    "[2025-05-05 10:00:07 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=12.00 GB",
    "[2025-05-05 10:00:07 TP0] Capture cuda graph bs [1, 2, 4, 8]",
    "[2025-05-05 10:00:11 TP0] Capture cuda graph end. Time elapsed: 4.00 s. mem usage=0.32 GB. avail mem=11.68 GB.",
    "[2025-05-05 10:00:12] The server is fired up and ready to roll!",
]


def decode(second: int, running: int, graph: bool) -> str:
    return (f"[2025-05-05 10:01:{second:02d} TP0] Decode batch. #running-req: {running}, #token: 400, "
            f"token usage: 0.01, cuda graph: {graph}, gen throughput (token/s): 300.00, #queue-req: 0")


def now_line(line: str) -> str:
    """The same line stamped now (alerts look at the last minutes of wall-clock time)."""
    from datetime import datetime, timezone

    return "[" + datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S") + line[line.index(" ", 12):]


def db_args(tmp_path, path, **kw) -> argparse.Namespace:
    return argparse.Namespace(engine="sglang", path=str(path), db=f"sqlite:///{tmp_path}/follow.db", collector=None,
                              token=None, state=kw.get("state"), interval=0.02, idle_exit=kw.get("idle_exit", 1.5))


def test_follow_reads_a_file_another_process_appends_to_and_rotates(tmp_path):
    log = tmp_path / "sglang.log"
    log.write_text("")
    state = tmp_path / "state.json"
    # the writer starts once the follower has (it saves its state after the first read) and rotates
    # once the follower has read the whole file: a busy machine must not make it miss a file that
    # was rotated away before it looked (a follower cannot read what it never saw)
    writer = textwrap.dedent(f"""
        import os, sys, time, json
        path, state = {str(log)!r}, {str(state)!r}
        start, first, second = json.loads(sys.argv[1])
        def read_up_to(size):
            for _ in range(3000):
                try:
                    if json.load(open(state))["offset"] >= size:
                        return
                except (OSError, ValueError, KeyError):
                    pass
                time.sleep(0.01)
        read_up_to(0)
        with open(path, "a") as f:
            for line in start + first:
                f.write(line + "\\n"); f.flush(); time.sleep(0.02)
        read_up_to(os.path.getsize(path))
        os.rename(path, path + ".1")                    # logrotate: move, then a new file
        with open(path, "w") as f:
            for line in second:
                f.write(line + "\\n"); f.flush(); time.sleep(0.02)
    """)
    first = [decode(s, 4, True) for s in range(10)]
    second = [decode(10 + s, 12, False) for s in range(5)]
    proc = subprocess.Popen([sys.executable, "-c", writer, json.dumps([START, first, second])])
    try:
        out = io.StringIO()
        assert cli.run_follow(db_args(tmp_path, log, state=str(state)), out=out) == 0
    finally:
        proc.wait(10)
    store = Store.open(f"sqlite:///{tmp_path}/follow.db")
    (run,) = queries.list_runs(store)
    assert run["source"] == "sglang-log"
    assert run["modes"] == {"graph": 10, "padded": 0, "eager": 5, "unknown": 0}   # lines before and after the rotation
    assert run["status"] == "finished"
    assert dict(queries.run_summary(store, run["run_id"])["reasons"]) == {"batch_too_large": 5}
    assert run["capture_total_s"] == 4.0
    store.dispose()


def test_truncation_in_place_reads_the_file_again_from_its_start(tmp_path):
    log = tmp_path / "sglang.log"
    log.write_text("\n".join(START + [decode(s, 2, True) for s in range(3)]) + "\n")
    reads = {"n": 0}

    def sleep(_seconds):
        reads["n"] += 1
        if reads["n"] == 2:
            log.write_text("\n".join([decode(30 + s, 2, True) for s in range(2)]) + "\n")   # copytruncate

    store_url = f"sqlite:///{tmp_path}/t.db"
    sink = cli.DbSink(store_url)
    live = follow(ENGINE_SPECS["sglang"], str(log), lambda record: cli._RunWriter(sink, record), state_path=None,
                  interval=0.01, idle_exit=0.3, sleep=sleep)
    sink.close()
    (run,) = queries.list_runs(Store.open(store_url))
    assert run["steps"] == 5
    assert len(live.runs_sent) == 1


def test_a_restart_resumes_at_the_saved_offset_and_goes_on_with_the_same_run(tmp_path):
    log = tmp_path / "sglang.log"
    state = tmp_path / "state.json"
    log.write_text("\n".join(START + [decode(s, 2, True) for s in range(3)]) + "\n")
    store_url = f"sqlite:///{tmp_path}/r.db"

    def interrupted(_seconds):
        raise KeyboardInterrupt          # Ctrl-C while the server still runs

    sink = cli.DbSink(store_url)
    first = follow(ENGINE_SPECS["sglang"], str(log), lambda r: cli._RunWriter(sink, r), state_path=str(state),
                   interval=0.01, sleep=interrupted)
    saved = json.loads(state.read_text())
    assert saved["offset"] == log.stat().st_size and saved["run_id"] == first.runs_sent[0]
    with log.open("a") as f:
        f.write("\n".join(decode(20 + s, 16, False) for s in range(2)) + "\n")
    second = follow(ENGINE_SPECS["sglang"], str(log), lambda r: cli._RunWriter(sink, r), state_path=str(state),
                    interval=0.01, idle_exit=0.2)
    sink.close()
    assert second.runs_sent == first.runs_sent          # the same run, not a new one
    store = Store.open(store_url)
    (run,) = queries.list_runs(store)
    assert run["modes"] == {"graph": 3, "padded": 0, "eager": 2, "unknown": 0}
    assert run["status"] == "finished"


class ListSink:
    """Collects what follow sends: (run_id, record) when a run is opened, then its events."""

    def __init__(self, sent: list):
        self.sent = sent

    def __call__(self, record):
        self.sent.append(("record", record))
        return self

    def write(self, events):
        self.sent.extend(("event", e) for e in events)

    def update_run(self, record):
        self.sent.append(("update", record))

    def close(self):
        pass


def interrupted(_seconds):
    raise KeyboardInterrupt          # Ctrl-C while the server still runs


def test_a_restarted_follow_keeps_the_runs_context_and_sends_no_event_twice(tmp_path):
    log = tmp_path / "sglang.log"
    state = tmp_path / "state.json"
    log.write_text("\n".join(START + [decode(s, 3, True) for s in range(2)]) + "\n")
    sent: list = []
    follow(ENGINE_SPECS["sglang"], str(log), ListSink(sent), state_path=str(state), interval=0.01, sleep=interrupted)
    with log.open("a") as f:      # the server goes on while follow is down; a line is half written
        f.write("\n".join([decode(20, 16, False), decode(21, 3, True)]) + "\n" + decode(22, 5, True)[:40])
    follow(ENGINE_SPECS["sglang"], str(log), ListSink(sent), state_path=str(state), interval=0.01, sleep=interrupted)
    with log.open("a") as f:      # the rest of the half-written line
        f.write(decode(22, 5, True)[40:] + "\n")
    follow(ENGINE_SPECS["sglang"], str(log), ListSink(sent), state_path=str(state), interval=0.01, idle_exit=0.2)
    records = [r for what, r in sent if what == "record"]
    events = [e for what, e in sent if what == "event"]
    assert len({r["run_id"] for r in records}) == 1 and all(r["partial"] is False for r in records)
    assert [e["seq"] for e in events] == list(range(len(events)))          # nothing sent twice, nothing lost
    assert [e["phase"] for e in events if e["kind"] == "phase"] == ["load_weights", "capture"]
    # the capture sizes [1, 2, 4, 8] read before the restart still decide after it
    steps = [(e["raw_bs"], e["mode"], e.get("graph_bs"), e["reason"], e.get("evidence"))
             for e in events if e["kind"] == "step"]
    assert steps == [
        (3, "padded", 4, None, None), (3, "padded", 4, None, None),
        (16, "eager", None, "batch_too_large", "#running-req: 16 is above the largest captured size (8)"),
        (3, "padded", 4, None, None),
        (5, "padded", 8, None, None),
    ]
    assert events[-1]["kind"] == "run_end" and events[-1]["status"] == "finished"


def test_a_restart_keeps_the_year_it_inferred_for_stamps_without_one(tmp_path):
    log = tmp_path / "vllm.log"
    state = tmp_path / "state.json"
    log.write_text(      # the year comes from the dated line, which only the first follow reads
        "2024-08-19 07:50:11,692 - INFO - autotuner.py:262 - flashinfer.jit: [Autotuner]: "
        "Autotuning process starts ...\n"
        "INFO 08-19 07:50:12 api_server.py:339] vLLM API server version 0.5.4\n"
        "INFO 08-19 07:51:03 model_runner.py:732] Loading model weights took 2.3463 GB\n"
        "INFO 08-19 07:51:40 model_runner.py:1225] Graph capturing finished in 17 secs.\n")
    sent: list = []
    follow(ENGINE_SPECS["vllm"], str(log), ListSink(sent), state_path=str(state), interval=0.01, sleep=interrupted)
    with log.open("a") as f:      # no version line after the restart: the year must come from before it
        f.write("INFO:     Application startup complete.\n"
                "ERROR 08-19 09:00:00 engine.py:157] Engine loop has died\n")
    follow(ENGINE_SPECS["vllm"], str(log), ListSink(sent), state_path=str(state), interval=0.01, idle_exit=0.2)
    events = [e for what, e in sent if what == "event"]
    end = events[-1]
    assert end["kind"] == "run_end" and end["status"] == "failed"
    assert end["ts"] == datetime(2024, 8, 19, 9, 0, tzinfo=timezone.utc).timestamp()   # the dated line's year


def test_a_state_file_from_another_version_is_used_for_its_offset_only(tmp_path):
    log = tmp_path / "sglang.log"
    state = tmp_path / "state.json"
    log.write_text("\n".join(START) + "\n")
    sent: list = []
    follow(ENGINE_SPECS["sglang"], str(log), ListSink(sent), state_path=str(state), interval=0.01, sleep=interrupted)
    saved = json.loads(state.read_text())
    saved["parser"] = "not a parser state"
    state.write_text(json.dumps(saved))
    with log.open("a") as f:
        f.write(decode(1, 16, False) + "\n")
    messages: list[str] = []
    follow(ENGINE_SPECS["sglang"], str(log), ListSink(sent), state_path=str(state), interval=0.01, idle_exit=0.2,
           log=messages.append)
    assert any("saved parser state cannot be used" in m for m in messages)
    steps = [e for what, e in sent if what == "event" and e["kind"] == "step"]
    assert [(e["raw_bs"], e["reason"]) for e in steps] == [(16, "unknown")]     # the context is gone, said so
    assert len({r["run_id"] for what, r in sent if what == "record"}) == 1


def test_standard_input_is_followed_to_its_end():
    text = "\n".join(START + [decode(s, 3, True) for s in range(4)]) + "\n"
    sent: list[dict] = []

    class Sink:
        def __init__(self, record):
            sent.append(record)
            self.events = []

        def write(self, events):
            sent.extend(events)

        def update_run(self, record):
            pass

        def close(self):
            pass

    follow(ENGINE_SPECS["sglang"], "-", Sink, state_path=None, stdin=io.BytesIO(text.encode()))
    record, events = sent[0], sent[1:]
    assert record["source"] == "sglang-log" and record["partial"] is False
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert [e["mode"] for e in events if e["kind"] == "step"] == ["padded"] * 4
    assert events[-1]["kind"] == "run_end" and events[-1]["status"] == "finished"


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def test_an_alert_fires_in_a_running_collector_while_a_followed_log_grows(tmp_path):
    from replayscope.app.server import create_server
    from replayscope.collector.settings import Settings
    from replayscope.contract.http import post_json
    from tests.live_server import serving

    store = Store.open(f"sqlite:///{tmp_path}/live.db", upgrade=True)
    log = tmp_path / "sglang.log"
    log.write_text("\n".join(now_line(line) for line in START) + "\n")
    settings = Settings(token="s3cret", evaluate_every_s=0.1)
    with serving(create_server(store, settings, dashboard=False)) as url:
        post_json(url + "/v1/alert-rules", {"name": "eager", "threshold": 0.5, "window_s": 600, "min_steps": 5,
                                           "stage": "decode", "for_s": 0}, token="s3cret")
        grown = {"n": 0}

        def sleep(seconds):
            grown["n"] += 1
            if grown["n"] <= 8:
                with log.open("a") as f:
                    f.write(now_line(decode(grown["n"], 32, False)) + "\n")   # 32 > 8: eager, batch_too_large
            time.sleep(0.05)

        args = argparse.Namespace(collector=url, token="s3cret", db=None)
        open_sink, close, _ = cli.follow_sinks(args)
        deadline = time.monotonic() + 15
        fired = []

        def watch(seconds):
            sleep(seconds)
            if grown["n"] > 8 and not fired and time.monotonic() < deadline:
                fired.extend(a for a in _get(url + "/v1/alerts") if a["status"] == "firing")
                if not fired:
                    return
            if fired or time.monotonic() > deadline:
                raise KeyboardInterrupt   # stop following; the server keeps running

        follow(ENGINE_SPECS["sglang"], str(log), open_sink, state_path=None, interval=0.05, sleep=watch)
        close()
        assert fired, "no alert fired while the log grew"
        assert fired[0]["reason"] == "batch_too_large"
        (run,) = queries.list_runs(store)
        assert run["status"] == "running"       # the server's log goes on: the run is not ended
    store.dispose()


@pytest.mark.parametrize("bad", ["missing.log"])
def test_a_missing_file_is_one_clear_error(tmp_path, bad):
    from replayscope.contract.errors import ReplayscopeError

    with pytest.raises(ReplayscopeError, match="no such file"):
        cli.run_follow(db_args(tmp_path, tmp_path / bad), out=io.StringIO())


def test_following_the_other_engines_log_is_refused_before_anything_is_sent(tmp_path):
    from replayscope.contract.errors import ReplayscopeError

    log = tmp_path / "server.log"
    log.write_text("\n".join(START) + "\n")            # SGLang's lines
    sent: list = []
    with pytest.raises(ReplayscopeError, match="looks like a SGLang log"):
        follow(ENGINE_SPECS["vllm"], str(log), ListSink(sent), state_path=None, interval=0.01, idle_exit=0.1)
    assert sent == []

