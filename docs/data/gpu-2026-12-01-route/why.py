"""Which part of the instrumented step costs what, synchronised, on this host (136m/3b bs 8)."""
import gc, json, os, statistics, sys, time, torch
sys.path.insert(0, "."); sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchmarks.pairing import paired, paired_pipelined
from benchmarks.runner_bench import decode_inputs, NullSink, RUN, bare_loop, UNTIMED, python_spin
from replayscope.runner.emitter import Emitter
from replayscope.runner.graphs import GraphRunner
from replayscope.runner.model import ModelArgs, Transformer
from replayscope.runner.plan import CapturePlan
from leanroute import Lean
out = {}
PAIRS = int(sys.argv[2])
for preset in sys.argv[1].split(","):
    args = ModelArgs.from_preset(preset)
    model = Transformer.random(args, seed=0, device="cuda", dtype=torch.bfloat16)
    model.setup_caches(num_slots=65, max_seq_len=512)
    def step(tokens, positions, slots):
        logits = model(tokens, positions, slots)
        return logits.argmax(-1), logits
    em = Emitter(NullSink(), RUN, flush_interval_s=0.05).start()
    idle_em = Emitter(NullSink(), RUN, flush_interval_s=0.05)      # never started: no flush thread
    r = Lean(step, decode_inputs(64), CapturePlan((8, 64)), backend="cuda", device="cuda", emitter=em, progress=False)
    r._routes = {}
    with torch.inference_mode():
        r.capture()
        r._clock.every = UNTIMED
        bs = 8
        inputs = {"tokens": torch.randint(1, args.vocab_size, (bs, 1), device="cuda"),
                  "positions": torch.randint(0, 500, (bs, 1), device="cuda"),
                  "slots": torch.randperm(64, device="cuda")[:bs]}
        bare = bare_loop(r, bs, inputs)
        cur = lambda: GraphRunner.step(r, inputs)
        lean = lambda: r.step(inputs)
        lean(); lean()
        spin1, spin1_us = python_spin(1.0)
        objs = [r, r._clock, em, r.plan, r._plan, inputs, r._graphs, r._buffers, args, model]
        def touch():          # read attributes across many objects: a larger footprint, little time
            n = 0
            for o in objs:
                d = getattr(o, "__dict__", o)
                for k in list(d)[:8]:
                    n += 1
            return n
        def spin_before(): spin1(); bare()
        def check_before(): r._checked(inputs, "decode"); bare()
        def touch_before(): touch(); bare()
        def emit_after(): bare(); em.step("decode", "graph", 8, 8, 8, 0, None, None)
        def swap_emitter(e):
            def around():
                r.emitter = e
                return lambda: setattr(r, "emitter", em)
            return around
        def gc_off():
            gc.disable()
            return gc.enable
        row = {"spin1_us": spin1_us}
        t0 = time.perf_counter(); touch(); row["touch_hot_us"] = None
        variants = [("floor", bare, None), ("spin1_before", spin_before, None), ("touch_before", touch_before, None),
                    ("check_before", check_before, None), ("emit_after", emit_after, None),
                    ("cur", cur, None), ("cur_no_emitter", cur, swap_emitter(None)),
                    ("cur_emitter_no_thread", cur, swap_emitter(idle_em)), ("cur_gc_off", cur, gc_off),
                    ("lean", lean, None), ("lean_no_emitter", lean, swap_emitter(None)), ("cur_again", cur, None)]
        for name, fn, around in variants:
            res = paired(bare, fn, PAIRS, around_candidate=around)
            row[name] = {"added_us": res["added_host_us"], "bare_us": res["baseline_host_us"], "ratio": res["ratio"],
                         "added_ms_us": (res["candidate_ms"] - res["baseline_ms"]) * 1e3}
            print(f"{preset} {name:24s} host added {res['added_host_us']:6.1f} us (bare {res['baseline_host_us']:6.1f})"
                  f"  ratio {res['ratio']:.4f}  step ms {res['baseline_ms']:.3f} -> {res['candidate_ms']:.3f}", flush=True)
        idle_em._queue.clear()
        out[preset] = row
    em.close()
    del r, model
    torch.cuda.empty_cache()
json.dump(out, open(os.environ.get("OUT", ".") + "/why.json", "w"), indent=1)
