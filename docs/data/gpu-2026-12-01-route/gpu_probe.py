"""Where the added host time goes on the GPU host: untimed/timed/sampled, synchronised and back to back."""
import json, os, statistics, sys, time, torch
sys.path.insert(0, ".")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchmarks.pairing import paired, paired_pipelined
from benchmarks.runner_bench import decode_inputs, NullSink, RUN, bare_loop, UNTIMED, host_cost_cpu
from replayscope.runner.emitter import Emitter
from replayscope.runner.graphs import GraphRunner
from replayscope.runner.model import ModelArgs, Transformer
from replayscope.runner.plan import CapturePlan
from leanroute import Lean
out = {}
def main():
    for preset in sys.argv[1].split(","):
        args = ModelArgs.from_preset(preset)
        model = Transformer.random(args, seed=0, device="cuda", dtype=torch.bfloat16)
        model.setup_caches(num_slots=65, max_seq_len=512)
        def step(tokens, positions, slots):
            logits = model(tokens, positions, slots)
            return logits.argmax(-1), logits
        em = Emitter(NullSink(), RUN, flush_interval_s=0.05).start()
        r = Lean(step, decode_inputs(64), CapturePlan((8, 64)), backend="cuda", device="cuda", emitter=em, progress=False)
        r._routes = {}
        with torch.inference_mode():
            r.capture()
            for bs in (8, 64):
                inputs = {"tokens": torch.randint(1, args.vocab_size, (bs, 1), device="cuda"),
                          "positions": torch.randint(0, 500, (bs, 1), device="cuda"),
                          "slots": torch.randperm(64, device="cuda")[:bs]}
                bare = bare_loop(r, bs, inputs)
                cur = lambda: GraphRunner.step(r, inputs)
                lean = lambda: r.step(inputs)
                lean(); lean()
                assert (("decode", bs) in r._routes), r._routes
                ev = torch.cuda.Event(enable_timing=True)
                ev2 = torch.cuda.Event(enable_timing=False)
                s = torch.cuda.current_stream()
                def bare_rec():
                    bare(); ev.record(s)
                def bare_rec_nt():
                    bare(); ev2.record(s)
                def rec_bare():
                    ev.record(s); bare()
                row = {}
                it = int(sys.argv[2])
                row["sync_same"] = paired(bare, bare, it)
                for every in (UNTIMED, 8, 1):
                    r._clock.every = every
                    row[f"sync_cur_{every}"] = paired(bare, cur, it)
                    row[f"sync_lean_{every}"] = paired(bare, lean, it)
                    row[f"b2b_cur_{every}"] = paired_pipelined(bare, cur, it // 3)
                    row[f"b2b_lean_{every}"] = paired_pipelined(bare, lean, it // 3)
                row["b2b_same"] = paired_pipelined(bare, bare, it // 3)
                row["sync_rec_after"] = paired(bare, bare_rec, it)
                row["sync_rec_after_notiming"] = paired(bare, bare_rec_nt, it)
                row["sync_rec_before"] = paired(bare, rec_bare, it)
                row["b2b_rec_after"] = paired_pipelined(bare, bare_rec, it // 3)
                row["b2b_rec_after_notiming"] = paired_pipelined(bare, bare_rec_nt, it // 3)
                row["b2b_rec_before"] = paired_pipelined(bare, rec_bare, it // 3)
                r._clock.every = 8
                out[f"{preset}/{bs}"] = row
                print(preset, bs, flush=True)
                for k, v in row.items():
                    print(f"  {k:28s} base {v['baseline_host_us']:7.1f} cand {v['candidate_host_us']:7.1f} added {v['added_host_us']:6.1f}", flush=True)
        em.close()
        del r, model
        torch.cuda.empty_cache()
t0 = time.time()
print("cpu host cost", host_cost_cpu([8]), flush=True)
main()
print("took", time.time() - t0)
json.dump(out, open(os.environ.get("OUT", ".") + "/probe.json", "w"), indent=1)
