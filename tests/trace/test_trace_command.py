"""``replayscope trace`` end to end, the way a user runs it: the installed command around real
CPU programs (one with a multiprocessing worker), to an events file and to a live collector.
On CPU every step runs eager, and the run says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from replayscope.contract.events_file import read_events_file

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
    p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}


def trace(*argv, cwd=REPO, env=None, timeout=240):
    return subprocess.run(["replayscope", "trace", *argv], cwd=cwd, env=env or ENV, capture_output=True,
                          text=True, timeout=timeout)


def read_run(path) -> tuple[dict, list[dict]]:
    run, events, _ = read_events_file(path)             # every line checked against the wire contract
    return run, events


def steps_of(events):
    return [e for e in events if e["kind"] == "step"]


@pytest.mark.parametrize("start_method", ["spawn", "fork", "forkserver"])
def test_a_cpu_program_and_its_multiprocessing_worker_are_each_a_run_with_eager_steps_and_their_cause(
        tmp_path, start_method):
    events = tmp_path / "trace.jsonl"
    result = trace("--events", str(events), "--name", "cpu decode", "--step", "__main__:decode_step", "--",
                   sys.executable, str(PROGRAMS / "cpu_decode.py"), start_method)
    assert result.returncode == 0, result.stderr
    [worker_file] = tmp_path.glob("trace-pid*.jsonl")
    main_run, main_events = read_run(events)
    worker_run, worker_events = read_run(worker_file)

    assert [s["raw_bs"] for s in steps_of(main_events)] == [3, 5, 2]
    assert [s["raw_bs"] for s in steps_of(worker_events)] == [1, 4, 6, 7]
    for step in steps_of(main_events) + steps_of(worker_events):
        assert (step["mode"], step["reason"]) == ("eager", "cpu_device")
        assert step["evidence"] == "CUDA is not available in this process (torch.cuda.is_available() is False)"
    for run, path in ((main_run, events), (worker_run, worker_file)):
        assert run["source"] == "trace" and run["name"].startswith("cpu decode [pid ")
    assert main_run["config"]["trace"]["trace_id"] == worker_run["config"]["trace"]["trace_id"]
    assert main_run["config"]["trace"]["step_timing"] == {"clock": "host", "every": 1}    # no CUDA: every step
    assert all(s["duration_s"] is not None for s in steps_of(main_events) + steps_of(worker_events))
    if start_method != "forkserver":     # a forkserver's workers are the fork server's children
        assert worker_run["config"]["trace"]["ppid"] == main_run["config"]["trace"]["pid"]
    assert main_run["run_id"] != worker_run["run_id"]
    assert main_events[-1]["kind"] == worker_events[-1]["kind"] == "run_end"
    assert main_events[-1]["status"] == worker_events[-1]["status"] == "finished"
    assert "2 traced processes" in result.stderr and "eager: cpu_device 4" in result.stderr


def test_a_step_function_in_an_imported_module_is_traced(tmp_path):
    events = tmp_path / "trace.jsonl"
    result = trace("--events", str(events), "--step", "tests.trace.programs.cpu_engine:Engine.step", "--",
                   sys.executable, "-c", "from tests.trace.programs.cpu_engine import main; main()")
    assert result.returncode == 0, result.stderr
    run, run_events = read_run(events)
    assert [(s["raw_bs"], s["mode"], s["reason"]) for s in steps_of(run_events)] == \
        [(1, "eager", "cpu_device"), (2, "eager", "cpu_device"), (4, "eager", "cpu_device")]
    assert run["config"]["trace"]["step"] == "tests.trace.programs.cpu_engine:Engine.step"
    assert "error" not in result.stderr and not [e for e in run_events if e.get("code") == "step_missing"]


@pytest.mark.parametrize("step, why", [
    ("tests.trace.programs.cpu_engine:Engine.stepp", "tests.trace.programs.cpu_engine has no Engine.stepp"),
    ("tests.trace.programs.cpu_engin:Engine.step", "the program never imported tests.trace.programs.cpu_engin"),
    ("__main__:decode_stepp", "no function decode_stepp was called in the program's script")])
def test_a_step_target_no_process_finds_is_an_error_the_user_sees(tmp_path, step, why):
    """A typo in --step was silently ignored (the module's) or a warning on the run alone (the
    function's): now the trace's summary ends with an error line naming it and why, and the
    run says it too. The exit status stays the program's: wrapping never changes it."""
    events = tmp_path / "trace.jsonl"
    program = ([sys.executable, str(PROGRAMS / "cpu_decode.py"), "spawn"] if step.startswith("__main__") else
               [sys.executable, "-c", "from tests.trace.programs.cpu_engine import main; main()"])
    result = trace("--events", str(events), "--step", step, "--", *program)
    assert result.returncode == 0, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"replayscope trace: error: --step {step}: {why}"), result.stderr
    assert "no steps were recorded through --step" in last and result.stderr.count(why) == 1
    _run, run_events = read_run(events)
    assert any(e["kind"] == "warning" and e["code"] == "step_missing" and why in e["message"] for e in run_events)
    assert not steps_of(run_events)


def test_a_program_that_fails_ends_its_run_failed_with_the_error_and_keeps_its_exit_status(tmp_path):
    events = tmp_path / "trace.jsonl"
    result = trace("--events", str(events), "--step", "__main__:decode_step", "--",
                   sys.executable, str(PROGRAMS / "cpu_decode.py"), "--fail")
    assert result.returncode == 1
    assert "RuntimeError: the program failed after its steps" in result.stderr   # the program's own traceback
    _run, run_events = read_run(events)
    end = run_events[-1]
    assert end["kind"] == "run_end" and end["status"] == "failed"
    assert end["error"] == "RuntimeError: the program failed after its steps"
    assert len(steps_of(run_events)) == 3


def test_to_a_collector_each_process_is_a_stored_run(tmp_path):
    from replayscope.collector.models import queries
    from replayscope.collector.store import Store
    from tests.e2e.conftest import ThreadCollector
    from tests.live_server import free_port

    store = Store.open(f"sqlite:///{tmp_path}/collector.db", upgrade=True)
    server = ThreadCollector(store, free_port()).start()
    try:
        result = trace("--collector", server.url, "--step", "__main__:decode_step", "--",
                       sys.executable, str(PROGRAMS / "cpu_decode.py"), "spawn", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        runs = [r for r in queries.list_runs(store) if r["source"] == "trace"]
        assert len(runs) == 2
        assert sorted(r["steps"] for r in runs) == [3, 4]
        for r in runs:
            summary = queries.run_summary(store, r["run_id"])
            assert summary["status"] == "finished" and summary["modes"]["eager"] == r["steps"]
            assert summary["reasons"] == {"cpu_device": r["steps"]}
        assert not list(tmp_path.glob("replayscope-spool-*"))
    finally:
        server.stop()
        store.dispose()


PROBE = "import torch; print(hasattr(torch.cuda.CUDAGraph.replay, '__replayscope_original__'))"


def test_without_trace_nothing_is_installed():
    plain = subprocess.run([sys.executable, "-c", PROBE], env=ENV, capture_output=True, text=True, timeout=120)
    assert plain.stdout.split() == ["False"]


def test_under_trace_the_hooks_are_in_the_program_and_no_top_level_name_of_its_is_ours(tmp_path):
    """Every module of ours is under replayscope: the program's own app, runner, collector are free."""
    result = trace("--events", str(tmp_path / "t.jsonl"), "--", sys.executable, "-c",
                   PROBE + "; import sys; old = ('app', 'runner', 'collector', 'migrations')"
                   "; print(sorted(m for m in sys.modules if m.split('.')[0] in old))")
    assert result.stdout.split("\n")[:2] == ["True", "[]"]
    assert "no process of the command captured a CUDA graph" in result.stderr


def test_the_environments_own_sitecustomize_still_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['THEIR_SITECUSTOMIZE'] = 'ran'\n")
    env = {**ENV, "PYTHONPATH": os.pathsep.join((str(site), ENV["PYTHONPATH"]))}
    result = trace("--events", str(tmp_path / "t.jsonl"), "--", sys.executable, "-c",
                   "import os; " + PROBE + "; print(os.environ.get('THEIR_SITECUSTOMIZE'))", env=env)
    assert result.stdout.split() == ["True", "ran"]


def test_a_program_with_its_own_module_named_runner_imports_its_own_and_is_traced(tmp_path):
    (tmp_path / "runner").mkdir()
    (tmp_path / "runner" / "__init__.py").write_text("NAME = 'theirs'\n")
    (tmp_path / "main.py").write_text("import runner\n" + PROBE + "\nprint(runner.NAME)\n")
    result = trace("--events", str(tmp_path / "t.jsonl"), "--", sys.executable, str(tmp_path / "main.py"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "theirs"]


@pytest.mark.parametrize("argv, message", [
    ([], "give the command to trace after --"),
    (["--events", "/no/such/dir/t.jsonl", "--", "python", "-c", "0"], "its directory does not exist"),
    (["--collector", "ftp://x", "--", "python", "-c", "0"], "is not an http(s) URL"),
    (["--events", "t.jsonl", "--step", "not a spec", "--", "python", "-c", "0"], "MODULE:QUALNAME"),
    (["--", "python", "-c", "0"], "give one of --collector URL or --events FILE"),
    (["--events", "t.jsonl", "--collector", "http://x", "--", "python", "-c", "0"], "not allowed with"),
    (["--events", "t.jsonl", "--", "no-such-command-xyz"], "command not found: no-such-command-xyz"),
    (["--events", "t.jsonl", "--time-every", "0", "--", "python", "-c", "0"], "--time-every must be at least 1"),
])
def test_bad_input_gets_one_error_line_exit_2_and_writes_nothing(tmp_path, argv, message):
    result = trace(*argv, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("replayscope trace: error: ")
    assert message in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_pure_python_switch_that_is_not_1_or_0_is_refused_before_anything_runs(tmp_path):
    result = trace("--events", "t.jsonl", "--", sys.executable, "-c", "0", cwd=tmp_path,
                   env={**ENV, "REPLAYSCOPE_PURE_PYTHON": "yes"})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("replayscope trace: error: REPLAYSCOPE_PURE_PYTHON='yes'")
    assert list(tmp_path.iterdir()) == []


def test_with_timings_asked_each_traced_process_says_what_the_tracers_start_and_its_hooks_took(tmp_path):
    """REPLAYSCOPE_TRACE_TIMINGS=1: a diagnostic for a traced start-up slower than an untraced one."""
    program = "import torch.cuda.graphs, multiprocessing as m; m.get_context('spawn').Process(target=print).start()"
    script = tmp_path / "prog.py"
    script.write_text(f"if __name__ == '__main__':\n    {program}\n")
    asked = trace("--events", str(tmp_path / "t.jsonl"), "--", sys.executable, str(script),
                  env={**ENV, "REPLAYSCOPE_TRACE_TIMINGS": "1"})
    assert asked.returncode == 0, asked.stderr
    lines = [line for line in asked.stderr.splitlines() if line.startswith("replayscope trace timings: ")]
    starts = [line for line in lines if "the tracer's start (its imports and hooks) took " in line]
    assert len({line.split()[4] for line in starts}) >= 2     # the program, its spawned child (and resource tracker)
    assert any("the hooks on torch.cuda.graphs took " in line for line in lines)
    assert all(line.endswith(" ms") for line in lines)

    quiet = trace("--events", str(tmp_path / "q.jsonl"), "--", sys.executable, str(script))
    assert quiet.returncode == 0 and "replayscope trace timings" not in quiet.stderr


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin a loop to one")
def test_a_loop_that_pins_its_thread_keeps_its_cpu_the_trace_threads_and_writer_go_elsewhere(tmp_path):
    """The program pins its thread to one CPU before its first step (when the run opens, and the
    trace's thread and writer process start from it): they run on the other CPUs, the loop's own
    pinning is kept, and every step is written."""
    events = tmp_path / "trace.jsonl"
    result = trace("--events", str(events), "--step", "__main__:step", "--",
                   sys.executable, str(PROGRAMS / "pinned_loop.py"))
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    others = ",".join(str(cpu) for cpu in sorted(os.sched_getaffinity(0) - {seen["loop_cpu"]}))
    threads, writers = seen["place"]["threads"], seen["place"]["children"]
    assert threads.pop(str(seen["pid"])) == str(seen["loop_cpu"])
    [writer] = writers.values()
    assert set(threads.values()) == {others} and set(writer["threads"].values()) == {others}
    assert len(steps_of(read_run(events)[1])) == 50
