"""The observer's threads and writer process keep off the CPUs a program pinned its loop to
(``replayscope.runner.affinity``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from replayscope.runner import affinity

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin a loop to one")


@pytest.fixture
def start(monkeypatch):
    """The process's CPUs at start set to ``cpus``, nothing chosen yet."""
    def set_start(cpus):
        monkeypatch.setattr(affinity, "_START", frozenset(cpus))
        monkeypatch.setattr(affinity, "_CHOSEN", set())
    return set_start


def test_a_thread_that_inherited_a_narrowed_affinity_gets_the_other_cpus(start):
    start({0, 1, 2, 3})
    assert affinity.cpus_for(frozenset({3})) == frozenset({0, 1, 2})
    # what one of ours was given is left alone (a process started from a thread that moved already)
    assert affinity.cpus_for(frozenset({0, 1, 2})) is None


def test_nothing_changes_where_the_affinity_was_not_narrowed_or_nothing_else_is_left(start):
    start({0, 1, 2, 3})
    assert affinity.cpus_for(frozenset({0, 1, 2, 3})) is None
    assert affinity.cpus_for(frozenset({4, 5})) is None          # not within the start: not ours to judge
    start({2})
    assert affinity.cpus_for(frozenset({2})) is None
    start({0, 1})
    assert affinity.cpus_for(frozenset()) == frozenset({0, 1})


def test_no_affinity_calls_means_nothing_changes(monkeypatch):
    monkeypatch.setattr(affinity, "_START", None)
    assert affinity.cpus_for(frozenset({1})) is None
    assert affinity.keep_off_program_cpus() is None


@two_cpus
def test_the_emitter_thread_and_its_writer_process_leave_the_cpu_the_program_pinned_its_thread_to(tmp_path):
    """A library user's program pins its thread, then starts an emitter writing an events file
    (through its writer process): the emitter's thread and the writer run on the other CPUs."""
    program = textwrap.dedent(f"""
        import json, os, time
        from replayscope.runner.emitter import Emitter
        from replayscope.contract.sinks import JsonlSink
        loop_cpu = max(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {{loop_cpu}})
        emitter = Emitter(JsonlSink({str(tmp_path / "events.jsonl")!r}), {{"run_id": "pinned", "name": "pinned",
            "source": "runner", "started_at": time.time(), "backend": "cpu", "model": "m", "device": "cpu",
            "config": {{}}}}).start()
        for i in range(20):
            emitter.step("decode", "eager", 1, None, 1, 0, "cpu_device", None)
        time.sleep(0.5)
        thread_cpus = sorted(os.sched_getaffinity(emitter._thread.native_id))
        writer_cpus = sorted(os.sched_getaffinity(emitter.writer_pid))
        emitter.close()
        print(json.dumps({{"loop": loop_cpu, "main": sorted(os.sched_getaffinity(0)), "thread": thread_cpus,
                           "writer": writer_cpus}}))
    """)
    result = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": REPO})
    assert result.returncode == 0, result.stderr
    placed = json.loads(result.stdout.strip().splitlines()[-1])
    others = sorted(os.sched_getaffinity(0) - {placed["loop"]})
    assert placed["main"] == [placed["loop"]]                   # the program's own pinning is untouched
    assert placed["thread"] == placed["writer"] == others
    kinds = [json.loads(line).get("kind") for line in open(tmp_path / "events.jsonl")][1:]
    assert kinds.count("step") == 20                             # every step written by the moved writer
