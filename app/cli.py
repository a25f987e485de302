"""The ``replayscope`` command: one front for the runner, the collector and the dashboard.

Each package registers its own subcommands; heavy imports happen only inside the
command that needs them, so ``replayscope run`` works on a GPU host without dash.
"""

from __future__ import annotations

import argparse
import sys

from runner.errors import ReplayscopeError


class _Parser(argparse.ArgumentParser):
    """Bad flags get one line, not the usage block (subcommand parsers inherit this)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from collector import cli as collector_cli
    from runner import cli as runner_cli

    from app import commands as app_commands

    parser = _Parser(
        prog="replayscope",
        description="Observability for CUDA-graph capture, replay and fallback in LLM inference.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    app_commands.add_parsers(sub)
    runner_cli.add_parsers(sub)
    collector_cli.add_parsers(sub)
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
