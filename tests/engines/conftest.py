"""What the real-engine GPU tests (test_vllm_gpu.py, test_sglang_gpu.py) share, each per test
module: ``out``, the folder of the runs' logs, events and metrics (``REPLAYSCOPE_ENGINE_OUT`` keeps
them, else a temporary folder), and ``model``, the harnesses' small random Llama in it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks import engine_harness


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    path = Path(os.environ.get("REPLAYSCOPE_ENGINE_OUT") or tmp_path_factory.mktemp("engines"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def model(out) -> Path:
    return engine_harness.make_model(out / "model")
