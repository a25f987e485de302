"""Shared pytest setup: ``gpu`` tests run only where CUDA is available.

torch is imported only to ask whether CUDA is there, and only when gpu tests were collected:
the collector, dashboard and importer tests run in an environment without torch (.ci/run).
"""

import importlib.util

import pytest


def cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    gpu_tests = [item for item in items if "gpu" in item.keywords]
    if not gpu_tests or cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run with -m gpu on the device machine)")
    for item in gpu_tests:
        item.add_marker(skip_gpu)
