"""Session 11 call 2: what makes the runner's timed step cost 25-35 µs back to back on the model's graph."""
import os, statistics, sys, time
import torch
from benchmarks.runner_bench import RUN, UNTIMED, bare_loop, decode_batch, decode_inputs, decode_model
from replayscope.contract.sinks import JsonlSink
from replayscope.runner.emitter import Emitter
from replayscope.runner.graphs import GraphRunner
from replayscope.runner.plan import CapturePlan
from replayscope.runner.timing import CudaClock

ns = time.perf_counter_ns
split = {"record_start": [], "stop": []}

class SplitClock(CudaClock):
    __slots__ = ()
    def record_start(self):
        a = ns(); t = CudaClock.record_start(self); split["record_start"].append(ns() - a); return t
    @staticmethod
    def stop(timing):
        a = ns(); t = CudaClock.stop(timing); split["stop"].append(ns() - a); return t

for preset in sys.argv[1].split(","):
    bs, max_bs, seq = 8, 8, 512
    args, step = decode_model(preset, max_bs, seq)
    emitter = Emitter(JsonlSink(os.devnull), RUN).start()
    runner = GraphRunner(step, decode_inputs(max_bs), CapturePlan((bs,)), backend="cuda", device="cuda",
                         emitter=emitter, progress=False, time_every=UNTIMED)
    with torch.inference_mode():
        runner.capture()
        inputs = decode_batch(args, bs, max_bs, seq)
        plain = runner._clock
        split_clock = SplitClock(plain.index, 1)
        bare = bare_loop(runner, bs, inputs)
        pair_clock = CudaClock(plain.index, 1)
        def bare_timed():
            t = pair_clock.record_start(); bare(); pair_clock.stop(t); t.release()
        def bare_start_only():
            t = pair_clock.record_start(); bare(); t.release()
        def bare_end_only():
            t = pair_clock.pool.pop() if pair_clock.pool else None
            if t is None:
                t = pair_clock.record_start()
            t.stream = pair_clock.current_stream(); bare(); pair_clock.stop(t); t.release()
        sides = {"bare": bare, "bare + CudaClock pair": bare_timed, "bare + start record": bare_start_only,
                 "bare + end record": bare_end_only,
                 "runner untimed": None, "runner every step timed": None, "runner timed, split clock": None}
        readings = {k: [] for k in sides}
        for r in range(3):
            runner.step(inputs)
        names = list(sides)
        for block in range(int(sys.argv[2])):
            name = names[block % len(names)]
            if name == "runner untimed":
                runner._clock = plain; fn = lambda: runner.step(inputs)
            elif name == "runner every step timed":
                plain.every = 1; runner._clock = plain; fn = lambda: runner.step(inputs)
            elif name == "runner timed, split clock":
                runner._clock = split_clock; fn = lambda: runner.step(inputs)
            else:
                fn = sides[name]
            fn(); torch.cuda.synchronize()
            times = []
            for i in range(12):
                a = ns(); fn(); times.append(ns() - a)
            torch.cuda.synchronize()
            plain.every = UNTIMED; runner._clock = plain
            readings[name] += times[1:]
        base = statistics.median(readings["bare"]) / 1000
        print(f"== {preset} bs {bs}: back-to-back calls 2-12 of blocks of 12, median µs (added over bare)")
        for name, values in readings.items():
            m = statistics.median(values) / 1000
            print(f"{name:32s} {m:8.2f}  ({m - base:+.2f})  n={len(values)}")
        for k, v in split.items():
            print(f"split clock {k:20s} median {statistics.median(v)/1000:.2f} µs  p90 {sorted(v)[int(len(v)*0.9)]/1000:.2f}  n={len(v)}")
        for v in split.values():
            v.clear()
    emitter.close()
    del runner, step
    torch.cuda.empty_cache()
