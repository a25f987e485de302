"""A run's events as a test keeps them: a sink that holds them in memory, and which of its
steps the CUDA clock times. Torch-free, like the runner's sinks: the GPU tests import it."""

import collections

from replayscope.runner.timing import CUDA_TIME_EVERY


class ListSink:
    """The runner's sink interface, keeping the run record and every event it is given."""

    def __init__(self):
        self.run, self.events, self.closed = None, [], False

    def open(self, run):
        self.run = run

    def write(self, events):
        self.events.extend(events)

    def close(self):
        self.closed = True


def sampled(keys, every=CUDA_TIME_EVERY):
    """Which steps carry a duration: the first of each key, then every ``every``-th of that key."""
    seen = collections.Counter()
    timed = []
    for key in keys:
        timed.append(seen[key] % every == 0)
        seen[key] += 1
    return timed
