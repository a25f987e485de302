"""The shipped Prometheus alerting rule, proven with promtool (required in CI)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from replayscope.collector.api import metrics

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


def test_the_shipped_rule_is_the_built_in_rule():
    """Same threshold, window, minimum steps, stages, pending duration and hold as the rule every
    store starts with (``BUILTIN_EAGER_RATIO_RULE``, the one source of them)."""
    import re

    import yaml

    from replayscope.collector.alerting.alerts import BUILTIN_EAGER_RATIO_RULE as RULE_DEFAULTS
    from replayscope.contract.wire import stages_of

    [group] = yaml.safe_load((RULES / "replayscope-rules.yml").read_text())["groups"]
    records = {r["record"]: r["expr"] for r in group["rules"] if "record" in r}
    [alert] = [r for r in group["rules"] if r.get("alert") == "ReplayscopeEagerRatioHigh"]

    def seconds(duration: str) -> int:
        value, unit = re.fullmatch(r"(\d+)([smh])", duration).groups()
        return int(value) * {"s": 1, "m": 60, "h": 3600}[unit]

    windows = {seconds(w) for expr in records.values() for w in re.findall(r"\[(\d+[smh])\]", expr)}
    assert windows == {RULE_DEFAULTS["window_s"]}
    assert f">= {RULE_DEFAULTS['min_steps']}" in alert["expr"]
    assert re.search(r"replayscope:decode_eager_ratio:\d+m > ([0-9.]+)", alert["expr"]).group(1) == \
        f"{RULE_DEFAULTS['threshold']:g}"
    stage_filters = {m for expr in records.values() for m in re.findall(r'stage\s*(?:=~|!~|!=|=)\s*"[^"]*"', expr)}
    assert stage_filters == {metrics.DECODE_STAGES_MATCHER}          # the stages the built-in rule watches
    assert metrics.DECODE_STAGES_MATCHER == 'stage=~"' + "|".join(stages_of(RULE_DEFAULTS["stage"])) + '"'
    for expr in records.values():
        assert expr.count(metrics.DECODE_STAGES_MATCHER) == expr.count(metrics.STEPS_TOTAL)
    assert seconds(alert["for"]) == RULE_DEFAULTS["for_s"]
    assert seconds(alert["keep_firing_for"]) == RULE_DEFAULTS["keep_firing_for_s"]
