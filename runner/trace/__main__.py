"""``python -m replayscope.runner.trace [--collector URL | --events FILE] ... -- COMMAND``: the same as
``replayscope trace``, for hosts that have replayscope's files but not its command."""

import argparse
import sys

from replayscope.contract.errors import ReplayscopeError
from replayscope.runner.trace.cli import add_arguments, trace_command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m replayscope.runner.trace",
                                     description="Run a command unmodified, recording its CUDA graphs "
                                                 "and steps (docs/trace.md).")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return trace_command(args)
    except ReplayscopeError as error:
        print(f"replayscope trace: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
