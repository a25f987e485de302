"""Device facts and error descriptions in one place: a graph pool's bytes (``replayscope.runner.pools``)
and an exception as an event's ``error`` text (``replayscope.contract.errors.describe_error``), read the
same way by the runner's capture and by the tracer."""

import sys
import types

import pytest

from replayscope.contract import errors
from replayscope.runner import pools


def _fake_torch(segments=None, initialized=True, snapshot_fails=False):
    def memory_snapshot():
        if snapshot_fails:
            raise RuntimeError("allocator unavailable")
        return segments

    cuda = types.SimpleNamespace(is_initialized=lambda: initialized, memory_snapshot=memory_snapshot)
    return types.SimpleNamespace(cuda=cuda)


SEGMENTS = [{"total_size": 2 << 20, "segment_pool_id": (0, 1)},
            {"total_size": 1 << 20, "segment_pool_id": (0, 1)},
            {"total_size": 8 << 20, "segment_pool_id": (0, 2)},
            {"total_size": 4 << 20}]                      # the allocator's own segments: no pool


def test_a_pools_bytes_are_its_segments_in_the_allocators_snapshot(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(SEGMENTS))
    assert pools.pool_bytes((0, 1)) == 3 << 20
    assert pools.pool_bytes([0, 2]) == 8 << 20               # a handle as a list reads the same
    assert pools.pool_bytes((7, 7)) == 0                     # a pool with no segment yet: none reserved


@pytest.mark.parametrize("torch_module, pool", [
    (_fake_torch(SEGMENTS), None),                           # no pool: unknown, not 0
    (_fake_torch(SEGMENTS, initialized=False), (0, 1)),      # CUDA never used here
    (_fake_torch(snapshot_fails=True), (0, 1)),              # the allocator cannot say
])
def test_a_pools_bytes_are_unknown_when_they_cannot_be_read(monkeypatch, torch_module, pool):
    monkeypatch.setitem(sys.modules, "torch", torch_module)
    assert pools.pool_bytes(pool) is None


def test_the_runner_and_the_tracer_read_one_pool_size_and_one_error_text():
    pytest.importorskip("torch")
    from replayscope.runner import capture
    from replayscope.runner.trace import captures, lifecycle, recipes

    assert capture.pool_bytes is captures.pool_bytes is pools.pool_bytes
    assert lifecycle.describe_error is captures.describe_error is recipes.describe_error is errors.describe_error
    assert capture.describe_error is errors.describe_error


def test_an_error_text_names_the_cause_cuda_hid_behind_it():
    try:
        try:
            raise MemoryError("out of memory")
        except MemoryError as cause:
            raise RuntimeError("operation not permitted when stream is capturing") from cause
    except RuntimeError as error:
        text = errors.describe_error(error)
    assert text == ("RuntimeError: operation not permitted when stream is capturing "
                    "(caused by MemoryError: out of memory)")
    assert len(errors.describe_error(ValueError("x" * 9000))) == 4000
