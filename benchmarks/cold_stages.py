"""What each part of the runner's step costs on its first call after the caches were filled by other work.

    python -m benchmarks.cold_stages [--presets 136m,1b] [--sizes 8] [--rounds 300] [--evict-mib 64] [--json FILE]

``benchmarks.runner_overhead`` reads the runner's step after a synchronise against the bare loop's:
what the step adds when its code and objects are not in the host's caches. This splits that
step into its parts and reads each one alone the same way: a synchronise, then N MiB of host
memory written by a torch operation (the caches then hold that, and torch's dispatch of an
operation, as after a program's own work between two steps), then one call of the part, timed
(``cold``); then three more calls, the last one timed (``warm``). Every part runs once per round,
the order rotating round by round (``benchmarks.pairing.rotated``); each figure is the median
over the rounds. ``cold, less the empty call`` takes the call itself out (a Python call of a
function that does nothing, read cold the same way).

Parts: ``empty call``; ``inputs read`` (the three inputs looked up in the step's dict, one C
call); ``batch size`` (the first input's rows, by torch's C length as the compiled core reads it); ``route lookup`` (the plain route of stage and
batch size); ``fit check`` (the route's check: torch's tensor guards on the three inputs,
``replayscope.runner.fit_checks``); ``full match`` (``replayscope.runner.inputs.fits``: what the
step does without a fit check); ``event`` (the emitter's recorder taking the route's step);
``bare step`` (the copies into the static rows and the replay: the baseline); ``runner step``
(``GraphRunner.step`` whole, untimed on CUDA). On CUDA the
preset's model as ``benchmarks.runner_bench`` builds it; without CUDA the static backend with a
trivial step (every step timed on the host there).
"""

from __future__ import annotations

import argparse
import operator
import os
import statistics
import time
from typing import Callable

import torch

from benchmarks.harness import NullSink, write_json
from benchmarks.pairing import rotated
from benchmarks.runner_bench import RUN, UNTIMED, bare_loop, cpu_batch, decode_batch, decode_inputs, decode_model
from benchmarks.runner_overhead import evictor
from replayscope.contract.sinks import JsonlSink
from replayscope.runner.emitter import Emitter
from replayscope.runner.graphs import GraphRunner
from replayscope.runner.inputs import fits
from replayscope.runner.plan import CapturePlan

clock = time.perf_counter_ns


def parts(runner: GraphRunner, inputs: dict[str, torch.Tensor]) -> dict[str, Callable[[], object]]:
    """Each part of one plain step of ``inputs`` as a call of its own (the route made first)."""
    runner.step(inputs)                                   # the route, and its fit check
    runner.step(inputs)
    first = runner.inputs[0].name
    bs = inputs[first].shape[0]
    route = runner._routes.plain[(runner.stage, bs)]
    given = tuple(inputs[spec[0]] for spec in route.expected)
    read_inputs = operator.itemgetter(*(spec[0] for spec in route.expected))
    length = torch._C.TensorBase.__len__                # the C length the compiled core reads a batch size by
    check = route.fit_check
    if check is None:
        raise SystemExit("this torch gives no fit check (the runner matches every step in full): nothing to read")
    record = runner.emitter.step_fields
    plain_routes = runner._routes.plain
    stage = runner.stage
    bare = bare_loop(runner, bs, inputs)
    return {
        "empty call": lambda: None,
        "inputs read": lambda: read_inputs(inputs),
        "batch size": lambda: length(inputs[first]),
        "route lookup": lambda: plain_routes[(stage, bs)],
        "fit check": lambda: check(*given),
        "full match": lambda: fits(inputs, route.expected, route.cuda_index),
        "event": lambda: record(route.event, None),
        "bare step": bare,
        "runner step": lambda: runner.step(inputs),
    }


def read(named: dict[str, Callable[[], object]], rounds: int, sync: Callable[[], None],
         evict: Callable[[], object] | None, clear: Callable[[], None]) -> dict[str, dict[str, float]]:
    """Each part's cold and warm µs (medians over the rounds), the order rotating round by round."""
    def once(fn: Callable[[], object]) -> tuple[int, int]:
        sync()
        if evict is not None:
            evict()
        started = clock()
        fn()
        cold = clock() - started
        fn()
        fn()
        started = clock()
        fn()
        warm = clock() - started
        sync()
        clear()
        return cold, warm

    samples = rotated([(lambda _, fn=fn: once(fn)) for fn in named.values()], [None] * rounds)
    figures = {}
    for name, values in zip(named, samples):
        figures[name] = {"cold_us": statistics.median(c for c, _ in values) / 1000,
                         "warm_us": statistics.median(w for _, w in values) / 1000}
    floor = figures["empty call"]["cold_us"]
    for row in figures.values():
        row["cold_less_call_us"] = row["cold_us"] - floor
    return figures


def cuda_rows(presets: list[str], sizes: list[int], rounds: int, evict_mib: int, seq_len: int = 512) -> list[dict]:
    rows = []
    for preset in presets:
        max_bs = max(sizes)
        args, step = decode_model(preset, max_bs, seq_len)
        emitter = Emitter(JsonlSink(os.devnull), RUN).start()
        runner = GraphRunner(step, decode_inputs(max_bs), CapturePlan(tuple(sorted(set(sizes)))), backend="cuda",
                             device="cuda", emitter=emitter, progress=False, time_every=UNTIMED)
        try:
            with torch.inference_mode():
                runner.capture()
                for bs in sizes:
                    named = parts(runner, decode_batch(args, bs, max_bs, seq_len))
                    figures = read(named, rounds, torch.cuda.synchronize, evictor(evict_mib), lambda: None)
                    rows += [{"preset": preset, "bs": bs, "part": name, **row} for name, row in figures.items()]
        finally:
            emitter.close()
        del runner, step
        torch.cuda.empty_cache()
    return rows


def cpu_rows(sizes: list[int], rounds: int, evict_mib: int) -> list[dict]:
    def step(tokens, positions, slots):
        return tokens, positions

    emitter = Emitter(NullSink(), RUN, flush_interval_s=3600)      # not started: the queue is cleared by hand
    runner = GraphRunner(step, decode_inputs(max(sizes)), CapturePlan(tuple(sorted(set(sizes)))), backend="static",
                         device="cpu", emitter=emitter, progress=False)
    runner.capture()
    rows = []
    for bs in sizes:
        named = parts(runner, cpu_batch(bs))
        figures = read(named, rounds, lambda: None, evictor(evict_mib), emitter._queue.clear)
        rows += [{"preset": "static", "bs": bs, "part": name, **row} for name, row in figures.items()]
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| preset | bs | part | cold µs | cold, less the empty call µs | warm µs |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['preset']} | {r['bs']} | {r['part']} | {r['cold_us']:.2f} | {r['cold_less_call_us']:.2f} | "
                     f"{r['warm_us']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="136m,1b")
    parser.add_argument("--sizes", default="8")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--evict-mib", type=int, default=64, help="MiB written by a torch operation before each cold call")
    parser.add_argument("--json", default=None)
    options = parser.parse_args(argv)
    try:
        sizes = [int(size) for size in options.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes takes batch sizes separated by commas, not {options.sizes!r}")
    if options.rounds < 1 or options.evict_mib < 0 or min(sizes) < 1:
        parser.error("--rounds and every size must be at least 1, --evict-mib at least 0")
    cuda = torch.cuda.is_available()
    rows = (cuda_rows(options.presets.split(","), sizes, options.rounds, options.evict_mib) if cuda
            else cpu_rows(sizes, options.rounds, options.evict_mib))
    where = (f"{torch.cuda.get_device_name()}, " if cuda else "CPU (static backend, trivial step), ")
    print(f"{where}torch {torch.__version__}; {options.evict_mib} MiB written before each cold call; "
          f"median of {options.rounds} rounds")
    print(table(rows))
    write_json(options.json, {"evict_mib": options.evict_mib, "rounds": options.rounds, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
