"""A CPU program shaped like SGLang's offline ``Engine``: the engine starts a child process that
runs steps (SGLang's scheduler), and ``Engine.shutdown`` SIGKILLs its children (SGLang 0.5.17:
``kill_process_tree(os.getpid(), include_parent=False)``), called by the program, by ``with``'s
exit and at interpreter exit (``atexit``). The engine is a stand-in module named like SGLang's
(``sglang.srt.entrypoints.engine``), written into FOLDER, so that the trace's SGLang recipe
hooks it as it would the real one.

    python engine_shutdown.py HOW EVENTS FOLDER

HOW: ``clean`` (one step, the engine, its child's three steps written, ``engine.shutdown()``,
exit 0); ``error`` (the same inside ``with Engine() as engine:``, then an exception: the child
is stopped while it propagates); ``interrupt`` (Ctrl-C's KeyboardInterrupt goes uncaught:
``atexit`` stops the child).
"""

import os
import sys
import time

import torch

torch.set_num_threads(1)

ENGINE = '''
import atexit, multiprocessing, os, signal


class Engine:
    def __init__(self, child_main):
        self.child = multiprocessing.get_context("fork").Process(target=child_main)
        self.child.start()
        atexit.register(self.shutdown)

    def shutdown(self):
        for child in multiprocessing.active_children():
            os.kill(child.pid, signal.SIGKILL)
            child.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
        return False
'''


def decode_step(tokens):
    return (tokens * 2).sum()


def scheduler():
    for bs in (3, 5, 2):
        decode_step(torch.ones(bs, 1))
    time.sleep(120)


def steps_in(path: str) -> int:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().count('"kind": "step"')
    except FileNotFoundError:
        return 0


def wait_for_the_schedulers_steps(engine, events: str) -> None:
    stem, ext = os.path.splitext(events)
    deadline = time.monotonic() + 60
    while steps_in(f"{stem}-pid{engine.child.pid}{ext}") < 3:
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.02)


def stand_in_sglang(folder: str) -> None:
    package = os.path.join(folder, "sglang", "srt", "entrypoints")
    os.makedirs(package, exist_ok=True)
    for part in (("sglang",), ("sglang", "srt"), ("sglang", "srt", "entrypoints")):
        open(os.path.join(folder, *part, "__init__.py"), "w").close()
    with open(os.path.join(package, "engine.py"), "w", encoding="utf-8") as f:
        f.write(ENGINE)
    sys.path.insert(0, folder)


if __name__ == "__main__":
    how, events, folder = sys.argv[1:4]
    stand_in_sglang(folder)
    from sglang.srt.entrypoints.engine import Engine

    decode_step(torch.ones(1, 1))
    if how == "clean":
        engine = Engine(scheduler)
        wait_for_the_schedulers_steps(engine, events)
        engine.shutdown()
    elif how == "error":
        with Engine(scheduler) as engine:
            wait_for_the_schedulers_steps(engine, events)
            raise RuntimeError("the program failed while the engine ran")
    elif how == "interrupt":
        engine = Engine(scheduler)
        wait_for_the_schedulers_steps(engine, events)
        raise KeyboardInterrupt
