"""A CPU decode loop that knows nothing of replayscope: its step function is ``decode_step``,
and a multiprocessing worker (started with the method named on the command line) runs steps
of its own. ``--fail`` makes the program end with an error after its steps."""

import multiprocessing
import sys

import torch

torch.set_num_threads(1)
WEIGHT = torch.randn(16, 16)


def decode_step(tokens):
    hidden = torch.nn.functional.one_hot(tokens[:, 0] % 16, 16).float()
    return (hidden @ WEIGHT).argmax(-1, keepdim=True)


def worker(batch_sizes):
    for bs in batch_sizes:
        decode_step(torch.ones(bs, 1, dtype=torch.long))


if __name__ == "__main__":
    for bs in (3, 5, 2):
        decode_step(torch.ones(bs, 1, dtype=torch.long))
    if len(sys.argv) > 1 and sys.argv[1] != "--fail":
        child = multiprocessing.get_context(sys.argv[1]).Process(target=worker, args=([1, 4, 6, 7],))
        child.start()
        child.join()
        assert child.exitcode == 0, child.exitcode
    if "--fail" in sys.argv:
        raise RuntimeError("the program failed after its steps")
