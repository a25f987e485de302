"""The built-in decode workload: a Llama model, a continuous-batching scheduler and two
graph runners (decode, speculative verify), every step recorded through the emitter.

The reasons a step runs eager come from the batch itself through ``dispatch``: a
prefill, more requests than the largest graph, an adapter the graphs do not hold, a
grammar whose mask changed, a draft length the verify graphs were not captured with.
"""

from __future__ import annotations

import collections
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from replayscope.runner.capture import capturing_size
from replayscope.runner.checkpoint import load_checkpoint
from replayscope.runner.dispatch import BatchShape
from replayscope.contract.errors import ReplayscopeError
from replayscope.runner.graphs import GraphRunner, StaticInput, resolve_backend
from replayscope.runner.model import LoraWeights, ModelArgs, Transformer, default_dtype
from replayscope.contract.capture_sizes import MAX_CAPTURE_SIZE, default_capture_sizes
from replayscope.runner.plan import CapturePlan
from replayscope.runner.progress import Progress
from replayscope.runner.runner_core import CORE
from replayscope.runner.timing import CUDA_TIME_EVERY, step_timing
from replayscope.contract.wire import MAX_DURATION_S
from replayscope.runner.workload import Iteration, Request, Scheduler, workload_by_name

VERIFY_MAX_BS = 16        # speculative requests are a minority: fewer verify graphs
LORA_RANK = 8
PARITY_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 1e-2}


@dataclass
class RunConfig:
    backend: str = "auto"
    preset: str | None = "tiny"
    model_dir: str | None = None
    workload: str = "mixed"
    steps: int | None = None
    duration_s: float | None = None
    max_bs: int = 32
    capture_sizes: tuple[int, ...] | None = None
    padding: bool = True
    compile: bool = False
    seed: int = 0
    parity_every: int = 0
    time_every: int = CUDA_TIME_EVERY     # on CUDA, time 1 step in N of each stage, mode and batch size
    lora_graph_adapters: int = 3      # adapters 1..K live in the graphs' LoRA bank
    verify_draft_len: int = 3         # k the verify graphs are captured with
    device: str | None = None
    name: str | None = None
    run_id: str | None = None
    workload_overrides: dict[str, Any] = field(default_factory=dict)  # e.g. arrival_rate, max_running
    fail_capture_sizes: tuple[int, ...] = ()   # fault injection: make these captures fail
    slow_capture: dict[int, float] = field(default_factory=dict)  # fault injection: size -> extra seconds
    slow_load_mbps: float | None = None        # fault injection: weights load at this many MB/s
    memory_cap_gib: float | None = None        # cap on this process's GPU memory
    progress: bool = True

    def __post_init__(self) -> None:
        if self.steps is None and self.duration_s is None:
            self.steps = 500
        if self.steps is not None and self.steps < 1:
            raise ReplayscopeError(f"--steps must be at least 1, got {self.steps}")
        if self.duration_s is not None and not 0 < self.duration_s <= MAX_DURATION_S:   # nan, inf: never ends
            raise ReplayscopeError(f"--duration must be positive and at most {MAX_DURATION_S:g} s, got {self.duration_s}")
        if not 1 <= self.max_bs <= MAX_CAPTURE_SIZE:
            raise ReplayscopeError(f"--max-bs goes from 1 to {MAX_CAPTURE_SIZE}, got {self.max_bs}")
        if self.parity_every < 0:
            raise ReplayscopeError("--parity-every must be >= 0")
        if self.time_every < 1:
            raise ReplayscopeError(f"--time-every must be at least 1, got {self.time_every}")
        if self.slow_load_mbps is not None and not self.slow_load_mbps > 0:
            raise ReplayscopeError(f"--slow-load-mbps must be positive, got {self.slow_load_mbps}")
        if self.memory_cap_gib is not None and not self.memory_cap_gib > 0:
            raise ReplayscopeError(f"--memory-cap-gib must be positive, got {self.memory_cap_gib}")
        if any(size < 1 or not 0 <= seconds < 3600 for size, seconds in self.slow_capture.items()):
            raise ReplayscopeError("--slow-capture takes SIZE:SECONDS with SIZE >= 1 and 0 <= SECONDS < 3600")
        if (self.preset is None) == (self.model_dir is None):
            raise ReplayscopeError("give exactly one of --preset and --model-dir")
        if self.model_dir is not None and not Path(self.model_dir).is_dir():
            raise ReplayscopeError(f"--model-dir {self.model_dir}: no such directory")
        if self.preset is not None:
            ModelArgs.from_preset(self.preset)  # unknown names fail here, before anything starts
        workload_by_name(self.workload, **self.workload_overrides)

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.capture_sizes or default_capture_sizes(self.max_bs)


@dataclass
class RunStats:
    steps: int = 0
    modes: collections.Counter = field(default_factory=collections.Counter)
    reasons: collections.Counter = field(default_factory=collections.Counter)
    stages: collections.Counter = field(default_factory=collections.Counter)
    tokens: int = 0
    wall_s: float = 0.0


def pick_device(config: RunConfig) -> torch.device:
    if config.device:
        device = torch.device(config.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ReplayscopeError(f"--device {config.device}: CUDA is not available here")
        return device
    if config.backend == "cuda" and not torch.cuda.is_available():
        raise ReplayscopeError("--backend cuda needs a CUDA GPU; use --backend static (or auto) on CPU")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def grammar_table(num_grammars: int, vocab_size: int, device: torch.device) -> torch.Tensor:
    """Row 0 allows every token; row g+1 is grammar g's mask (a third of the vocabulary banned)."""
    tokens = torch.arange(vocab_size, device=device)
    rows = [torch.ones(vocab_size, dtype=torch.bool, device=device)]
    rows += [((tokens * 7 + g) % 3 != 0) for g in range(num_grammars)]
    return torch.stack(rows)


class DecodeEngine:
    """Loads the model, captures the graphs and runs the workload, emitting every step."""

    def __init__(self, config: RunConfig, emitter: Any = None):
        self.config = config
        self.emitter = emitter
        self.device = pick_device(config)
        self.backend = resolve_backend("compile" if config.compile and config.backend in ("auto", "cuda")
                                       else config.backend, self.device)
        self.spec = workload_by_name(config.workload, **config.workload_overrides)
        self.step_core = CORE                # the core its runners' steps run (replayscope.runner.runner_core)
        self.model: Transformer | None = None
        self.stats = RunStats()

    # -- run record -----------------------------------------------------------
    def run_record(self) -> dict[str, Any]:
        config = self.config
        model = config.preset if config.preset else os.path.basename(os.path.normpath(config.model_dir))
        return {
            "run_id": config.run_id or uuid.uuid4().hex[:16],
            "name": config.name or f"{model}-{config.workload}-{self.backend}",
            "source": "runner",
            "started_at": time.time(),
            "backend": self.backend,
            "model": model,
            "device": device_name(self.device),
            "torch_version": torch.__version__,
            "config": {
                "capture_sizes": list(config.sizes), "max_bs": config.max_bs, "padding": config.padding,
                "compile": self.backend == "compile", "workload": asdict(self.spec), "seed": config.seed,
                "lora_graph_adapters": config.lora_graph_adapters,
                "verify_draft_len": config.verify_draft_len, "parity_every": config.parity_every,
                "step_timing": step_timing(self.device.type == "cuda", config.time_every),
                "step_core": self.step_core,
                "fail_capture_sizes": list(config.fail_capture_sizes),
                "weights": "checkpoint" if config.model_dir else "random",
                "memory_cap_bytes": None if config.memory_cap_gib is None else int(config.memory_cap_gib * 2**30),
                "slow_load_mbps": config.slow_load_mbps,
                "slow_capture": {str(size): seconds for size, seconds in sorted(config.slow_capture.items())},
            },
        }

    # -- setup ----------------------------------------------------------------
    def _phase(self, name: str, started: float, mem_bytes: int | None = None) -> None:
        if self.emitter is not None:
            duration = time.perf_counter() - started
            self.emitter.emit("phase", phase=name, duration_s=duration, start_ts=time.time() - duration,
                              mem_bytes=mem_bytes)

    def setup(self) -> None:
        with torch.inference_mode():
            self._setup()

    def _setup(self) -> None:
        config, spec, device = self.config, self.spec, self.device
        torch.manual_seed(config.seed)
        self._cap_memory()
        started = time.perf_counter()
        if config.model_dir:
            with Progress(f"Loading safetensors weights ({os.path.basename(os.path.normpath(config.model_dir))})",
                          unit="tensors", enabled=config.progress) as bar:
                self.model = load_checkpoint(config.model_dir, device, progress=bar)
        else:
            with Progress(f"Building random weights ({config.preset})", unit="tensors",
                          enabled=config.progress) as bar:
                self.model = Transformer.random(ModelArgs.from_preset(config.preset), seed=config.seed,
                                                device=device, dtype=default_dtype(device), progress=bar)
        args = self.model.args
        param_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        if config.slow_load_mbps:
            # fault injection: as if the bytes came from storage this slow
            time.sleep(max(0.0, param_bytes / (config.slow_load_mbps * 1e6) - (time.perf_counter() - started)))
        self._phase("load_weights", started, param_bytes)

        started = time.perf_counter()
        if spec.max_tokens_per_request > args.max_seq_len:
            raise ReplayscopeError(f"workload {spec.name} needs {spec.max_tokens_per_request} positions; "
                                   f"the model allows {args.max_seq_len}")
        self.num_slots = spec.max_running + 1            # the last slot is the pad rows' scratch
        self.model.setup_caches(self.num_slots, spec.max_tokens_per_request, device=device)
        cache_bytes = sum(b.numel() * b.element_size() for b in self.model.buffers())
        self.grammars = grammar_table(spec.num_grammars, args.vocab_size, device)
        self.request_masks = torch.ones(self.num_slots, args.vocab_size, dtype=torch.bool, device=device)
        self._phase("kv_cache", started, cache_bytes)

        self.lora = None
        self.graph_lora = None
        self.resident_rows = {0: 0}
        if spec.num_adapters:
            self.lora = LoraWeights.random(args, spec.num_adapters, LORA_RANK, seed=config.seed + 1,
                                           device=device, dtype=self.model.tok_embeddings.weight.dtype)
            resident = list(range(1, min(config.lora_graph_adapters, spec.num_adapters) + 1))
            self.graph_lora = self.lora.select(resident)
            self.resident_rows.update({adapter: row for row, adapter in enumerate(resident, start=1)})

        self.scheduler = Scheduler(spec, config.seed, args.vocab_size)
        self._build_runners()

        started = time.perf_counter()
        self._warmup()
        self._phase("warmup", started)
        if self.backend != "disabled":
            self.decode_runner.capture()
            if self.verify_runner is not None:
                self.verify_runner.capture()

    def _cap_memory(self) -> None:
        """--memory-cap-gib: the caching allocator refuses to hold more (out of memory past it)."""
        cap = self.config.memory_cap_gib
        if cap is None:
            return
        if self.device.type != "cuda":
            raise ReplayscopeError("--memory-cap-gib caps GPU memory: it needs a CUDA device")
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        total = torch.cuda.get_device_properties(index).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap * 2**30 / total), index)   # needs an index

    def _static_inputs(self, query_len: int) -> list[StaticInput]:
        return [StaticInput("tokens", (query_len,), torch.long),
                StaticInput("positions", (query_len,), torch.long),
                StaticInput("slots", (), torch.long, pad_value=self.num_slots - 1),
                StaticInput("lora_rows", (), torch.long)]

    def _build_runners(self) -> None:
        config = self.config
        plan = CapturePlan(config.sizes, padding=config.padding,
                           lora_adapters=frozenset(self.resident_rows) - {0})
        # `replayscope run` owns its process: raising Dynamo's recompile limit for --compile is ours to do.
        common = dict(backend=self.backend, device=self.device, emitter=self.emitter,
                      parity_every=config.parity_every, progress=config.progress, time_every=config.time_every,
                      raise_recompile_limit=self.backend == "compile", step_core=self.step_core,
                      parity_tolerance=PARITY_TOLERANCE.get(self.model.tok_embeddings.weight.dtype))
        decode_step = self._with_injected_faults(self._graph_step)
        self.decode_runner = GraphRunner(decode_step, self._static_inputs(1), plan, stage="decode", **common)
        self.verify_runner = None
        if self.spec.spec_fraction > 0:
            width = config.verify_draft_len + 1
            sizes = tuple(s for s in config.sizes if s <= VERIFY_MAX_BS) or config.sizes[:1]
            verify_plan = CapturePlan(sizes, padding=config.padding, query_len=width,
                                      lora_adapters=plan.lora_adapters)
            self.verify_runner = GraphRunner(self._graph_step, self._static_inputs(width), verify_plan,
                                             stage="verify", pool=self.decode_runner.pool, **common)

    def _with_injected_faults(self, step):
        failing = set(self.config.fail_capture_sizes)
        slow = dict(self.config.slow_capture)
        if not failing and not slow:
            return step
        slowed: set[int] = set()

        def step_with_injected_faults(**inputs):
            size = capturing_size()
            if size in slow and size not in slowed:
                slowed.add(size)
                time.sleep(slow[size])                # once per size, during its capture
            if size in failing:
                if self.device.type == "cuda":
                    if torch.cuda.is_current_stream_capturing():
                        torch.cuda.synchronize()  # a host sync inside capture: CUDA refuses it
                else:
                    raise RuntimeError(f"injected capture failure at bs={size}")
            return step(**inputs)
        return step_with_injected_faults

    def _warmup(self) -> None:
        """A few eager steps at the largest batch, as the engines' profile run does."""
        bs = min(self.config.max_bs, self.num_slots - 1)
        inputs = {"tokens": torch.zeros(bs, 1, dtype=torch.long, device=self.device),
                  "positions": torch.zeros(bs, 1, dtype=torch.long, device=self.device),
                  "slots": torch.full((bs,), self.num_slots - 1, dtype=torch.long, device=self.device),
                  "lora_rows": torch.zeros(bs, dtype=torch.long, device=self.device)}
        for _ in range(2):
            self._graph_step(**inputs)
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    # -- the computation --------------------------------------------------------
    def _graph_step(self, tokens, positions, slots, lora_rows, lora=None):
        """Decode or verify: logits, the slot's grammar mask, greedy tokens. Capturable."""
        bank = lora if lora is not None else self.graph_lora
        logits = self.model(tokens, positions, slots, bank, lora_rows if bank is not None else None)
        allowed = self.request_masks[slots].unsqueeze(1)
        logits = logits.masked_fill(~allowed, float("-inf"))
        return logits.argmax(-1), logits

    def _eager_step(self, tokens, positions, slots, lora_rows, switched_slots=None, switched_rows=None):
        """The eager path: any adapter (full bank), and grammar masks rebuilt for switched requests."""
        if switched_slots is not None:
            self.request_masks[switched_slots] = self.grammars[switched_rows]
        return self._graph_step(tokens, positions, slots, lora_rows, lora=self.lora)

    def _prefill(self, tokens, positions, slots, lora_rows, last_index):
        self.request_masks[slots] = self._mask_rows
        _, logits = self._graph_step(tokens, positions, slots, lora_rows, lora=self.lora)
        last = logits[torch.arange(tokens.shape[0], device=tokens.device), last_index]
        return last.argmax(-1, keepdim=True), last

    # -- the loop --------------------------------------------------------------
    def _tensor(self, rows: list) -> torch.Tensor:
        return torch.tensor(rows, dtype=torch.long, device=self.device)

    def _grammar_row(self, request: Request) -> int:
        return 0 if request.grammar is None else request.grammar + 1

    def run_prefill(self, iteration: Iteration) -> list[list[int]]:
        requests = iteration.requests
        longest = max(len(r.prompt) for r in requests)
        tokens = self._tensor([r.prompt + [0] * (longest - len(r.prompt)) for r in requests])
        positions = self._tensor([list(range(longest))] * len(requests))
        inputs = {"tokens": tokens, "positions": positions, "slots": self._tensor([r.slot for r in requests]),
                  "lora_rows": self._tensor([r.adapter for r in requests])}
        self._mask_rows = self.grammars[self._tensor([self._grammar_row(r) for r in requests])]
        shape = BatchShape("prefill", len(requests), longest, frozenset(r.adapter for r in requests))
        decision = self._decided(self.decode_runner, shape)
        last_index = self._tensor([len(r.prompt) - 1 for r in requests])
        outputs = self.decode_runner.run(decision, inputs, stage="prefill",
                                         num_tokens=sum(len(r.prompt) for r in requests),
                                         eager_fn=partial(self._prefill, last_index=last_index))
        return [[t] for t in outputs[0][:, 0].tolist()]

    def run_decode(self, iteration: Iteration, runner: GraphRunner, draft_len: int = 0) -> list[list[int]]:
        requests = iteration.requests
        width = draft_len + 1
        for r in requests:
            r.draft = (r.draft + [r.last_token] * draft_len)[:draft_len]
        tokens = self._tensor([[r.last_token] + r.draft for r in requests])
        positions = self._tensor([[r.length - 1 + i for i in range(width)] for r in requests])
        slots = self._tensor([r.slot for r in requests])
        switched = [r for r in requests if r.grammar_switched]
        shape = BatchShape(runner.stage, len(requests), width, frozenset(r.adapter for r in requests),
                           bool(switched))
        decision = self._decided(runner, shape)
        if decision.mode == "eager":
            inputs = {"tokens": tokens, "positions": positions, "slots": slots,
                      "lora_rows": self._tensor([r.adapter for r in requests])}
            eager = self._eager_step
            if switched:
                eager = partial(self._eager_step, switched_slots=self._tensor([r.slot for r in switched]),
                                switched_rows=self._tensor([self._grammar_row(r) for r in switched]))
            outputs = runner.run(decision, inputs, eager_fn=eager)
        else:
            inputs = {"tokens": tokens, "positions": positions, "slots": slots,
                      "lora_rows": self._tensor([self.resident_rows[r.adapter] for r in requests])}
            outputs = runner.run(decision, inputs)
        predictions = outputs[0].tolist()
        if draft_len == 0:
            return [[p[0]] for p in predictions]
        new_tokens = []
        for request, predicted in zip(requests, predictions):
            accepted = 0
            while accepted < draft_len and request.draft[accepted] == predicted[accepted]:
                accepted += 1
            new_tokens.append(request.draft[:accepted] + [predicted[accepted]])
            request.draft = predicted[accepted + 1:]   # the next draft: what the model expects next
        return new_tokens

    def _decided(self, runner: GraphRunner, shape: BatchShape):
        decision = runner.decide(shape)
        self.stats.modes[decision.mode] += 1
        if decision.reason is not None:
            self.stats.reasons[decision.reason] += 1
        return decision

    def step_once(self) -> Iteration | None:
        iteration = self.scheduler.next_iteration()
        if iteration is None:
            return None
        if iteration.stage == "prefill":
            new_tokens = self.run_prefill(iteration)
        elif iteration.stage == "verify":
            new_tokens = self.run_decode(iteration, self.verify_runner, iteration.draft_len)
        else:
            new_tokens = self.run_decode(iteration, self.decode_runner)
        self.scheduler.complete(iteration, new_tokens)
        self.stats.steps += 1
        self.stats.stages[iteration.stage] += 1
        self.stats.tokens += sum(len(t) for t in new_tokens)
        return iteration

    def mode_shares(self) -> str:
        """The steps so far by mode, as the progress line shows them."""
        steps = max(self.stats.steps, 1)
        return " ".join(f"{mode} {100 * self.stats.modes[mode] / steps:.0f}%" for mode in ("graph", "padded", "eager"))

    def run(self) -> RunStats:
        config = self.config
        started = time.perf_counter()
        deadline = None if config.duration_s is None else started + config.duration_s
        idle = 0
        label = f"Running {self.spec.name} workload" + (f" for {config.duration_s:g}s" if deadline else "")
        bar = Progress(label, config.steps, unit="steps", enabled=config.progress)
        bar.update_to(0, self.mode_shares)
        try:
            with torch.inference_mode():
                while True:
                    if config.steps is not None and self.stats.steps >= config.steps:
                        break
                    if deadline is not None and time.perf_counter() >= deadline:
                        break
                    if self.step_once() is None:
                        idle += 1
                        if idle > 100_000:
                            raise ReplayscopeError("the workload produced no requests")
                    bar.update_to(self.stats.steps, self.mode_shares)   # one clock read between redraws
        finally:
            bar.close(self.mode_shares())
        self.stats.wall_s = time.perf_counter() - started
        return self.stats
