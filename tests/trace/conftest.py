"""Fakes for the tracer's tests on CPU: a CUDA graph object with torch's methods, a capture
context like ``torch.cuda.graph``, and a tracer wired to them and to sinks that keep its events."""

from __future__ import annotations

import itertools
import types

import pytest
import torch

from replayscope.contract import wire
from replayscope.runner.trace.hooks import Patches, install_cuda_graph_hooks
from replayscope.runner.trace.settings import TraceSettings
from replayscope.runner.trace.tracer import Tracer, tracer_class
from tests.run_events import ListSink

_pools = itertools.count(1)


class FakeCUDAGraph:
    """What torch.cuda.CUDAGraph offers the hooks: capture_begin/end, replay, pool."""

    def __init__(self, fail_at_end: Exception | None = None):
        self.fail_at_end = fail_at_end
        self.replays = 0
        self._pool = None

    def capture_begin(self, pool=None, capture_error_mode="global"):
        self._pool = pool if pool is not None else (0, next(_pools))

    def capture_end(self):
        if self.fail_at_end is not None:
            raise self.fail_at_end

    def replay(self):
        self.replays += 1

    def pool(self):
        return self._pool


class FakeGraphContext:
    """torch.cuda.graph's shape: capture_begin on enter, capture_end on exit (whatever happened)."""

    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        self.cuda_graph = cuda_graph
        self.pool = pool

    def __enter__(self):
        self.cuda_graph.capture_begin(self.pool)

    def __exit__(self, exc_type, exc, tb):
        self.cuda_graph.capture_end()


class Traced:
    """A tracer with its hooks on the fake graph classes; ``finish()`` ends the run."""

    def __init__(self, monkeypatch, core: str | None = None):
        self.sinks: list[ListSink] = []
        settings = TraceSettings(trace_id="t0", name="test", command=("python", "prog.py"))
        self.tracer = (tracer_class(core) if core else Tracer)(settings, make_sink=self._sink)
        self.patches = Patches()
        self.module = types.SimpleNamespace(CUDAGraph=FakeCUDAGraph, graph=FakeGraphContext)
        monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeCUDAGraph)
        monkeypatch.setattr(torch.cuda, "graph", FakeGraphContext)
        assert install_cuda_graph_hooks(self.tracer, self.module, self.patches)

    def _sink(self, run_id):
        sink = ListSink()
        self.sinks.append(sink)
        return sink

    def finish(self, status=None, error=None) -> list[dict]:
        self.tracer.close(status, error)
        self.patches.remove()
        events = self.sinks[0].events if self.sinks else []
        if self.sinks:
            wire.validate_run(self.sinks[0].run)
        for event in events:
            wire.validate_event(event)
        return events


def kinds(events, kind):
    return [e for e in events if e["kind"] == kind]


@pytest.fixture()
def traced(monkeypatch):
    t = Traced(monkeypatch)
    yield t
    t.patches.remove()


def capture(bs, pool=None, graph=None):
    """A program's capture of one batch size (``bs`` is what the tracer reads from this frame)."""
    graph = graph or torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        pass
    return graph
