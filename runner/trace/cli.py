"""``replayscope trace`` on the command line (also ``python -m replayscope.runner.trace`` on hosts without
the ``replayscope`` command). Torch-free: it only prepares the command's environment."""

from __future__ import annotations

import argparse

from replayscope.contract import environment
from replayscope.runner.timing import CUDA_TIME_EVERY


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--collector", metavar="URL", help="stream each traced process's run to a collector")
    target.add_argument("--events", metavar="FILE",
                        help="write the runs as JSON lines: FILE for the first traced process, "
                             "FILE-pidN.jsonl for the others")
    parser.add_argument("--token", default=None,
                        help="bearer token for the collector (default: $REPLAYSCOPE_TOKEN)")
    parser.add_argument("--name", help="the runs' name (default: the command); each process's run "
                                       "adds [rank N] or [pid N]")
    parser.add_argument("--step", metavar="MODULE:QUALNAME",
                        help="the program's step function, e.g. mypkg.engine:Engine.decode_step "
                             "(__main__:step for a function of the script itself); vLLM, SGLang and "
                             "transformers generate are recognised without it")
    parser.add_argument("--time-every", type=int, default=CUDA_TIME_EVERY, metavar="N",
                        help="on CUDA, time the first step of each stage and batch size and then every Nth "
                             "one with CUDA events (1: every step); the others are recorded without a "
                             "duration")
    parser.add_argument("program", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                        help="the command to run, unmodified")


def add_parser(sub) -> None:
    trace = sub.add_parser(
        "trace", help="run a PyTorch program unmodified, recording its CUDA graphs and steps",
        description="Run a command unmodified, with hooks in every Python process it starts: every "
                    "CUDA-graph capture (size, duration, pool memory, failure), every replay, and "
                    "per step graph, padded or eager with the cause (Inductor's own reasons "
                    "included). See docs/trace.md.",
        usage="%(prog)s (--collector URL | --events FILE) [--name N] [--step MODULE:QUALNAME] "
              "[--time-every N] -- COMMAND ...")
    add_arguments(trace)
    trace.set_defaults(handler=trace_command)


def trace_command(args) -> int:
    from replayscope.runner.trace.launch import run_traced

    return run_traced(list(args.program), collector=args.collector, events=args.events,
                      token=environment.token(args.token),
                      name=args.name, step=args.step, time_every=args.time_every)
