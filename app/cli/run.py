"""``replayscope run``: the built-in decode workload through the graph runner, with telemetry."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import TYPE_CHECKING

from replayscope.contract import environment
from replayscope.contract.errors import EXIT_DONE, EXIT_INCOMPLETE, ReplayscopeError

if TYPE_CHECKING:
    from replayscope.runner.engine import RunConfig


def add_parsers(sub) -> None:
    """Register ``replayscope run`` on ``sub``. Torch-free: torch loads when a run starts.

    Where vLLM or SGLang have a flag with the same meaning, it is accepted as an alias
    (``--enforce-eager``, ``--cudagraph-capture-sizes``/``--cuda-graph-bs``, ``--max-num-seqs``...).
    """
    from replayscope.runner.plan import BACKENDS
    from replayscope.contract.capture_sizes import MAX_CAPTURE_SIZE
    from replayscope.runner.timing import CUDA_TIME_EVERY
    from replayscope.runner.workload import WORKLOADS

    run = sub.add_parser(
        "run", help="run a transformer decode workload through CUDA graphs, recording every step",
        description="Run a Llama-family decode workload with continuous batching through the graph "
                    "runner. Every step's mode (graph, padded, eager) and cause, every capture's "
                    "duration and pool memory, and the startup phases are written as events. "
                    "Needs torch: pip install 'replayscope[runner]'.")
    model = run.add_argument_group("model")
    source = model.add_mutually_exclusive_group()
    source.add_argument("--preset", help="a named model with random weights (from --seed): tiny, 136m, 1b, 3b "
                                         "(default tiny when no --model-dir)")
    source.add_argument("--model-dir", help="a Hugging Face-format checkpoint directory "
                                            "(config.json + *.safetensors; Llama, Qwen2, Mistral)")
    model.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    model.add_argument("--seed", type=int, default=0, help="seeds the weights and the workload (default 0)")

    graphs = run.add_argument_group("graphs", "vLLM's and SGLang's spellings are accepted where they mean the same")
    graphs.add_argument("--backend", choices=BACKENDS, default=None,
                        help="cuda: torch.cuda.CUDAGraph per size; compile: torch.compile per size (then "
                             "capture on CUDA); static: CPU stand-in with the same static buffers and "
                             "dispatch, no graph; disabled: eager only; auto (the default): cuda with a "
                             "GPU, else static")
    graphs.add_argument("--enforce-eager", "--disable-cuda-graph", dest="enforce_eager", action="store_true",
                        help="no graphs, every step eager (= --backend disabled)")
    graphs.add_argument("--max-bs", "--max-cudagraph-capture-size", "--cuda-graph-max-bs", dest="max_bs",
                        type=int, metavar="N", help=f"largest batch size to capture, at most {MAX_CAPTURE_SIZE} (default 32)")
    graphs.add_argument("--capture-sizes", "--cudagraph-capture-sizes", "--cuda-graph-bs", dest="capture_sizes",
                        nargs="+", metavar="N",
                        help=f"batch sizes to capture (1 to {MAX_CAPTURE_SIZE}), comma or space separated: 1,2,4,8 or 1 2 4 8 "
                             "(default: 1, 2, 4, 8, then every 8 up to --max-bs)")
    graphs.add_argument("--no-padding", "--disable-cuda-graph-padding", dest="no_padding", action="store_true",
                        help="send batch sizes without their own graph to eager instead of padding them "
                             "up to the next captured size")
    graphs.add_argument("--compile", "--enable-torch-compile", dest="compile", action="store_true",
                        help="torch.compile each size before capture")
    graphs.add_argument("--lora-graph-adapters", type=int, default=3, metavar="K",
                        help="LoRA adapters 1..K are held by the captured graphs; others run eager (default 3)")
    graphs.add_argument("--parity-every", type=int, default=0, metavar="N",
                        help="every N graph replays, also run eager on the same inputs and record the "
                             "divergence (default 0: off)")

    workload = run.add_argument_group("workload")
    workload.add_argument("--workload", choices=sorted(WORKLOADS), default="mixed",
                          help="request mix (default mixed: LoRA, grammar and speculative requests and "
                               "bursts above --max-bs)")
    workload.add_argument("--arrival-rate", type=float, metavar="R",
                          help="mean requests per second of the workload's virtual clock (Poisson); "
                               "default: the workload's own")
    workload.add_argument("--max-running", "--max-num-seqs", "--max-running-requests", dest="max_running",
                          type=int, metavar="N",
                          help="cap on running requests (default: the workload's own; above --max-bs "
                               "some batches run eager as batch_too_large)")
    workload.add_argument("--prompt-len", metavar="MIN,MAX", help="prompt lengths, uniform (default: the workload's)")
    workload.add_argument("--output-len", metavar="MIN,MAX", help="output lengths, uniform (default: the workload's)")
    length = workload.add_mutually_exclusive_group()
    length.add_argument("--steps", type=int, help="stop after this many scheduler iterations (default 500)")
    length.add_argument("--duration", type=float, metavar="S", help="stop after S seconds of running (up to 30 days)")

    telemetry = run.add_argument_group("telemetry")
    telemetry.add_argument("--name", help="a human name for the run, up to 200 characters (default: "
                                           "model-workload-backend)")
    telemetry.add_argument("--run-id", help="the run's id: letters, digits and . _ : - , up to 128 (default: random)")
    telemetry.add_argument("--events", metavar="FILE", help="write the run as JSON lines to FILE")
    telemetry.add_argument("--collector", metavar="URL", help="stream events to a replayscope collector")
    telemetry.add_argument("--token", default=None,
                           help="bearer token for the collector (default: $REPLAYSCOPE_TOKEN)")
    telemetry.add_argument("--spool", metavar="FILE", help="where to keep events while the collector is "
                                                           "unreachable (default: replayscope-spool-RUN.jsonl)")
    telemetry.add_argument("--time-every", type=int, default=CUDA_TIME_EVERY, metavar="N",
                           help="on CUDA, time the first step of each stage, mode and batch size and then "
                                "every Nth one with CUDA events (1: every step); the others are recorded "
                                "without a duration. CPU steps are all timed")
    telemetry.add_argument("--graph-sample", type=_positive_int, default=1, metavar="N",
                           help="send 1 in N graph steps one by one and the others as exact per-second counts "
                                "(eager and padded steps are always sent): ~N times less raw data, same totals, "
                                "ratios, alerts and batch-size histogram")
    telemetry.add_argument("--version-tag", metavar="TAG",
                           help="the version of what you deploy (a release tag, up to 64 characters): the fleet page "
                                "groups runs by it")
    telemetry.add_argument("--quiet", action="store_true", help="no progress bars")

    faults = run.add_argument_group("fault injection", "make a run fail or slow down on purpose, to see how "
                                                       "it shows on the dashboard")
    faults.add_argument("--fail-capture", metavar="SIZES",
                        help="make the capture of these sizes fail (a host sync inside capture on CUDA), "
                             "to exercise the degradation ladder")
    faults.add_argument("--slow-capture", metavar="SIZE:SECONDS[,...]",
                        help="the capture of SIZE takes SECONDS longer (a sleep), e.g. 8:5")
    faults.add_argument("--slow-load-mbps", type=float, metavar="MB_PER_S",
                        help="the weight load lasts as long as reading the weights at this many MB/s "
                             "(10^6 bytes) would (a sleep after loading), as from slow storage")
    faults.add_argument("--memory-cap-gib", type=float, metavar="GIB",
                        help="cap this process's GPU memory (torch.cuda.set_per_process_memory_fraction): "
                             "allocations past it fail with out of memory, as on a smaller or shared GPU")
    run.set_defaults(handler=run_command)

    from replayscope.runner.trace.cli import add_parser as add_trace_parser
    add_trace_parser(sub)


def _backend(args) -> str:
    if args.enforce_eager:
        if args.backend not in (None, "auto", "disabled"):      # auto leaves the choice to the flags
            raise ReplayscopeError(f"--enforce-eager runs without graphs; it contradicts --backend {args.backend}")
        return "disabled"
    return args.backend or "auto"


def _sizes_and_max_bs(args) -> tuple[tuple[int, ...] | None, int]:
    from replayscope.contract.capture_sizes import parse_capture_sizes

    sizes = parse_capture_sizes(" ".join(args.capture_sizes)) if args.capture_sizes else None
    if sizes and args.max_bs is not None and args.max_bs != sizes[-1]:
        raise ReplayscopeError(f"--max-bs {args.max_bs} differs from the largest of --capture-sizes "
                               f"({sizes[-1]}); give one or make them agree")
    return sizes, sizes[-1] if sizes else (32 if args.max_bs is None else args.max_bs)


def config_from_args(args) -> RunConfig:
    from replayscope.runner.engine import RunConfig
    from replayscope.contract.capture_sizes import parse_capture_sizes

    if args.events and os.path.isdir(args.events):
        raise ReplayscopeError(f"--events {args.events} is a directory")
    if args.events and not os.path.isdir(os.path.dirname(os.path.abspath(args.events))):
        raise ReplayscopeError(f"--events {args.events}: its directory does not exist")
    _check_record_flags(args)
    backend = _backend(args)
    sizes, max_bs = _sizes_and_max_bs(args)
    overrides = {"arrival_rate": args.arrival_rate, "max_running": args.max_running,
                 "prompt_len": _length_range("--prompt-len", args.prompt_len),
                 "output_len": _length_range("--output-len", args.output_len)}
    failing = parse_capture_sizes(args.fail_capture) if args.fail_capture else ()
    return RunConfig(
        backend=backend, preset=None if args.model_dir else (args.preset or "tiny"),
        model_dir=args.model_dir, workload=args.workload, steps=args.steps, duration_s=args.duration,
        max_bs=max_bs, capture_sizes=sizes, padding=not args.no_padding,
        compile=args.compile, seed=args.seed, parity_every=args.parity_every, time_every=args.time_every,
        lora_graph_adapters=args.lora_graph_adapters, device=args.device, name=args.name,
        run_id=args.run_id, workload_overrides={k: v for k, v in overrides.items() if v is not None},
        fail_capture_sizes=failing, slow_capture=_slow_captures(args.slow_capture),
        slow_load_mbps=args.slow_load_mbps, memory_cap_gib=args.memory_cap_gib, progress=not args.quiet)


# The flags that become fields of the run record, checked against the wire contract up front
# (a 300-character --name or --run-id a/b was refused only by the collector, after the run).
RECORD_FLAGS = {"--name": "name", "--run-id": "run_id", "--version-tag": "version"}


def _check_record_flags(args) -> None:
    from replayscope.contract.wire import WireError, check_run_field

    for flag, field_name in RECORD_FLAGS.items():
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is None:
            continue
        try:
            check_run_field(field_name, value)
        except WireError as error:
            shown = value if len(value) <= 40 else f"{value[:40]}... ({len(value)} characters)"
            raise ReplayscopeError(f"{flag} {shown!r}: {error.message}") from None


def _slow_captures(text: str | None) -> dict[int, float]:
    """``8:5,16:2.5`` -> {8: 5.0, 16: 2.5}."""
    if not text:
        return {}
    out: dict[int, float] = {}
    for item in text.split(","):
        try:
            size, seconds = item.split(":")
            out[int(size)] = float(seconds)
        except ValueError:
            raise ReplayscopeError(f"--slow-capture takes SIZE:SECONDS[,SIZE:SECONDS...], got {text!r}") from None
    return out


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _length_range(flag: str, text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        low, high = (int(part) for part in text.split(","))
    except ValueError:
        raise ReplayscopeError(f"{flag} takes MIN,MAX (two integers), got {text!r}") from None
    return low, high


def make_sink(args):
    from replayscope.contract.sinks import HttpSink, JsonlSink

    sinks = []
    if args.events:
        sinks.append(JsonlSink(args.events))
    if args.collector:
        if not args.collector.startswith(("http://", "https://")):
            raise ReplayscopeError(f"--collector {args.collector!r} is not an http(s) URL")
        sinks.append(HttpSink(args.collector, token=environment.token(args.token), spool_path=args.spool))
    if not sinks:
        return None
    return sinks[0] if len(sinks) == 1 else TeeSink(sinks)


class TeeSink:
    """Several sinks at once (e.g. --events and --collector)."""

    def __init__(self, sinks):
        self.sinks = sinks

    def open(self, run):
        for sink in self.sinks:
            sink.open(run)

    def write(self, events):
        for sink in self.sinks:
            sink.write(events)

    def close(self):
        for sink in self.sinks:
            sink.close()


def require_torch() -> None:
    """One line naming the extra to install when torch is missing (the collector's install lacks it)."""
    try:
        import torch  # noqa: F401
    except ImportError as error:
        raise ReplayscopeError(f"this command runs a model and needs torch ({error}): "
                               f"pip install 'replayscope[runner]' (on a GPU host, install your CUDA "
                               f"build of torch >= 2.4 first)") from None


def run_command(args) -> int:
    require_torch()
    from replayscope.runner.emitter import Emitter, sigterm_as_interrupt
    from replayscope.runner.engine import DecodeEngine

    config = config_from_args(args)          # every flag is checked before anything is written
    if config.model_dir:
        from replayscope.runner.checkpoint import check_checkpoint
        check_checkpoint(config.model_dir)   # a bad directory fails here, before any event is written
    engine = DecodeEngine(config)
    sink = make_sink(args)
    record = engine.run_record()
    if args.version_tag:
        record["version"] = args.version_tag
    emitter = Emitter(sink, record, graph_sample=args.graph_sample) if sink is not None else None
    engine.emitter = emitter
    with sigterm_as_interrupt(), emitter if emitter is not None else contextlib.nullcontext():
        engine.setup()                       # the emitter ends the run however it ends (SIGTERM: interrupted)
        stats = engine.run()
    print(summary_line(record, engine, stats), file=sys.stderr)
    shortfall = telemetry_shortfall(emitter, sink)
    if shortfall:                            # the run ran, but its record is not all where it was sent
        print(f"replayscope run: {shortfall}", file=sys.stderr)
        return EXIT_INCOMPLETE
    return EXIT_DONE


def telemetry_shortfall(emitter, sink) -> str | None:
    """What of the run's events did not get where they were sent (None: all did)."""
    parts = []
    if emitter is not None and emitter.lost:
        parts.append(f"{emitter.lost} events could not be written (the sink failed, see above)")
    left = sum(getattr(s, "spooled", 0) for s in getattr(sink, "sinks", [sink]))
    if left:
        parts.append(f"{left} events were not delivered to the collector (kept in the spool, see above)")
    return "; ".join(parts) or None


def summary_line(record, engine, stats) -> str:
    steps = max(stats.steps, 1)
    modes = ", ".join(f"{m} {stats.modes[m]} ({100 * stats.modes[m] / steps:.1f}%)"
                      for m in ("graph", "padded", "eager"))
    reasons = ", ".join(f"{r} {n}" for r, n in stats.reasons.most_common())
    return (f"run {record['run_id']} ({record['name']}, backend {engine.backend} on {record['device']}): "
            f"{stats.steps} steps in {stats.wall_s:.1f}s; {modes}; eager reasons: {reasons or 'none'}")
