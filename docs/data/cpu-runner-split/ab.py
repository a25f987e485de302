"""Before and after the GraphRunner split, in one process, on the CPU static backend with a trivial step.

    git show 88c1d90:runner/graphs.py > /tmp/old_graphs.py    # the runner before the split
    python docs/data/cpu-runner-split/ab.py /tmp/old_graphs.py [rounds]

1. Python work per call, counted (not timed, so the machine's load does not move it): opcodes,
   attribute loads and frames, before the launch (the step callable entered: on the static
   backend that is the 'replay') and in the whole call; step() of a batch size seen before,
   run(decision), step(reason=...).
2. Host time per call against one bare copy-and-call loop, the three (bare, old, new) alternated
   block by block, which goes first rotating per round, as benchmarks/pairing.py alternates:
   medians over rounds of each side's block mean, of (old - bare), (new - bare) and (new - old),
   and each side's best block. Warm: blocks of CALLS calls back to back; cold: each call after
   3 ms of idling, 20 calls a block.
"""
import dis, importlib.util, json, os, statistics, sys, time
sys.path.insert(0, os.getcwd())
import torch
from benchmarks.runner_bench import NullSink, RUN, decode_inputs, bare_loop
from replayscope.runner.dispatch import BatchShape
from replayscope.runner.emitter import Emitter
from replayscope.runner.graphs import GraphRunner
from replayscope.runner.plan import CapturePlan

spec = importlib.util.spec_from_file_location("old_graphs", sys.argv[1])
old_graphs = importlib.util.module_from_spec(spec); sys.modules["old_graphs"] = old_graphs; spec.loader.exec_module(old_graphs)

ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 150
CALLS = 500
ATTR = {"LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR"}
torch.set_num_threads(1)


def step(tokens, positions, slots):
    return tokens, positions


def count(fn):
    stats = {"before": {"ops": 0, "attrs": 0, "frames": 0}, "all": {"ops": 0, "attrs": 0, "frames": 0}}
    state = {"launched": False}

    def tracer(frame, event, arg):
        if event == "call":
            if frame.f_code is step.__code__:
                state["launched"] = True
            for key in ("all",) if state["launched"] else ("before", "all"):
                stats[key]["frames"] += 1
            frame.f_trace_opcodes = True
            return tracer
        if event == "opcode":
            name = dis.opname[frame.f_code.co_code[frame.f_lasti]]
            for key in ("all",) if state["launched"] else ("before", "all"):
                stats[key]["ops"] += 1
                stats[key]["attrs"] += name in ATTR
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return stats


def block_us(fn, calls):
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls * 1e6


def cold_us(fn, calls, idle_s=0.003):
    total = 0.0
    for _ in range(calls):
        time.sleep(idle_s)
        started = time.perf_counter()
        fn()
        total += time.perf_counter() - started
    return total / calls * 1e6


def three_way(fns, measure, rounds, calls):
    names = list(fns)
    res = {k: [] for k in names}
    for i in range(rounds):
        order = names[i % 3:] + names[:i % 3]
        for k in order:
            res[k].append(measure(fns[k], calls))
    med = statistics.median
    return {"bare_us": med(res["bare"]), "old_us": med(res["old"]), "new_us": med(res["new"]),
            "old_added_us": med([o - b for b, o in zip(res["bare"], res["old"])]),
            "new_added_us": med([n - b for b, n in zip(res["bare"], res["new"])]),
            "new_minus_old_us": med([n - o for o, n in zip(res["old"], res["new"])]),
            "bare_min_us": min(res["bare"]), "old_min_us": min(res["old"]), "new_min_us": min(res["new"]),
            "new_minus_old_iqr_us": (lambda q: q[2] - q[0])(statistics.quantiles([n - o for o, n in zip(res["old"], res["new"])], n=4))}


emitter = Emitter(NullSink(), RUN, flush_interval_s=0.05).start()
sizes = (1, 8, 64)
runners = {}
for name, cls in (("old", old_graphs.GraphRunner), ("new", GraphRunner)):
    runners[name] = cls(step, decode_inputs(64), CapturePlan(sizes), backend="static", device="cpu",
                        emitter=emitter, progress=False)
    runners[name].capture()


def batch(bs):
    return {"tokens": torch.ones(bs, 1, dtype=torch.long), "positions": torch.ones(bs, 1, dtype=torch.long),
            "slots": torch.arange(bs)}


out = {"counted": {}, "timed": {}}
print("Python work per call (counted):")
for bs in (8, 5):
    inputs = batch(bs)
    decision = runners["new"].decide(BatchShape("decode", bs))
    for label, make in (("step() seen before", lambda r: (lambda: r.step(inputs))),
                        ("run(decision)", lambda r: (lambda: r.run(decision, inputs))),
                        ("step(reason=...)", lambda r: (lambda: r.step(inputs, reason="grammar_switch")))):
        print(f"  bs {bs} ({decision.mode}) {label}:")
        for name, r in runners.items():
            fn = make(r)
            for _ in range(3):
                fn()
            s = count(fn)
            out["counted"][f"{bs}/{label}/{name}"] = s
            print(f"    {name}: before the launch {s['before']['ops']:3d} opcodes, {s['before']['attrs']:2d} attribute "
                  f"loads, {s['before']['frames']:2d} frames; whole call {s['all']['ops']:3d}, {s['all']['attrs']:2d}, "
                  f"{s['all']['frames']:2d}")
print(f"\nhost us per call, {ROUNDS} rounds (medians; best block in brackets):")
for bs in (1, 5, 8, 64):
    inputs = batch(bs)
    graph_bs = bs if bs in sizes else 8
    decision = runners["new"].decide(BatchShape("decode", bs))
    pairs = [(runners["new"]._buffers.tensors[s.name].narrow(s.batch_dim, 0, bs), inputs[s.name])
             for s in runners["new"].inputs]
    call = runners["new"]._capturer.graphs[graph_bs].call

    def bare():
        for buffer, value in pairs:
            buffer.copy_(value, non_blocking=True)
        call()
    steps = {"bare": bare, **{n: (lambda r=r: r.step(inputs)) for n, r in runners.items()}}
    runs = {"bare": bare, **{n: (lambda r=r: r.run(decision, inputs)) for n, r in runners.items()}}
    for fns in (steps, runs):
        for f in fns.values():
            for _ in range(200):
                f()
    row = {"step_warm": three_way(steps, block_us, ROUNDS, CALLS),
           "run_warm": three_way(runs, block_us, ROUNDS, CALLS),
           "step_cold": three_way(steps, cold_us, ROUNDS, 20)}
    out["timed"][bs] = row
    for label, m in row.items():
        print(f"  bs {bs:>3} ({decision.mode:6s}) {label:9s}: bare {m['bare_us']:6.2f} [{m['bare_min_us']:.2f}]  "
              f"old {m['old_us']:6.2f} [{m['old_min_us']:.2f}] (+{m['old_added_us']:5.2f})  "
              f"new {m['new_us']:6.2f} [{m['new_min_us']:.2f}] (+{m['new_added_us']:5.2f})  "
              f"new-old {m['new_minus_old_us']:+5.2f} (iqr {m['new_minus_old_iqr_us']:.2f})", flush=True)
emitter.close()
if os.environ.get("AB_JSON"):
    json.dump(out, open(os.environ["AB_JSON"], "w"), indent=1)
