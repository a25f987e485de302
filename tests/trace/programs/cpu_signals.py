"""A CPU program that records steps (``decode_step``) and then ends as the test asks:

- ``loop``: steps every 10 ms until a signal ends it (gives up after 30 s and ends by itself);
- ``os_exit N``: three steps, then ``os._exit(N)``;
- ``self_kill EVENTS``: three steps, waits for them to be in its events file, then SIGKILLs itself;
- ``count_sigint FILE``: steps every 10 ms until the first SIGINT, then waits 1 s for more and
  writes to FILE who sent each SIGINT (``kernel``: the terminal; ``parent``: its parent, the
  trace; ``other``) and whether it has a process group of its own;
- ``kill_child EVENTS``: one step, then a multiprocessing child (forked) that records three
  steps and waits; once those are in the child's events file (EVENTS-pidN.jsonl) the parent
  SIGKILLs it, as vLLM's API server kills its engine core, and ends normally;
- ``kill_child URL``: the same where the runs go to the collector at URL (the child's steps
  are waited for there);
- ``kill_child_on_sigint``: ``kill_child``'s shape stopped by Ctrl-C: one step, a forked child
  that records three steps and waits; at SIGINT the parent SIGKILLs the child (as vLLM's API server
  force-kills its engine core, SGLang's launcher its scheduler, as they shut down) and ends normally;
- ``handler_killed N``: sets its own SIGINT handler (as vLLM's engine core does), which SIGKILLs
  the process (as vLLM's API server does to it moments later), records N steps at once and sends
  itself SIGINT: the steps are in its emitter's buffer, not yet flushed, when the signal comes.
  Prints whether ``signal.getsignal`` still gives the program its own handler.
"""

import json
import multiprocessing
import os
import signal
import sys
import time
import urllib.error
import urllib.request

import torch

torch.set_num_threads(1)


def decode_step(tokens):
    return (tokens * 2).sum()


def three_steps():
    for bs in (3, 5, 2):
        decode_step(torch.ones(bs, 1))


def steps_in(path: str) -> int:
    try:
        with open(path, encoding="utf-8") as f:
            return sum('"kind": "step"' in line for line in f)
    except FileNotFoundError:
        return 0


def steps_stored(url: str, pid: int) -> int:
    run_id = f"{os.environ['REPLAYSCOPE_TRACE_ID']}-{pid}"     # the trace's run ids: <trace id>-<pid>
    try:
        with urllib.request.urlopen(f"{url}/v1/runs/{run_id}", timeout=5) as answer:
            return json.load(answer)["steps"]
    except urllib.error.URLError:
        return 0


def wait_until(predicate, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.02)


def child_steps():
    three_steps()
    time.sleep(120)


if __name__ == "__main__":
    how = sys.argv[1]
    if how == "loop":
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            decode_step(torch.ones(4, 1))
            time.sleep(0.01)
    elif how == "count_sigint":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        senders = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not senders:
                decode_step(torch.ones(4, 1))
            info = signal.sigtimedwait({signal.SIGINT}, 0.01)
            if info is not None:
                senders.append("kernel" if info.si_code == 0x80 else
                               "parent" if info.si_pid == os.getppid() else "other")
                deadline = min(deadline, time.monotonic() + 1.0)
        with open(sys.argv[2], "w", encoding="utf-8") as f:
            json.dump({"senders": senders, "own_group": os.getpgrp() == os.getpid()}, f)
    elif how == "os_exit":
        three_steps()
        os._exit(int(sys.argv[2]))
    elif how == "self_kill":
        three_steps()
        wait_until(lambda: steps_in(sys.argv[2]) == 3)
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "handler_killed":
        def stop(_signum, _frame):
            os.kill(os.getpid(), signal.SIGKILL)
        signal.signal(signal.SIGINT, stop)
        print(f"own handler: {signal.getsignal(signal.SIGINT) is stop}", flush=True)
        for _ in range(int(sys.argv[2])):
            decode_step(torch.ones(2, 1))
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)
    elif how == "kill_child_on_sigint":
        decode_step(torch.ones(1, 1))
        child = multiprocessing.get_context("fork").Process(target=child_steps)
        child.start()
        print(f"child {child.pid}", flush=True)
        try:
            time.sleep(120)
        except KeyboardInterrupt:
            os.kill(child.pid, signal.SIGKILL)
            child.join()
    elif how == "kill_child":
        decode_step(torch.ones(1, 1))
        child = multiprocessing.get_context("fork").Process(target=child_steps)
        child.start()
        if sys.argv[2].startswith("http"):
            wait_until(lambda: steps_stored(sys.argv[2], child.pid) == 3)
        else:
            stem, ext = os.path.splitext(sys.argv[2])
            wait_until(lambda: steps_in(f"{stem}-pid{child.pid}{ext}") == 3)
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        print(f"child exit code {child.exitcode}")
