"""The ``replayscope`` command: one front for the runner, the collector and the dashboard,
and the one place of the command-line interface: this module is the parser and the
dispatch, each module of this package one command group (``serve``: serve and demo;
``advise``; ``run``, which also registers ``trace`` from ``replayscope.runner.trace.cli``, the
tracer's own front for ``python -m replayscope.runner.trace``; ``db``; ``runs``; ``imports``: import,
follow, scrape, writing through ``import_sinks``).

Each module in ``COMMAND_MODULES`` registers its subcommands with ``add_parsers(sub)``.
Building the parser must stay cheap and torch-free (``replayscope --help``, ``serve``,
``import`` never load torch): a registering module imports only the standard library and
torch-free names at module level; heavy imports happen inside the command's handler.
To add a command, write ``add_parsers(sub)`` in its module and list the module here.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from replayscope.app import __version__
from replayscope.contract.errors import (EXIT_DONE, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_PIPE_CLOSED,
                                         ReplayscopeError)

COMMAND_MODULES = (
    "replayscope.app.cli.serve",              # serve, demo
    "replayscope.app.cli.advise",             # advise
    "replayscope.app.cli.run",                # run, and trace (replayscope.runner.trace.cli)
    "replayscope.app.cli.db",                 # db
    "replayscope.app.cli.imports",            # import, scrape, follow
    "replayscope.app.cli.runs",               # runs list, runs delete
)


class _Parser(argparse.ArgumentParser):
    """Bad flags get one line, not the usage block (subcommand parsers inherit this)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="replayscope",
        description="Observability for CUDA-graph capture, replay and fallback in LLM inference.",
    )
    parser.add_argument("--version", action="version", version=f"replayscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")   # none: the help (main)
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code says whether it did its job (``replayscope.contract.errors.EXIT_*``,
    docs/commands.md). Every command ends here, so a closed output pipe (``advise ... | head``)
    ends every one of them quietly."""
    args = None
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:           # bare ``replayscope``: what it can do, not an error
            parser.print_help()
            return EXIT_DONE
        code = int(args.handler(args) or EXIT_DONE)
        sys.stdout.flush()                 # a closed pipe shows here, not at the interpreter's exit
        return code
    except ReplayscopeError as error:
        print(f"replayscope {getattr(args, 'command', '')}: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _output_closed()


def _output_closed() -> int:
    """The reader of our output went away: nothing more to say to it, no traceback. What is
    still buffered goes to /dev/null, so the interpreter's final flush cannot fail again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return EXIT_PIPE_CLOSED

