"""A CPU program that records N steps (``decode_step``), hands its events to its event writer
process (``replayscope.runner.event_writer``) without waiting for them to be written, and SIGKILLs
itself at once: the writer is still writing (or posting) them when the program is gone."""

import os
import signal
import sys

import torch

torch.set_num_threads(1)


def decode_step(tokens):
    return (tokens * 2).sum()


for _ in range(int(sys.argv[1])):
    decode_step(torch.ones(4, 1))

from replayscope.runner.trace import bootstrap  # noqa: E402 (the tracer this process runs under)

tracer = bootstrap.ACTIVE
tracer._starter.join()                   # the run's emitter started: its writer is there
tracer.emitter._flush()                  # handed over, not waited for
print(f"writer {tracer.emitter.writer_pid}", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
