"""The shipped Prometheus alerting rule, proven with promtool (required in CI)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from collector import metrics

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing; CI must run the Prometheus rule tests (Debian: prometheus)")
        pytest.skip("promtool not installed")
    return path


def test_the_rules_file_is_valid():
    result = subprocess.run([_promtool(), "check", "rules", "replayscope-rules.yml"], cwd=RULES,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rule_unit_tests_pass():
    result = subprocess.run([_promtool(), "test", "rules", "replayscope-rules.test.yml"], cwd=RULES,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rules_use_the_collectors_metric_names():
    text = (RULES / "replayscope-rules.yml").read_text()
    assert metrics.STEPS_TOTAL in text
