"""The ``replayscope`` command: one front for the runner, the collector and the dashboard.

Each module in ``COMMAND_MODULES`` registers its subcommands with ``add_parsers(sub)``.
Building the parser must stay cheap and torch-free (``replayscope --help``, ``serve``,
``import`` never load torch): a registering module imports only the standard library and
torch-free names at module level; heavy imports happen inside the command's handler.
To add a command, write ``add_parsers(sub)`` in its module and list the module here.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from app import __version__
from runner.errors import ReplayscopeError

COMMAND_MODULES = (
    "app.commands",               # serve, demo, advise
    "runner.cli",                 # run, and trace (runner.trace.cli)
    "collector.cli",              # db
    "collector.importers.cli",    # import, scrape, follow
    "collector.run_commands",     # runs delete
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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except ReplayscopeError as error:
        print(f"replayscope {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
