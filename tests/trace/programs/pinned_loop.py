"""A loop that pins its own thread to one CPU (the last it may use) before its first step, as a
host-bound serving loop or benchmark does, then prints as JSON the CPUs of each of its threads
and of each process it started (the trace's event writer among them)."""

import json
import os
import sys
import time


def step(tokens):
    return tokens


def place(pid: int) -> dict:
    threads = {}
    for tid in sorted(os.listdir(f"/proc/{pid}/task")):
        with open(f"/proc/{pid}/task/{tid}/status") as status:
            line = next(l for l in status if l.startswith("Cpus_allowed_list"))
        threads[tid] = line.split()[1]
    with open(f"/proc/{pid}/task/{pid}/children") as children:
        return {"threads": threads, "children": {c: place(int(c)) for c in children.read().split()}}


if __name__ == "__main__":
    loop_cpu = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {loop_cpu})
    for _ in range(50):
        step([0] * 4)
    # The run opened at the first step; its writer process and emitter thread start on their own thread.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as children:
            started = children.read().split()
        if started and len(os.listdir(f"/proc/{os.getpid()}/task")) >= 2:
            break
        time.sleep(0.05)
    time.sleep(0.5)
    json.dump({"pid": os.getpid(), "loop_cpu": loop_cpu, "place": place(os.getpid())}, sys.stdout)
