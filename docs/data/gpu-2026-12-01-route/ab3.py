"""Before (runner/graphs.py of ce8bc7f) and after, against one bare loop, the three alternated call by call."""
import json, os, statistics, sys, time, torch
sys.path.insert(0, "."); sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchmarks.runner_bench import decode_inputs, NullSink, RUN, bare_loop, UNTIMED
from replayscope.runner.emitter import Emitter
from replayscope.runner.graphs import GraphRunner
from replayscope.runner.model import ModelArgs, Transformer
from replayscope.runner.plan import CapturePlan
import old_graphs
from replayscope.runner.timing import CudaClock
ITERS = int(sys.argv[2])


class OldClock(CudaClock):
    """ce8bc7f's runner calls clock.start(key), which the clock no longer has (added after this ran)."""
    __slots__ = ()

    def start(self, key):
        return self.record_start() if self.due(key) else None


def call_us(fn):
    started = time.perf_counter(); fn(); launched = time.perf_counter(); torch.cuda.synchronize()
    return (time.perf_counter() - started) * 1e3, (launched - started) * 1e6


def block_us(fn, n=16):
    torch.cuda.synchronize(); started = time.perf_counter()
    for _ in range(n):
        fn()
    launched = time.perf_counter(); torch.cuda.synchronize()
    return 0.0, (launched - started) / n * 1e6


def three_way(fns, measure, iters):
    names = list(fns)
    res = {k: [] for k in names}
    for i in range(iters):
        order = names[i % 3:] + names[:i % 3]
        for k in order:
            res[k].append(measure(fns[k]))
    med = statistics.median
    out = {}
    for k in ("old", "new"):
        out[k + "_added_us"] = med([c[1] - b[1] for b, c in zip(res["bare"], res[k])])
        if res[k][0][0]:
            out[k + "_ratio"] = med([c[0] / b[0] for b, c in zip(res["bare"], res[k])])
    out["new_minus_old_us"] = med([n[1] - o[1] for o, n in zip(res["old"], res["new"])])
    out["bare_us"] = med([b[1] for b in res["bare"]])
    return out


out = {}
for preset in sys.argv[1].split(","):
    args = ModelArgs.from_preset(preset)
    model = Transformer.random(args, seed=0, device="cuda", dtype=torch.bfloat16)
    model.setup_caches(num_slots=65, max_seq_len=512)
    def step(tokens, positions, slots):
        logits = model(tokens, positions, slots)
        return logits.argmax(-1), logits
    em = Emitter(NullSink(), RUN, flush_interval_s=0.05).start()
    runners = {}
    with torch.inference_mode():
        for name, cls in (("old", old_graphs.GraphRunner), ("new", GraphRunner)):
            runners[name] = cls(step, decode_inputs(64), CapturePlan((1, 8, 64)), backend="cuda", device="cuda",
                                emitter=em, progress=False)
            if name == "old" and not hasattr(CudaClock, "start"):
                runners[name]._clock = OldClock(None, runners[name]._clock.every)
            runners[name].capture()
        for bs in (1, 8, 64):
            inputs = {"tokens": torch.randint(1, args.vocab_size, (bs, 1), device="cuda"),
                      "positions": torch.randint(0, 500, (bs, 1), device="cuda"),
                      "slots": torch.randperm(64, device="cuda")[:bs]}
            fns = {"bare": bare_loop(runners["new"], bs, inputs),
                   **{name: (lambda r=r: r.step(inputs)) for name, r in runners.items()}}
            for f in fns.values():
                for _ in range(5):
                    f()
            row = {}
            for every, label in ((UNTIMED, "untimed"), (8, "sampled")):
                for r in runners.values():
                    r._clock.every = every
                row[label] = three_way(fns, call_us, ITERS)
            row["b2b_sampled"] = three_way(fns, block_us, ITERS // 4)
            out[f"{preset}/{bs}"] = row
            for label, m in row.items():
                ratios = f"ratio old {m['old_ratio']:.4f} new {m['new_ratio']:.4f}" if "old_ratio" in m else ""
                print(f"{preset:>5} bs {bs:>3} {label:12s} added old {m['old_added_us']:5.1f} new {m['new_added_us']:5.1f} "
                      f"us; new-old {m['new_minus_old_us']:5.1f}; bare {m['bare_us']:6.1f} {ratios}", flush=True)
    em.close()
    del runners, model
    torch.cuda.empty_cache()
json.dump(out, open(os.environ.get("OUT", ".") + "/ab3.json", "w"), indent=1)
