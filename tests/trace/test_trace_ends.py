"""``replayscope trace`` ends every run, whatever ends the program (issue 36 item 7, issue 33):
SIGINT or SIGTERM to trace's PID or its group, SIGKILL of trace itself, ``os._exit``, a process
SIGKILLed by itself or by its parent (vLLM's API server kills its engine core that way)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.trace.test_trace_command import ENV, PROGRAMS, REPO, read_run, steps_of, trace

PROGRAM = str(PROGRAMS / "cpu_signals.py")


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")


def steps_written(path) -> int:
    try:
        return path.read_text(encoding="utf-8").count('"kind": "step"')
    except FileNotFoundError:
        return 0


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def start_trace(events, *program, sigint_ignored=False):
    """trace in a session of its own (its group is not the test's); started with SIGINT ignored
    as a script's background job is, when asked."""
    def ignore_sigint():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return subprocess.Popen(["replayscope", "trace", "--events", str(events), "--step", "__main__:decode_step",
                             "--", sys.executable, PROGRAM, *program], cwd=REPO, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=ignore_sigint if sigint_ignored else None)


def program_pid(events) -> int:
    run, _ = read_run(events)
    return run["config"]["trace"]["pid"]


@pytest.mark.parametrize("signum, to, sigint_ignored", [
    (signal.SIGINT, "pid", False), (signal.SIGTERM, "pid", False), (signal.SIGINT, "group", False),
    (signal.SIGTERM, "group", False), (signal.SIGINT, "pid", True)],
    ids=["SIGINT-pid", "SIGTERM-pid", "SIGINT-group", "SIGTERM-group", "SIGINT-pid-started-ignoring-it"])
def test_a_signal_to_trace_ends_the_program_and_its_run_interrupted_with_its_events(tmp_path, signum, to,
                                                                                      sigint_ignored):
    events = tmp_path / "trace.jsonl"
    traced = start_trace(events, "loop", sigint_ignored=sigint_ignored)
    try:
        wait_for(lambda: steps_written(events) >= 3, 120, "the program's first steps")
        (os.killpg if to == "group" else os.kill)(traced.pid, signum)
        _out, err = traced.communicate(timeout=60)
    finally:
        if traced.poll() is None:
            os.killpg(traced.pid, signal.SIGKILL)
            traced.wait()
    assert traced.returncode == 128 + signum, err
    _run, run_events = read_run(events)
    end = run_events[-1]
    assert (end["kind"], end["status"]) == ("run_end", "interrupted")
    assert len(steps_of(run_events)) >= 3
    assert "ended without a summary" not in err


def test_ctrl_c_in_the_terminal_reaches_the_program_once_and_so_does_a_sigint_to_traces_group(tmp_path):
    """On a terminal, Ctrl-C reaches the program from the terminal: trace does not pass it on
    again. Off a terminal the program has its own group: a SIGINT to trace's group reaches it
    through trace, once."""
    import fcntl
    import pty
    import termios

    counted = tmp_path / "sigints"
    master, slave = pty.openpty()

    def take_the_terminal():            # a session of its own whose controlling terminal is the pty
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    traced = subprocess.Popen(["replayscope", "trace", "--events", str(tmp_path / "tty.jsonl"), "--step",
                               "__main__:decode_step", "--", sys.executable, PROGRAM, "count_sigint", str(counted)],
                              cwd=REPO, env=ENV, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                              preexec_fn=take_the_terminal)
    os.close(slave)
    try:
        wait_for(lambda: steps_written(tmp_path / "tty.jsonl") >= 3, 120, "the program's first steps")
        os.write(master, b"\x03")        # Ctrl-C: the terminal signals its foreground group
        traced.wait(60)
    finally:
        if traced.poll() is None:
            os.killpg(traced.pid, signal.SIGKILL)
            traced.wait()
        os.close(master)
    assert json.loads(counted.read_text()) == {"senders": ["kernel"], "own_group": False}

    counted.unlink()
    events = tmp_path / "group.jsonl"
    traced = start_trace(events, "count_sigint", str(counted))
    try:
        wait_for(lambda: steps_written(events) >= 3, 120, "the program's first steps")
        os.killpg(traced.pid, signal.SIGINT)
        traced.communicate(timeout=60)
    finally:
        if traced.poll() is None:
            os.killpg(traced.pid, signal.SIGKILL)
            traced.wait()
    assert json.loads(counted.read_text()) == {"senders": ["parent"], "own_group": True}


def test_sigkill_of_trace_ends_the_program_and_its_run(tmp_path):
    events = tmp_path / "trace.jsonl"
    traced = start_trace(events, "loop")
    pid = None
    try:
        wait_for(lambda: steps_written(events) >= 3, 120, "the program's first steps")
        pid = program_pid(events)
        traced.send_signal(signal.SIGKILL)
        traced.wait(10)
        wait_for(lambda: not alive(pid), 20, "the program to end once trace was killed")
    finally:
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)
        if traced.poll() is None:
            traced.kill()
            traced.wait()
    _run, run_events = read_run(events)
    assert (run_events[-1]["kind"], run_events[-1]["status"]) == ("run_end", "interrupted")
    assert len(steps_of(run_events)) >= 3


def test_a_program_that_leaves_through_os_exit_ends_its_run_with_every_event(tmp_path):
    events = tmp_path / "trace.jsonl"
    result = trace("--events", str(events), "--step", "__main__:decode_step", "--", sys.executable, PROGRAM,
                   "os_exit", "3")
    assert result.returncode == 3, result.stderr
    _run, run_events = read_run(events)
    assert [s["raw_bs"] for s in steps_of(run_events)] == [3, 5, 2]
    end = run_events[-1]
    assert (end["kind"], end["status"]) == ("run_end", "failed")
    assert end["error"] == "the process left through os._exit(3)"
    assert "3 steps" in result.stderr


def test_a_program_killed_by_sigkill_gets_its_run_ended_by_trace(tmp_path):
    events = tmp_path / "trace.jsonl"
    result = trace("--events", str(events), "--step", "__main__:decode_step", "--", sys.executable, PROGRAM,
                   "self_kill", str(events))
    assert result.returncode == 128 + signal.SIGKILL, result.stderr
    _run, run_events = read_run(events)
    assert [s["raw_bs"] for s in steps_of(run_events)] == [3, 5, 2]
    end = run_events[-1]
    assert (end["kind"], end["status"]) == ("run_end", "interrupted")
    assert end["seq"] == run_events[-2]["seq"] + 1
    assert "killed by SIGKILL" in end["error"] and "replayscope trace ended its run" in end["error"]
    assert "ended without a summary" not in result.stderr
    assert "killed by SIGKILL" in result.stderr


def test_a_program_killed_right_after_its_own_signal_handler_started_keeps_every_step(tmp_path):
    """vLLM's engine core handles Ctrl-C's SIGINT itself and is SIGKILLed by its API server moments
    later: the steps its emitter had not flushed yet are written before the program's handler runs
    (a real vllm serve lost 41 of 92 steps that way)."""
    events = tmp_path / "trace.jsonl"
    result = trace("--events", str(events), "--step", "__main__:decode_step", "--", sys.executable, PROGRAM,
                   "handler_killed", "40")
    assert result.returncode == 128 + signal.SIGKILL, result.stderr
    assert "own handler: True" in result.stdout
    _run, run_events = read_run(events)
    assert len(steps_of(run_events)) == 40
    assert (run_events[-1]["kind"], run_events[-1]["status"]) == ("run_end", "interrupted")


def test_a_child_sigkilled_by_its_parent_gets_its_run_ended_interrupted_with_its_events(tmp_path):
    """vLLM's shape: its API server SIGKILLs the engine core at shutdown (``force killing
    remaining processes``); the engine core's run had no end and no summary."""
    events = tmp_path / "trace.jsonl"
    result = trace("--events", str(events), "--step", "__main__:decode_step", "--", sys.executable, PROGRAM,
                   "kill_child", str(events))
    assert result.returncode == 0, result.stderr
    assert f"child exit code {-signal.SIGKILL}" in result.stdout
    [child_file] = tmp_path.glob("trace-pid*.jsonl")
    _run, child_events = read_run(child_file)
    assert [s["raw_bs"] for s in steps_of(child_events)] == [3, 5, 2]
    end = child_events[-1]
    assert (end["kind"], end["status"]) == ("run_end", "interrupted")
    assert "replayscope trace ended its run" in end["error"]
    _run, parent_events = read_run(events)
    assert (parent_events[-1]["kind"], parent_events[-1]["status"]) == ("run_end", "finished")
    assert "ended without a summary" not in result.stderr
    # the summary counts what the child wrote, as for a process that ended its own run
    assert "3 steps: graph 0, padded 0, eager 3 (eager: cpu_device 3); 0 captures; interrupted: the process " \
           "disappeared" in result.stderr


def test_a_child_its_parent_sigkills_after_ctrl_c_ends_interrupted_saying_the_command_got_sigint(tmp_path):
    """vLLM's and SGLang's servers at Ctrl-C: the API server (launcher) SIGKILLs its engine process
    as it shuts down. The trace saw the SIGINT come: the run's end says so, not only 'killed'."""
    events = tmp_path / "trace.jsonl"
    traced = start_trace(events, "kill_child_on_sigint")
    try:
        wait_for(lambda: [p for p in tmp_path.glob("trace-pid*.jsonl") if steps_written(p) == 3], 120,
                 "the child's three steps")
        os.kill(traced.pid, signal.SIGINT)
        _out, err = traced.communicate(timeout=60)
    finally:
        if traced.poll() is None:
            os.killpg(traced.pid, signal.SIGKILL)
            traced.wait()
    [child_file] = tmp_path.glob("trace-pid*.jsonl")
    _run, child_events = read_run(child_file)
    end = child_events[-1]
    assert (end["kind"], end["status"]) == ("run_end", "interrupted")
    assert end["error"].startswith("the process disappeared without ending its run after the command got "
                                   "SIGINT: killed while the command shut down (e.g. SIGKILLed by its parent")
    assert "replayscope trace ended its run" in end["error"] and "after the command got SIGINT" in err


def test_to_a_collector_a_child_sigkilled_by_its_parent_is_stored_interrupted_with_its_steps(tmp_path):
    from replayscope.collector.models import queries
    from replayscope.collector.store import Store
    from tests.e2e.conftest import ThreadCollector
    from tests.live_server import free_port

    store = Store.open(f"sqlite:///{tmp_path}/collector.db", upgrade=True)
    server = ThreadCollector(store, free_port()).start()
    try:
        result = trace("--collector", server.url, "--step", "__main__:decode_step", "--",
                       sys.executable, PROGRAM, "kill_child", server.url, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        runs = {r["steps"]: r for r in queries.list_runs(store) if r["source"] == "trace"}
        assert sorted(runs) == [1, 3]
        assert runs[1]["status"] == "finished"
        child = queries.run_summary(store, runs[3]["run_id"])
        assert child["status"] == "interrupted"
        assert "killed" in child["error"] and "replayscope trace ended its run" in child["error"]
        assert "ended without a summary" not in result.stderr
    finally:
        server.stop()
        store.dispose()


def test_to_a_collector_the_summary_counts_a_child_sigkilled_by_its_parent_from_what_the_collector_stored(
        tmp_path):
    """With no events file to count, the summary line of the run trace ended gives the counts the
    collector stored (asked with the trace's token, which it never prints)."""
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store
    from tests.e2e.conftest import ThreadCollector
    from tests.live_server import free_port

    token = "s3cret-trace-token"
    store = Store.open(f"sqlite:///{tmp_path}/collector.db", upgrade=True)
    server = ThreadCollector(store, free_port(), Settings(run_services=False, token=token)).start()
    try:
        result = trace("--collector", server.url, "--token", token, "--step", "__main__:decode_step", "--",
                       sys.executable, PROGRAM, "kill_child", server.url, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "3 steps: graph 0, padded 0, eager 3 (eager: cpu_device 3); 0 captures; interrupted: the " \
               "process disappeared" in result.stderr
        assert "1 step: graph 0, padded 0, eager 1 (eager: cpu_device 1); 0 captures" in result.stderr
        assert token not in result.stderr and token not in result.stdout
    finally:
        server.stop()
        store.dispose()


ENGINE_PROGRAM = str(PROGRAMS / "engine_shutdown.py")


@pytest.mark.parametrize("how, exit_code, child_status", [
    ("clean", 0, "finished"), ("error", 1, "interrupted"), ("interrupt", 128 + signal.SIGINT, "interrupted")])
def test_a_child_an_engines_own_shutdown_stops_ends_finished_only_when_the_program_ends_normally(
        tmp_path, how, exit_code, child_status):
    """SGLang's ``Engine.shutdown`` SIGKILLs its scheduler when the program is done with the engine
    (called by the program, ``with``'s exit or ``atexit``): the scheduler's run ends ``finished``
    with a warning saying how; stopped early (an exception in flight, Ctrl-C) it is ``interrupted``."""
    events = tmp_path / "trace.jsonl"
    result = trace("--events", str(events), "--step", "__main__:decode_step", "--", sys.executable,
                   ENGINE_PROGRAM, how, str(events), str(tmp_path / "standin"))
    assert result.returncode == exit_code, result.stderr
    [child_file] = tmp_path.glob("trace-pid*.jsonl")
    _run, child_events = read_run(child_file)
    assert [s["raw_bs"] for s in steps_of(child_events)] == [3, 5, 2]
    end = child_events[-1]
    assert (end["kind"], end["status"]) == ("run_end", child_status)
    warnings = [e for e in child_events if e["kind"] == "warning" and e.get("code") == "stopped_by_parent"]
    if child_status == "finished":
        assert end.get("error") is None
        [warning] = warnings
        assert "stopped by its parent process" in warning["message"]
        assert "SGLang's Engine.shutdown stops its scheduler with SIGKILL" in warning["message"]
        assert "3 steps: graph 0, padded 0, eager 3 (eager: cpu_device 3); 0 captures; finished: stopped by " \
               "its parent process" in result.stderr
    else:
        assert warnings == [] and "replayscope trace ended its run" in end["error"]
        assert "disappeared" in end["error"]
