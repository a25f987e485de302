"""The ``replayscope`` front: ``--version``, and ``--help`` that says each default once."""

from __future__ import annotations

import argparse
import re

import pytest

from replayscope.app import __version__
from replayscope.app.cli import build_parser, main


def every_parser(parser: argparse.ArgumentParser, name: str = "replayscope"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from every_parser(sub, f"{name} {sub_name}")


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"replayscope {__version__}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


@pytest.mark.parametrize("name, parser", list(every_parser(build_parser())), ids=lambda v: v if isinstance(v, str) else "")
def test_help_says_each_default_once_and_never_none(name, parser):
    text = parser.format_help()
    assert "(default: None)" not in text and "default None" not in text, name
    for action in parser._actions:
        if action.help and action.option_strings:
            assert action.help.count("default") <= 1, (name, action.option_strings, action.help)
            assert "%(default)" not in action.help, (name, action.option_strings)


def test_run_help_states_the_steps_default_once(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert " ".join(out.split()).count("(default 500)") == 1
    for alias in ("--enforce-eager", "--cudagraph-capture-sizes", "--cuda-graph-bs", "--max-num-seqs",
                  "--max-cudagraph-capture-size", "--cuda-graph-max-bs"):
        assert alias in out
