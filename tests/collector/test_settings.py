"""Configuration resolves one way everywhere: flags > REPLAYSCOPE_* environment > defaults."""

from __future__ import annotations

import argparse

import pytest

from replayscope.app.cli import build_parser
from replayscope.collector.settings import DEFAULT_DB, DEFAULT_PORT, Settings, resolve
from replayscope.contract.errors import ReplayscopeError

ENV = {"REPLAYSCOPE_DB": "sqlite:///from-env.db", "REPLAYSCOPE_PORT": "9001", "REPLAYSCOPE_HOST": "0.0.0.0",
       "REPLAYSCOPE_LOG_LEVEL": "DEBUG", "REPLAYSCOPE_TOKEN": "env-token"}


def test_defaults_apply_when_neither_flag_nor_environment_says():
    settings = resolve(build_parser().parse_args(["serve"]), environ={})
    assert (settings.db, settings.port, settings.host, settings.log_level) == (DEFAULT_DB, DEFAULT_PORT, "127.0.0.1", "info")


def test_the_environment_overrides_the_defaults():
    settings = resolve(build_parser().parse_args(["serve"]), environ=ENV)
    assert (settings.db, settings.port, settings.host, settings.log_level) == ("sqlite:///from-env.db", 9001, "0.0.0.0", "debug")
    assert settings.token == "env-token"


def test_flags_override_the_environment():
    args = build_parser().parse_args(["serve", "--db", "sqlite:///flag.db", "--port", "9002", "--host", "::1",
                                      "--log-level", "warning"])
    settings = resolve(args, environ=ENV)
    assert (settings.db, settings.port, settings.host, settings.log_level) == ("sqlite:///flag.db", 9002, "::1", "warning")


@pytest.mark.parametrize("argv", [["import", "vllm", "x.log"], ["import", "events", "x.jsonl"], ["advise", "r"],
                                  ["db", "upgrade"], ["db", "current"], ["scrape", "http://h/metrics"]])
def test_every_command_with_a_store_reads_it_the_same_way(argv):
    args = build_parser().parse_args(argv)
    assert resolve(args, environ={}).db == DEFAULT_DB
    assert resolve(args, environ=ENV).db == "sqlite:///from-env.db"
    assert resolve(build_parser().parse_args([*argv, "--db", "sqlite:///f.db"]), environ=ENV).db == "sqlite:///f.db"


def test_the_importers_collector_token_falls_back_to_the_environment():
    args = build_parser().parse_args(["import", "vllm", "x.log", "--collector", "http://c:8300"])
    assert resolve(args, environ=ENV).token == "env-token"
    args = build_parser().parse_args(["import", "vllm", "x.log", "--collector", "http://c:8300", "--token", "t"])
    assert resolve(args, environ=ENV).token == "t"


@pytest.mark.parametrize("variable, value", [("REPLAYSCOPE_PORT", "eighty"), ("REPLAYSCOPE_PORT", "-1"),
                                             ("REPLAYSCOPE_LOG_LEVEL", "verbose")])
def test_a_bad_environment_value_is_one_clear_error(variable, value):
    with pytest.raises(ReplayscopeError, match=variable.removeprefix("REPLAYSCOPE_").lower().replace("_", " ")
                       if variable.endswith("LEVEL") else variable):
        resolve(argparse.Namespace(), environ={variable: value})


def test_settings_without_flags_are_the_environment_over_the_defaults():
    assert Settings.from_env({"REPLAYSCOPE_MAX_BODY_BYTES": "1024"}).max_body_bytes == 1024


def test_the_token_is_read_when_a_command_runs_not_when_its_parser_is_built(monkeypatch):
    """runner's ``run``, ``runs delete`` and ``advise`` take $REPLAYSCOPE_TOKEN through the one
    lookup (``replayscope.contract.environment.token``, which ``resolve`` uses too), at use: a parser built
    before the variable was set still sends it, and ``--token`` wins over it."""
    from replayscope.contract import environment
    from replayscope.app.cli.run import make_sink

    monkeypatch.delenv("REPLAYSCOPE_TOKEN", raising=False)
    parser = build_parser()
    run = parser.parse_args(["run", "--collector", "http://127.0.0.1:9", "--spool", "/dev/null"])
    delete = parser.parse_args(["runs", "delete", "r1", "--collector", "http://127.0.0.1:9"])
    advise = parser.parse_args(["advise", "r1", "--collector", "http://127.0.0.1:9"])
    assert run.token is None and delete.token is None and advise.token is None
    monkeypatch.setenv("REPLAYSCOPE_TOKEN", "late-token")
    assert make_sink(run).token == "late-token"
    assert resolve(delete).token == resolve(advise).token == "late-token"
    flagged = parser.parse_args(["run", "--collector", "http://127.0.0.1:9", "--spool", "/dev/null", "--token", "t"])
    assert make_sink(flagged).token == "t"
    assert environment.token(None, {"REPLAYSCOPE_TOKEN": ""}) is None
    assert Settings.from_env({"REPLAYSCOPE_TOKEN": ""}).token is None


def test_trace_reads_the_token_when_it_runs_not_when_its_parser_is_built(monkeypatch):
    """``replayscope trace`` takes $REPLAYSCOPE_TOKEN through the same lookup, at run time;
    ``--token`` wins over it."""
    from replayscope.runner.trace import launch

    sent: list[str | None] = []
    monkeypatch.setattr(launch, "run_traced", lambda program, **kw: sent.append(kw["token"]) or 0)
    monkeypatch.delenv("REPLAYSCOPE_TOKEN", raising=False)
    parser = build_parser()
    trace = parser.parse_args(["trace", "--collector", "http://127.0.0.1:9", "--", "true"])
    flagged = parser.parse_args(["trace", "--collector", "http://127.0.0.1:9", "--token", "t", "--", "true"])
    assert trace.token is None
    monkeypatch.setenv("REPLAYSCOPE_TOKEN", "late-token")
    assert trace.handler(trace) == 0 and flagged.handler(flagged) == 0
    assert sent == ["late-token", "t"]


@pytest.mark.parametrize("variable, value", [
    ("REPLAYSCOPE_PRUNE_EVERY_S", "1e-300"),          # 3,593 tracebacks in 6 s
    ("REPLAYSCOPE_EVALUATE_EVERY_S", "1e-9"),         # 88 % of a core, idle
    ("REPLAYSCOPE_NOTIFY_EVERY_S", "inf"), ("REPLAYSCOPE_HEARTBEAT_TIMEOUT_S", "nan"),
    ("REPLAYSCOPE_PORT", "70000"), ("REPLAYSCOPE_MAX_BODY_BYTES", "10"),
    ("REPLAYSCOPE_WEBHOOK_TIMEOUT_S", "1e12"),
    ("REPLAYSCOPE_RAW_RETENTION", "99999999999d"),    # retention failed on every tick
    ("REPLAYSCOPE_SECOND_RETENTION", "14 days")])
def test_a_setting_out_of_its_bounds_is_refused_when_settings_resolve(variable, value):
    with pytest.raises(ReplayscopeError, match=variable) as refused:
        resolve(argparse.Namespace(), environ={variable: value})
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("argv, flag", [(["serve", "--port", "70000"], "--port"), (["serve", "--port", "-1"], "--port"),
                                        (["demo", "--port", "99999"], "--port"),
                                        (["db", "prune", "--raw-retention", "99999999999d"], "--raw-retention")])
def test_a_flag_out_of_its_bounds_is_refused_naming_the_flag(argv, flag):
    with pytest.raises(ReplayscopeError, match=flag):
        resolve(build_parser().parse_args(argv), environ={})


def test_the_bounds_accept_what_the_docs_and_the_fault_tests_use():
    settings = resolve(argparse.Namespace(), environ={
        "REPLAYSCOPE_EVALUATE_EVERY_S": "0.25", "REPLAYSCOPE_NOTIFY_EVERY_S": "0.2", "REPLAYSCOPE_PRUNE_EVERY_S": "2",
        "REPLAYSCOPE_WEBHOOK_TIMEOUT_S": "1", "REPLAYSCOPE_RAW_RETENTION": "3650d", "REPLAYSCOPE_PORT": "65535"})
    assert (settings.evaluate_every_s, settings.prune_every_s, settings.port) == (0.25, 2.0, 65535)
    assert resolve(argparse.Namespace(), environ={"REPLAYSCOPE_RAW_RETENTION": "forever"}).raw_retention == "forever"
