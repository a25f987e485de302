import time, statistics, torch, sys
sys.path.insert(0, ".")
from benchmarks.runner_bench import decode_inputs, NullSink, RUN, bare_loop
from replayscope.runner.emitter import Emitter
from replayscope.runner.graphs import GraphRunner
from replayscope.runner.plan import CapturePlan
from replayscope.runner.dispatch import BatchShape
torch.set_num_threads(1)

class Route:
    __slots__ = ("expected", "mode", "graph_bs", "views", "call", "result", "tokens", "padded", "seen", "every", "clock_key")

class Lean(GraphRunner):
    def step(self, inputs, *, stage=None, reason=None, num_tokens=None, adapters=frozenset(), grammar_switched=False):
        if reason is None and not adapters and not grammar_switched and num_tokens is None:
            stage = stage or self.stage
            first = self.inputs[0]
            try:
                raw_bs = inputs[first.name].shape[first.batch_dim]
                route = self._routes[(stage, raw_bs)]
            except (KeyError, IndexError, AttributeError, TypeError):
                route = None
            if route is not None and len(inputs) == len(route.expected):
                idx = self._cuda_index
                ok = True
                for name, shape, dtype in route.expected:
                    t = inputs.get(name)
                    if t is None or t.shape != shape or t.dtype is not dtype or (not t.is_cpu if idx is None else not t.is_cuda or t.get_device() != idx):
                        ok = False; break
                if ok and route.mode == "graph":
                    for name, view in route.views:
                        view.copy_(inputs[name], non_blocking=True)
                    if raw_bs > self._dirty_until:
                        self._dirty_until = raw_bs
                    # clock
                    route.seen += 1
                    timing = None
                    if self.emitter is not None:
                        timing = self._clock.start(route.clock_key)
                    out = route.call()
                    if self.emitter is not None:
                        self.emitter.step(stage, "graph", raw_bs, raw_bs, route.tokens, 0, None, self._clock.stop(timing))
                    return out if route.result is None else route.result
        out = super().step(inputs, stage=stage, reason=reason, num_tokens=num_tokens, adapters=adapters, grammar_switched=grammar_switched)
        self._learn(inputs, stage or self.stage)
        return out
    def _learn(self, inputs, stage):
        if not hasattr(self, "_routes"): self._routes = {}
        raw_bs = self._exact_batch_size(inputs)
        if raw_bs is None: return
        d = self._decisions.get((stage, raw_bs, self._plan.query_len))
        if d is None or d.mode != "graph": return
        r = Route(); r.expected = self._expected[raw_bs]; r.mode = d.mode; r.graph_bs = d.graph_bs
        r.views = self._row_views[raw_bs]; cap = self._graphs[d.graph_bs]; r.call = cap.call
        r.result = cap.outputs if cap.graph is not None else None
        r.tokens = raw_bs * self._plan.query_len; r.padded = 0; r.seen = 0; r.clock_key = (stage, "graph", raw_bs)
        self._routes[(stage, raw_bs)] = r

