"""Each engine's rules for a list of capture sizes, and the flag lines that set one.

The rules are read in the engines' own source; each names the file and the versions it
holds for. ``rules_for(run)`` applies them with what the run's configuration says (a log
gives some facts, not all: a rule that needs a fact the run did not give is listed in
``unknown``); ``generic_rules(engine)`` applies them with nothing known (the page checks a
proposal for the other engines too). Every flag line is one the engine's argument parser
accepts as written, for the versions on its label.

vLLM (sizes are token counts of a batch: a decode batch of ``n`` requests with ``k``
speculative tokens is ``n * (1 + k)`` tokens):

- 0.11.1 and later (PR #26016 added ``--cudagraph-capture-sizes`` and
  ``--max-cudagraph-capture-size`` to ``vllm/engine/arg_utils.py``, list arguments with
  ``nargs="+"``): ``VllmConfig._set_cudagraph_sizes`` in ``vllm/config/vllm.py``
  de-duplicates and sorts a given list and drops sizes above ``max_num_batched_tokens``;
  with tensor parallelism and sequence parallelism (``pass_config.enable_sp``) it drops
  sizes that are not a multiple of the TP size; a ``max_cudagraph_capture_size`` given
  with the list must equal its largest size (``ValueError`` otherwise); without a list the
  default is ``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)`` with ``max`` =
  ``min(max_num_seqs * (1 + k) * 2, 512)``. ``CompilationConfig.
  adjust_cudagraph_sizes_for_spec_decode`` (``vllm/config/compilation.py``) rounds the
  sizes up to multiples of ``1 + k`` for full decode graphs with speculative decoding.
- 0.10.x to 0.11.0 (``vllm/config/__init__.py``): ``CompilationConfig.
  init_with_cudagraph_sizes`` takes a given ``cudagraph_capture_sizes`` as it is
  (de-duplicated; the largest is the ``max_capture_size``); the command line's
  ``--cuda-graph-sizes N`` with one value means the default pattern up to ``N``, so a list
  is given as ``--compilation-config '{"cudagraph_capture_sizes": [...]}'``.
- Batches above the largest size run without graphs. Under ``FULL_DECODE_ONLY`` mixed
  prefill-decode batches never use graphs, so sizes above ``max_num_seqs * (1 + k)``
  serve nothing; under the default ``FULL_AND_PIECEWISE`` (0.11.0 and later) they serve
  mixed batches through piecewise graphs. ``--enforce-eager`` or ``cudagraph_mode``
  ``NONE``: no graphs.

SGLang (sizes are requests in a decode batch):

- Every version read: a given list sets the largest size (``ServerArgs.
  _handle_gpu_memory_settings`` in ``python/sglang/srt/server_args.py``:
  ``cuda_graph_max_bs = max(cuda_graph_bs)``); ``get_batch_sizes_to_capture`` in
  ``python/sglang/srt/model_executor/cuda_graph_runner.py`` drops sizes above
  ``max_running_requests`` and captures ``max_running_requests`` in their place, keeps
  only multiples of 2 with two-batch overlap and of the attention TP size with DP
  attention, sorted and de-duplicated; ``--disable-cuda-graph-padding`` serves only
  exact sizes; ``--disable-cuda-graph``: no graphs.
- The flags: ``--cuda-graph-bs`` (``nargs="+"``, ints) before the per-phase CUDA-graph
  flags of PR #23906 (June 2026); from then ``--cuda-graph-bs-decode``. Later main
  registers ``--cuda-graph-bs`` as a deprecated alias of it (``DeprecatedAliasStoreAction``
  in ``server_args.py``); whether every release in between does was not checked, so each
  spelling is labelled with the versions it was read for. SGLang's log does not print its
  version (a traced run has it, from the package): neither line is marked as the run's.
- These are the decode graphs. Prefill graphs are sized in tokens by their own flags
  (``--piecewise-cuda-graph-tokens``, ``--cuda-graph-bs-prefill`` after PR #23906) and are
  not chosen here.

This runner (``runner/plan.py``, ``app/cli/run.py``): any ascending sizes >= 1
(``CapturePlan``); ``--capture-sizes 1,2,4`` (commas or spaces) with ``--max-bs`` equal
to the largest (``replayscope.app.cli.run`` refuses a different one); batches never exceed the
workload's running requests, so sizes above them serve nothing; ``--no-padding`` serves
only exact sizes; ``--backend disabled`` / ``--enforce-eager``: no graphs. The verify
stage captures the sizes up to 16 (``replayscope.runner.engine.VERIFY_MAX_BS``).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from replayscope.contract.capture_sizes import default_capture_sizes

ENGINES = ("runner", "vllm", "sglang")
ENGINE_NAMES = {"runner": "replayscope", "vllm": "vLLM", "sglang": "SGLang"}
VLLM_LIST_FLAGS = (0, 11, 1)                 # --cudagraph-capture-sizes from this version
VLLM_OLDEST_READ = (0, 10)                   # the oldest vLLM whose capture-size rules were read
VLLM_OLD = "vLLM 0.10.x to 0.11.0"
VLLM_NEW = "vLLM 0.11.1 and later"
SGLANG_OLD = "SGLang before PR #23906 (later main: a deprecated alias)"
SGLANG_NEW = "SGLang from PR #23906 (June 2026)"


@dataclass(frozen=True)
class Rules:
    """What an engine does with a list of capture sizes, for one run (or for none)."""

    engine: str                        # runner | vllm | sglang
    label: str                         # e.g. "vLLM 0.13.0", "SGLang (version not in the log)"
    limit: int | None = None           # the engine drops sizes above this (SGLang captures it instead)
    limit_why: str | None = None
    useful_max: int | None = None      # no batch is larger: a size above this serves nothing
    useful_why: str | None = None
    multiple_of: int = 1               # only multiples of this are kept
    multiple_why: str | None = None
    padding: bool = True
    graphs_off: str | None = None      # why the run had no graphs, and what turns them on
    version: tuple[int, ...] | None = None
    library: bool = False              # the runner used as a library (a CapturePlan, no flags)
    facts: tuple[str, ...] = ()        # the rules applied, with the run's facts
    unknown: tuple[str, ...] = ()      # rules that need a fact the run did not give

    @property
    def cap(self) -> int | None:
        """The largest size worth choosing: within the engine's limit and the largest batch."""
        caps = [c for c in (self.limit, self.useful_max) if c is not None]
        return min(caps) if caps else None

    def problems(self, sizes: Sequence[int]) -> list[str]:
        """Why ``sizes`` would not be captured as given, or some would serve nothing (empty: fine)."""
        out = []
        if any(s < 1 for s in sizes):
            out.append("batch sizes must be at least 1")
        if list(sizes) != sorted(set(sizes)):
            out.append("sizes must be ascending and unique")
        if self.limit is not None:
            above = [s for s in sizes if s > self.limit]
            if above:
                out.append(f"{_list(above)} above {self.limit}: {self.limit_why}")
        if self.useful_max is not None:
            idle = [s for s in sizes if s > self.useful_max and (self.limit is None or s <= self.limit)]
            if idle:
                out.append(f"{_list(idle)} above {self.useful_max} would serve no batch: {self.useful_why}")
        if self.multiple_of > 1:
            off = [s for s in sizes if s % self.multiple_of]
            if off:
                out.append(f"{_list(off)} not a multiple of {self.multiple_of}: {self.multiple_why}")
        return out

    def captured(self, sizes: Sequence[int]) -> list[int]:
        """What the engine captures when given the list ``sizes`` (its rules above)."""
        kept = sorted(set(s for s in sizes if s >= 1))
        if self.limit is not None and any(s > self.limit for s in kept):
            kept = [s for s in kept if s <= self.limit] + ([self.limit] if self.engine == "sglang" else [])
        if self.multiple_of > 1:
            kept = [s for s in kept if s % self.multiple_of == 0]
        return sorted(set(kept))

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["facts"], out["unknown"] = list(self.facts), list(self.unknown)
        out["version"] = None if self.version is None else ".".join(map(str, self.version))
        out["name"], out["cap"] = ENGINE_NAMES[self.engine], self.cap
        return out


@dataclass(frozen=True)
class FlagLine:
    engine: str                        # runner | vllm | sglang
    label: str                         # which versions accept it, e.g. "vLLM 0.11.1 and later"
    text: str                          # the line to copy
    for_this_run: bool = False         # the one for the run's own engine and version
    kind: str = "command line"         # command line | Python

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def engine_of(run: dict[str, Any]) -> str:
    """The engine a run came from: vLLM and SGLang logs, metrics and traced processes, else this runner."""
    config = run.get("config") or {}
    named = config.get("engine")
    if named in ENGINES:
        return named
    source = run.get("source") or ""
    for engine in ("vllm", "sglang"):
        if source.startswith(engine):
            return engine
    recipes = ((config.get("trace") or {}).get("recipes")) or []
    for engine in ("vllm", "sglang"):
        if any(str(r).startswith(engine) for r in recipes):
            return engine
    return "runner"


def parse_version(text: Any) -> tuple[int, ...] | None:
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", str(text or ""))
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _list(sizes: Sequence[int]) -> str:
    return ", ".join(map(str, sizes))


def generic_rules(engine: str) -> Rules:
    """The engine's rules with nothing known of the run that would use them."""
    return {"runner": _runner_rules, "vllm": _vllm_rules, "sglang": _sglang_rules}[engine]({}, "")


def rules_for(run: dict[str, Any]) -> Rules:
    """The rules of the run's own engine, with what its configuration says."""
    engine = engine_of(run)
    config = dict(run.get("config") or {})
    builder = {"runner": _runner_rules, "vllm": _vllm_rules, "sglang": _sglang_rules}[engine]
    return builder(config, run.get("backend") or "", source=run.get("source") or "", version=run.get("version"))


def _runner_rules(config: dict, backend: str, source: str = "", version: Any = None) -> Rules:
    workload = config.get("workload")
    running = _int(workload.get("max_running")) if isinstance(workload, dict) else None
    padding = config.get("padding") is not False
    facts = ["any ascending batch sizes of at least 1 (runner/plan.py CapturePlan); the decode graphs' "
             "static buffers are as large as the largest size",
             "sizes up to 16 are captured for the speculative verify stage as well (runner/engine.py)"]
    unknown = []
    if running:
        facts.append(f"the workload runs at most {running} requests: no batch is larger")
    elif source == "runner":
        unknown.append("the workload's running requests (no size above them serves a batch)")
    facts.append("padding on: a batch pads up to the next captured size" if padding
                 else "--no-padding: only a batch of exactly a captured size runs on a graph")
    off = None
    if backend == "disabled":
        off = "the run had --backend disabled (--enforce-eager): run with --backend cuda to capture graphs"
    return Rules("runner", "replayscope (library)" if source == "library" else "replayscope run",
                 useful_max=running, useful_why=f"the workload runs at most {running} requests" if running else None,
                 padding=padding, graphs_off=off, library=source == "library",
                 facts=tuple(facts), unknown=tuple(unknown))


def _vllm_rules(config: dict, backend: str, source: str = "", version: Any = None) -> Rules:
    parsed = parse_version(config.get("vllm_version") or version)
    spec = _int(config.get("num_speculative_tokens")) or 0
    max_seqs = _int(config.get("max_num_seqs"))
    max_tokens = _int(config.get("max_num_batched_tokens"))
    tp = _int(config.get("tensor_parallel_size")) or 1
    mode = str(config.get("cudagraph_mode") or "").upper() or None
    facts, unknown = [], []
    label = f"vLLM {'.'.join(map(str, parsed))}" if parsed else "vLLM (version not in the log)"
    if parsed is None:
        unknown.append("the vLLM version: both spellings are given, each with the versions that accept it")
    elif parsed < VLLM_OLDEST_READ:
        unknown.append(f"the rules of vLLM {'.'.join(map(str, parsed))}: they were read for 0.10 and later")
    limit = limit_why = useful = useful_why = None
    old = parsed is not None and parsed < VLLM_LIST_FLAGS
    if max_tokens and old:
        useful, useful_why = max_tokens, f"no batch holds more than max_num_batched_tokens {max_tokens} tokens"
        facts.append(f"0.10.x to 0.11.0 capture a given list as it is; no batch holds more than "
                     f"max_num_batched_tokens ({max_tokens}) tokens")
    elif max_tokens:
        limit, limit_why = max_tokens, f"max_num_batched_tokens {max_tokens}, vLLM drops larger sizes"
        facts.append(f"0.11.1 and later drop sizes above max_num_batched_tokens ({max_tokens})")
    else:
        unknown.append("max_num_batched_tokens (0.11.1 and later drop sizes above it)")
    decode_tokens = max_seqs * (1 + spec) if max_seqs else None
    tokens = f"max_num_seqs {max_seqs}" + (f" x {1 + spec} tokens" if spec else "")
    if mode == "FULL_DECODE_ONLY":
        if decode_tokens:
            useful = decode_tokens if useful is None else min(useful, decode_tokens)
            useful_why = (f"under cudagraph_mode FULL_DECODE_ONLY mixed batches run without graphs, and a "
                          f"decode batch holds at most {decode_tokens} tokens ({tokens})")
            facts.append(useful_why)
        else:
            unknown.append("max_num_seqs (under FULL_DECODE_ONLY no size above it serves a batch)")
    elif decode_tokens:
        facts.append(f"a decode batch holds at most {decode_tokens} tokens ({tokens}); larger sizes serve mixed "
                     f"prefill-decode batches through piecewise graphs (cudagraph_mode "
                     f"{mode or 'FULL_AND_PIECEWISE, the default from 0.11.0'})")
    else:
        unknown.append("max_num_seqs (the largest decode batch; larger sizes serve only mixed batches)")
    multiple, why = 1, None
    if spec and (mode is None or "FULL" in mode):
        multiple, why = 1 + spec, (f"full decode graphs with {spec} speculative tokens round sizes up to multiples "
                                   f"of {1 + spec} (compilation.py adjust_cudagraph_sizes_for_spec_decode, read in "
                                   f"the 0.11 line and later)")
        facts.append(why)
    elif not spec:
        unknown.append("speculative tokens, if any (full decode graphs round sizes up to multiples of 1 + k)")
    if config.get("enable_sp") and tp > 1:
        multiple = multiple * tp // _gcd(multiple, tp)
        why = (why + "; " if why else "") + f"sequence parallelism keeps multiples of the TP size {tp}"
        facts.append(f"sequence parallelism with TP {tp}: sizes that are not a multiple of {tp} are dropped")
    elif tp > 1:
        unknown.append(f"sequence parallelism (with TP {tp} it drops sizes that are not a multiple of {tp})")
    if _int(config.get("max_capture_size")):
        facts.append(f"the run's largest size was {config['max_capture_size']}; the flag lines set the list's own "
                     "(0.11.1 and later: --max-cudagraph-capture-size equal to its largest, as vLLM requires)")
    off = None
    if config.get("enforce_eager"):
        off = "the run had --enforce-eager: drop it to capture graphs"
    elif mode == "NONE" or config.get("use_cudagraph") is False or backend == "eager":
        off = ("the run had cudagraph_mode NONE: leave it out (FULL_AND_PIECEWISE is the default from "
               "0.11.0) to capture graphs")
    return Rules("vllm", label, limit=limit, limit_why=limit_why, useful_max=useful, useful_why=useful_why,
                 multiple_of=multiple, multiple_why=why, graphs_off=off, version=parsed,
                 facts=tuple(facts), unknown=tuple(unknown))


def _sglang_rules(config: dict, backend: str, source: str = "", version: Any = None) -> Rules:
    running = _int(config.get("max_running_requests"))
    padding = not config.get("disable_cuda_graph_padding")
    facts, unknown = ["a given list sets the largest size (cuda_graph_max_bs = max of the list)",
                      "these are the decode graphs; prefill graphs are sized in tokens by their own flags"], []
    limit = limit_why = None
    if running:
        limit = running
        limit_why = f"max_running_requests {running}, SGLang drops larger sizes and captures {running} instead"
        facts.append(f"sizes above max_running_requests ({running}) are dropped, {running} captured in their place")
    else:
        unknown.append("max_running_requests (SGLang drops sizes above it and captures it instead)")
    multiple, why = 1, None
    tp, dp = _int(config.get("tp_size")), _int(config.get("dp_size"))
    if config.get("enable_dp_attention"):
        if tp and dp and tp // dp > 1:
            multiple, why = tp // dp, f"DP attention keeps multiples of the attention TP size {tp // dp}"
            facts.append(why)
        else:
            unknown.append("the attention TP size (DP attention keeps only its multiples)")
    unknown.append("two-batch overlap, if on (it keeps only even sizes)")
    parsed = parse_version(version)
    if parsed is None:
        unknown.append("the SGLang version (its log does not print it): both spellings are given, each with "
                       "the versions it was read for")
    facts.append("padding on: a batch pads up to the next captured size" if padding
                 else "--disable-cuda-graph-padding: only a batch of exactly a captured size runs on a graph")
    off = "the run had --disable-cuda-graph: drop it to capture graphs" if (
        config.get("disable_cuda_graph") or backend == "disabled") else None
    label = f"SGLang {'.'.join(map(str, parsed))}" if parsed else "SGLang (version not in the log)"
    return Rules("sglang", label, limit=limit, limit_why=limit_why,
                 multiple_of=multiple, multiple_why=why, padding=padding, graphs_off=off, version=parsed,
                 facts=tuple(facts), unknown=tuple(unknown))


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def flag_lines(rules: Rules, sizes: Sequence[int], own: bool = True) -> list[FlagLine]:
    """The lines that capture exactly ``sizes`` in ``rules.engine``, for each spelling its
    versions accept; ``own``: the run's own engine (its version's line is marked)."""
    sizes = list(sizes)
    spaced, commas = " ".join(map(str, sizes)), ",".join(map(str, sizes))
    if rules.engine == "runner":
        if rules.library:
            plan = f"CapturePlan(({', '.join(map(str, sizes))}{',' if len(sizes) == 1 else ''}))"
            return [FlagLine("runner", "replayscope library", plan if sizes else 'backend="disabled"', own, "Python")]
        if not sizes:
            return [FlagLine("runner", "replayscope run", "--backend disabled", own)]
        backend = "--backend cuda " if rules.graphs_off else ""
        return [FlagLine("runner", "replayscope run", f"{backend}--capture-sizes {commas} --max-bs {sizes[-1]}", own)]
    if rules.engine == "vllm":
        new = rules.version is not None and rules.version >= VLLM_LIST_FLAGS
        old = rules.version is not None and VLLM_OLDEST_READ <= rules.version < VLLM_LIST_FLAGS
        if not sizes:
            return [FlagLine("vllm", "vLLM 0.10.x and later", "--enforce-eager", own)]
        config = json.dumps({"cudagraph_capture_sizes": sizes})
        return [FlagLine("vllm", VLLM_NEW, f"--cudagraph-capture-sizes {spaced} --max-cudagraph-capture-size {sizes[-1]}",
                         own and new),
                FlagLine("vllm", VLLM_OLD, f"--compilation-config '{config}'", own and old),
                FlagLine("vllm", "vLLM 0.10.x and later, Python", f"compilation_config={config}", False, "Python")]
    if not sizes:
        return [FlagLine("sglang", SGLANG_NEW, "--cuda-graph-backend-decode disabled"),
                FlagLine("sglang", SGLANG_OLD, "--disable-cuda-graph")]
    return [FlagLine("sglang", SGLANG_NEW, f"--cuda-graph-bs-decode {spaced}"),
            FlagLine("sglang", SGLANG_OLD, f"--cuda-graph-bs {spaced}")]


def default_graph_count(rules: Rules, config: dict[str, Any]) -> int | None:
    """How many graphs the engine captures by default for this run's settings (a run with
    graphs off has no list of its own to count), or None when the settings are not known."""
    if rules.engine == "runner":
        return len(default_capture_sizes(_int(config.get("max_bs")) or 32))
    if rules.engine == "vllm":
        max_seqs = _int(config.get("max_num_seqs"))
        if not max_seqs:
            return None
        largest = min(max_seqs * (1 + (_int(config.get("num_speculative_tokens")) or 0)) * 2, 512)
        if rules.version is not None and rules.version < VLLM_LIST_FLAGS:   # [1, 2, 4] + every 8 up to it
            return len([s for s in (1, 2, 4) if s <= largest]) + len(range(8, largest + 1, 8))
        return len(vllm_default_sizes(largest))
    largest = _int(config.get("cuda_graph_max_bs"))
    return len(sglang_default_sizes(largest)) if largest else None


def vllm_default_sizes(max_size: int = 512) -> tuple[int, ...]:
    """vLLM V1: [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)."""
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, max_size + 1, 16))
    return tuple(s for s in sizes if s <= max_size)


def sglang_default_sizes(max_bs: int = 160) -> tuple[int, ...]:
    """SGLang (older cuda_graph_runner): [1, 2, 4, 8] + range(16, 161, 8), capped at max_bs."""
    return tuple(s for s in [1, 2, 4, 8] + list(range(16, 161, 8)) if s <= max_bs)
