"""Generated requests and a continuous-batching scheduler over them, seeded end to end.

Time is virtual (each iteration advances the clock by ``step_time_s``), so a seed
fixes the whole sequence of batches whatever the hardware. Requests can carry
features that change the computation: a LoRA adapter, a grammar (a token mask on
the logits, which may switch mid-generation), or speculative decoding (verify steps
of k+1 tokens per request, k varying).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field, replace

from replayscope.contract.errors import ReplayscopeError


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    arrival_rate: float = 40.0                    # mean requests per virtual second
    burst_period_s: float = 0.0                   # >0: the rate swings between 0.2x and 1.8x over this period
    prompt_len: tuple[int, int] = (8, 48)         # uniform, inclusive
    output_len: tuple[int, int] = (8, 64)
    max_running: int = 48
    max_prefill_requests: int = 8                 # new requests admitted per prefill iteration
    prefill_wait_s: float = 0.1                   # admit once this many arrive or the oldest waited this long
    step_time_s: float = 0.02
    lora_fraction: float = 0.0                    # share of requests with an adapter
    num_adapters: int = 0
    grammar_fraction: float = 0.0                 # share of requests with a grammar
    num_grammars: int = 4
    grammar_switch_prob: float = 0.0              # per decode step, per grammar request
    spec_fraction: float = 0.0                    # share of requests decoded speculatively
    spec_draft_lens: tuple[int, ...] = (3,)       # k per verify step, drawn uniformly

    def __post_init__(self) -> None:
        if not self.arrival_rate > 0:
            raise ReplayscopeError(f"arrival rate must be positive, got {self.arrival_rate}")
        if self.max_running < 1:
            raise ReplayscopeError(f"max running requests must be at least 1, got {self.max_running}")
        for name, (low, high) in (("prompt length", self.prompt_len), ("output length", self.output_len)):
            if not 1 <= low <= high:
                raise ReplayscopeError(f"{name} range must be 1 <= MIN <= MAX, got {low},{high}")

    @property
    def max_tokens_per_request(self) -> int:
        return self.prompt_len[1] + self.output_len[1] + max(self.spec_draft_lens) + 1


WORKLOADS: dict[str, WorkloadSpec] = {
    "decode-only": WorkloadSpec("decode-only", arrival_rate=60.0, burst_period_s=4.0, max_running=32),
    "lora": WorkloadSpec("lora", burst_period_s=4.0, lora_fraction=0.5, num_adapters=4),
    "grammar": WorkloadSpec("grammar", burst_period_s=4.0, grammar_fraction=0.5, grammar_switch_prob=0.02),
    "spec": WorkloadSpec("spec", burst_period_s=4.0, spec_fraction=1.0, spec_draft_lens=(3, 3, 3, 5)),
    # Everything at once; max_running above the default --max-bs so bursts overflow it.
    "mixed": WorkloadSpec("mixed", arrival_rate=12.0, burst_period_s=6.0, max_running=48,
                          output_len=(16, 96), lora_fraction=0.06, num_adapters=4,
                          grammar_fraction=0.25, grammar_switch_prob=0.004, spec_fraction=0.15,
                          spec_draft_lens=(3, 3, 3, 5)),
}


def workload_by_name(name: str, **overrides) -> WorkloadSpec:
    """A named workload, with some of its fields overridden (e.g. arrival_rate=20.0)."""
    try:
        spec = WORKLOADS[name]
    except KeyError:
        raise ReplayscopeError(f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}") from None
    return replace(spec, **{k: v for k, v in overrides.items() if v is not None})


@dataclass
class Request:
    id: int
    arrival_s: float
    prompt: list[int]
    max_new_tokens: int
    adapter: int = 0                 # 0: no adapter
    grammar: int | None = None
    speculative: bool = False
    slot: int = -1
    output: list[int] = field(default_factory=list)
    grammar_switched: bool = False   # set for the step in which its grammar changed
    draft: list[int] = field(default_factory=list)

    @property
    def length(self) -> int:
        """Tokens in the cache once the last emitted token is written."""
        return len(self.prompt) + len(self.output)

    @property
    def last_token(self) -> int:
        return self.output[-1] if self.output else self.prompt[-1]

    @property
    def done(self) -> bool:
        return len(self.output) >= self.max_new_tokens


@dataclass
class Iteration:
    """One scheduler iteration: a prefill of new requests, a decode, or a verify step."""

    stage: str                       # prefill | decode | verify
    requests: list[Request]
    draft_len: int = 0               # k, for verify

    @property
    def batch_size(self) -> int:
        return len(self.requests)


class Scheduler:
    """Continuous batching: admit arrivals up to ``max_running``, otherwise decode the running."""

    def __init__(self, spec: WorkloadSpec, seed: int, vocab_size: int):
        self.spec = spec
        self.vocab_size = vocab_size
        self.rng = random.Random(seed)
        self.clock = 0.0
        self.next_arrival = self._draw_gap()
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.free_slots = list(range(spec.max_running - 1, -1, -1))
        self.finished = 0
        self._ids = 0
        self._turn = 0

    def _rate(self) -> float:
        if self.spec.burst_period_s <= 0:
            return self.spec.arrival_rate
        phase = 2 * math.pi * self.clock / self.spec.burst_period_s
        return self.spec.arrival_rate * (1.0 + 0.8 * math.sin(phase))

    def _draw_gap(self) -> float:
        return self.rng.expovariate(max(self._rate(), 1e-3))

    def _new_request(self) -> Request:
        spec, rng = self.spec, self.rng
        self._ids += 1
        prompt = [rng.randrange(1, self.vocab_size) for _ in range(rng.randint(*spec.prompt_len))]
        request = Request(self._ids, self.clock, prompt, rng.randint(*spec.output_len))
        if spec.num_adapters and rng.random() < spec.lora_fraction:
            request.adapter = rng.randint(1, spec.num_adapters)
        if rng.random() < spec.grammar_fraction:
            request.grammar = rng.randrange(spec.num_grammars)
        elif rng.random() < spec.spec_fraction:
            request.speculative = True
        return request

    def _arrive(self) -> None:
        while self.next_arrival <= self.clock:
            self.waiting.append(self._new_request())
            self.next_arrival += self._draw_gap()

    def _prefill_due(self) -> bool:
        """Batch arrivals into fewer prefills, as engines do, unless nothing else can run."""
        return (not self.running or len(self.waiting) >= self.spec.max_prefill_requests
                or self.clock - self.waiting[0].arrival_s >= self.spec.prefill_wait_s)

    def next_iteration(self) -> Iteration | None:
        """The next batch to run, or None when nothing is waiting or running yet."""
        self.clock += self.spec.step_time_s
        self._arrive()
        if self.waiting and self.free_slots and self._prefill_due():
            admitted = []
            while self.waiting and self.free_slots and len(admitted) < self.spec.max_prefill_requests:
                request = self.waiting.popleft()
                request.slot = self.free_slots.pop()
                admitted.append(request)
            self.running.extend(admitted)
            return Iteration("prefill", admitted)
        if not self.running:
            return None
        speculative = [r for r in self.running if r.speculative]
        plain = [r for r in self.running if not r.speculative]
        self._turn += 1
        if speculative and (not plain or self._turn % 2 == 0):
            return Iteration("verify", speculative, self.rng.choice(self.spec.spec_draft_lens))
        for request in plain:
            request.grammar_switched = False
            if request.grammar is not None and self.rng.random() < self.spec.grammar_switch_prob:
                request.grammar = (request.grammar + 1 + self.rng.randrange(self.spec.num_grammars - 1)) \
                    % self.spec.num_grammars if self.spec.num_grammars > 1 else request.grammar
                request.grammar_switched = True
        return Iteration("decode", plain)

    def complete(self, iteration: Iteration, new_tokens: list[list[int]]) -> None:
        """Append each request's new tokens; retire the finished ones and free their slots."""
        for request, tokens in zip(iteration.requests, new_tokens):
            room = request.max_new_tokens - len(request.output)
            request.output.extend(tokens[:room])
            request.grammar_switched = False
        still = []
        for request in self.running:
            if request.done:
                self.free_slots.append(request.slot)
                self.finished += 1
            else:
                still.append(request)
        self.running = still
