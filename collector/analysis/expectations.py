"""What a startup step should take, for a model of a given size: the estimates a finding is
measured against. Every figure here is an estimate (provenance ``estimated``), stated with
the assumption behind it; docs/dashboard.md lists them.

- Weight load: the bytes at plausible storage bandwidths, plus a fixed set-up (process and
  CUDA context start, allocation). Local NVMe reads safetensors at about 2 GiB/s into GPU
  memory; network storage (NFS, a cloud disk) gives about 200 MiB/s.
- Capture, per size: a fixed part plus a part that grows with the weights each replay
  touches; the runs in docs/gpu-results.md captured a 1B model (2.3 GiB) at 0.05-0.15 s per
  size on an H200. torch.compile adds its own compile time per size or per range, which
  the compile finding reports on its own.
- Sizes: about eight capture sizes cover a server's batch sizes within a few percent of
  padding (the Advisor page finds the best ones for a run's traffic).
"""

from __future__ import annotations

GIB = 2**30
MIB = 2**20

LOCAL_NVME_BPS = 2 * GIB           # local NVMe SSD, safetensors into GPU memory
NETWORK_STORAGE_BPS = 200 * MIB    # NFS / cloud block storage
LOAD_SETUP_S = 3.0                 # process, CUDA context and allocation before the first byte
IO_BOUND_BYTES = 256 * MIB         # below this, a load's time is set-up, not reading
SLOW_LOAD_FACTOR = 1.5             # a load is a finding from 1.5x its expectation

CAPTURE_BASE_S = 0.1               # per size: warm-up runs, the capture itself, instantiation
CAPTURE_S_PER_GIB = 0.02           # per size and GiB of weights
SLOW_CAPTURE_FACTOR = 5.0          # slower than this many times the expectation is a finding

TYPICAL_SIZES = 8                  # sizes that usually cover the traffic (Advisor page)
MANY_SIZES = 12                    # more than this, without traffic to judge by, is "many"


def load_seconds(weight_bytes: int, bandwidth_bps: float = LOCAL_NVME_BPS) -> float:
    """Reading ``weight_bytes`` at ``bandwidth_bps``, without the set-up."""
    return weight_bytes / bandwidth_bps


def expected_load_s(weight_bytes: int) -> float:
    """A weight load from local NVMe: the set-up plus the bytes at local NVMe speed."""
    return LOAD_SETUP_S + load_seconds(weight_bytes)


def expected_capture_s(weight_bytes: int | None) -> float | None:
    """One size's capture without torch.compile, for a model of ``weight_bytes``; None
    when the size of the model is unknown."""
    if weight_bytes is None:
        return None
    return CAPTURE_BASE_S + CAPTURE_S_PER_GIB * weight_bytes / GIB


__all__ = ["CAPTURE_BASE_S", "CAPTURE_S_PER_GIB", "IO_BOUND_BYTES", "LOAD_SETUP_S", "LOCAL_NVME_BPS",
           "MANY_SIZES", "NETWORK_STORAGE_BPS", "SLOW_CAPTURE_FACTOR", "SLOW_LOAD_FACTOR", "TYPICAL_SIZES",
           "expected_capture_s", "expected_load_s", "load_seconds"]
