"""What kind of failure an error text describes, and what to do about each kind.

The one place for failure classes and their patterns, and for how a failure shows in a
log (tracebacks, chained exceptions, the engines' own "going down" lines: what the importers
read as a failure). The startup diagnosis
(``replayscope.collector.analysis.diagnosis``) classifies the error of a failed run, of a failed capture and
of a degradation step with ``classify``. Patterns come from the texts PyTorch, CUDA,
NCCL, vLLM and SGLang print (tests/collector/test_failures.py holds real examples).

Classes are tried in a fixed order, most specific root cause first: an out-of-memory
error is reported as such even when it surfaces through a failed capture or a compile
traceback; an NCCL error that invalidated a capture is a collective failure.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class FailureClass:
    key: str
    title: str                    # "Out of memory"
    what: str                     # what it means, in a sentence or two
    patterns: tuple[str, ...]     # regular expressions, matched case-insensitively
    replayscope: tuple[str, ...]  # this project's runner
    vllm: tuple[str, ...]
    sglang: tuple[str, ...]

    def matches(self, text: str) -> bool:
        return any(re.search(p, text, re.IGNORECASE) for p in self.patterns)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("patterns")
        return d


CLASSES: tuple[FailureClass, ...] = (
    FailureClass(
        key="oom",
        title="Out of memory",
        what="The GPU had no room for an allocation: the weights, the KV cache, the activations "
             "of the largest captured batch and the graph pool did not fit together.",
        patterns=(r"out of memory", r"OutOfMemoryError", r"CUDA_ERROR_OUT_OF_MEMORY",
                  r"cudaErrorMemoryAllocation", r"\bOOM\b", r"Failed to allocate memory",
                  r"No available memory for the cache blocks", r"Not enough memory"),
        replayscope=("Capture fewer or smaller sizes (--capture-sizes, a lower --max-bs): the shared "
                     "pool grows with the largest graph.",
                     "A process cap set with --memory-cap-gib leaves that much and no more."),
        vllm=("Lower --gpu-memory-utilization: it leaves more memory outside the KV cache for the "
              "graphs.",
              "Capture fewer or smaller sizes: --max-cudagraph-capture-size, --cudagraph-capture-sizes "
              "(older releases: --cuda-graph-sizes), or a lower --max-num-seqs.",
              "--enforce-eager confirms that graphs are what does not fit."),
        sglang=("Lower --mem-fraction-static (e.g. 0.8 or 0.7).",
                "Lower --cuda-graph-max-bs, or list fewer sizes with --cuda-graph-bs.",
                "--disable-cuda-graph only to confirm: it costs decode speed."),
    ),
    FailureClass(
        key="kernel_assert",
        title="A GPU kernel failed (device-side assertion or illegal memory access)",
        what="A kernel hit an assertion (an index out of range in an embedding or a gather) or "
             "touched memory it does not own. CUDA reports this asynchronously: the Python line "
             "in the traceback can be later than the kernel that failed.",
        # (not "to enable device-side assertions": PyTorch appends that to every CUDA error)
        patterns=(r"device-side assert(?:ion)? triggered", r"Assertion `[^`]*` failed", r"CUDA_ERROR_ASSERT",
                  r"cudaErrorAssert", r"illegal memory access", r"misaligned address",
                  r"CUDA_ERROR_ILLEGAL_ADDRESS", r"cudaErrorIllegalAddress"),
        replayscope=("CUDA_LAUNCH_BLOCKING=1 makes the error point at the kernel that failed.",
                     "--backend disabled shows whether it happens without graphs too."),
        vllm=("CUDA_LAUNCH_BLOCKING=1 makes the error point at the kernel that failed.",
              "--enforce-eager shows whether it happens without graphs too.",
              "Out-of-range token ids point at a tokenizer that does not match the model."),
        sglang=("CUDA_LAUNCH_BLOCKING=1 makes the error point at the kernel that failed.",
                "--disable-cuda-graph shows whether it happens without graphs too."),
    ),
    FailureClass(
        key="collective",
        title="A collective between ranks failed (NCCL)",
        what="An all-reduce or all-gather between tensor/data-parallel ranks failed or hung: a "
             "rank died or disagreed, the GPU-to-GPU path failed, or a collective was captured "
             "where it cannot be.",
        patterns=(r"\bNCCL\b", r"\bnccl[A-Z]\w*", r"ProcessGroupNCCL", r"\ball_?reduce\b",
                  r"\ball_?gather\b", r"collective operation", r"Watchdog caught", r"\bc10d\b",
                  r"custom_?all_?reduce", r"CustomAllreduce", r"\bgloo\b"),
        replayscope=("This runner uses one GPU: the error comes from an engine's ranks. Read every "
                     "rank's lines (docs/importing.md, Ranks): the first rank to fail names the cause.",),
        vllm=("NCCL_DEBUG=INFO prints NCCL's own reason.",
              "--disable-custom-all-reduce rules out vLLM's custom all-reduce.",
              "Check every rank's log, the first failure first."),
        sglang=("NCCL_DEBUG=INFO prints NCCL's own reason.",
                "--disable-custom-all-reduce rules out SGLang's custom all-reduce.",
                "--dist-timeout raises the collective timeout when ranks are only slow."),
    ),
    FailureClass(
        key="capture_invalidated",
        title="The stream capture was invalidated (an operation CUDA forbids during capture)",
        what="Something inside the captured region did what CUDA refuses while a stream is "
             "capturing: a host synchronisation (.item(), .cpu(), torch.cuda.synchronize()), an "
             "allocation outside the graph pool, or work on another stream. CUDA then fails the "
             "whole capture ('operation failed due to a previous error during capture'); the "
             "first error names the operation.",
        patterns=(r"operation not permitted when stream is capturing",
                  r"previous error during capture", r"cudaErrorStreamCapture\w*",
                  r"CUDA_ERROR_STREAM_CAPTURE\w*", r"hipErrorStreamCapture\w*",
                  r"last recorded in a capturing stream", r"during CUDA graph capture",
                  r"stream is capturing", r"capture was not ended in the same stream"),
        replayscope=("Find the host synchronisation in the step: torch.cuda.set_sync_debug_mode('error') "
                     "raises at the line that synchronises.",
                     "The runner drops the size and goes on (degradation ladder); --fail-capture "
                     "SIZES reproduces it on purpose."),
        vllm=("-O.cudagraph_mode=PIECEWISE keeps attention outside the graphs; --enforce-eager runs "
              "without graphs while you look for the operation.",
              "Custom ops and attention backends that synchronise are the usual cause."),
        sglang=("--disable-cuda-graph runs without graphs while you look for the operation.",
                "Try another --attention-backend; with TP > 1, --disable-custom-all-reduce."),
    ),
    FailureClass(
        key="graph_output_overwritten",
        title="A CUDA graph's output was read after a later replay overwrote it",
        what="Under torch.compile(mode=\"reduce-overhead\") the outputs of a CUDA graph live in its "
             "memory pool and the next replay writes over them. The program kept an output (a "
             "cache tensor, logits) across calls and read it afterwards; PyTorch refuses the read.",
        patterns=(r"accessing tensor output of CUDAGraphs that has been overwritten",
                  r"overwritten by a subsequent (?:forward )?run"),
        replayscope=("Under replayscope trace: clone an output that must outlive the next call, or "
                     "call torch.compiler.cudagraph_mark_step_begin() before each model call "
                     "(PyTorch's CUDA Graph Trees documentation).",
                     "With transformers, let generate compile the decode step (a CompileConfig with "
                     "mode='reduce-overhead') instead of compiling model.forward yourself: the "
                     "static cache is then made outside the compiled code.",
                     "The run's warnings say whether Inductor also skipped CUDA graphs, and why."),
        vllm=("vLLM manages its graphs' outputs itself; this error points at a custom model or "
              "plugin under torch.compile. --enforce-eager confirms it.",),
        sglang=("SGLang manages its graphs' outputs itself; this error points at a custom model "
                "or torch.compile (--enable-torch-compile). --disable-cuda-graph confirms it.",),
    ),
    FailureClass(
        key="compile_error",
        title="torch.compile failed (Dynamo / Inductor / Triton)",
        what="Compiling the model before capture failed: Dynamo could not trace it, Inductor or "
             "Triton could not generate or build a kernel, or a compiler on the host failed.",
        patterns=(r"InductorError", r"BackendCompilerFailed", r"backend='inductor' raised", r"torch\._inductor\.exc",
                  r"torch\._dynamo\.exc", r"TorchRuntimeError", r"triton\.compiler\.errors",
                  r"\bCompilationError\b", r"LoweringException", r"CppCompileError",
                  r"nvcc fatal", r"ninja: build stopped"),
        replayscope=("--backend cuda captures graphs without torch.compile.",),
        vllm=("-O.mode=0 turns torch.compile off and keeps CUDA graphs (older releases: "
              "compilation_config level 0).",
              "-O.backend=eager skips Inductor; a stale cache under ~/.cache/vllm/torch_compile_cache "
              "can be deleted."),
        sglang=("Drop --enable-torch-compile, or lower --torch-compile-max-bs.",),
    ),
    FailureClass(
        key="timeout",
        title="A time limit ran out",
        what="Something took longer than a limit allowed: waiting for the engine to become "
             "ready, a call to a worker process, or a health probe of the orchestrator.",
        patterns=(r"\btimed out\b", r"\bTimeoutError\b", r"\btimeout\b", r"deadline exceeded"),
        replayscope=("The waterfall on the Startup page shows which phase ran long: shorten that "
                     "phase before raising a limit.",),
        vllm=("VLLM_ENGINE_READY_TIMEOUT_S raises how long the server waits for the engine to "
              "start (large models, long compiles).",
              "VLLM_RPC_TIMEOUT bounds calls to worker processes."),
        sglang=("--watchdog-timeout: a forward batch slower than this restarts the server.",
                "--dist-timeout bounds torch.distributed initialisation and collectives."),
    ),
)

UNKNOWN = FailureClass(
    key="unknown",
    title="The run failed",
    what="The error does not match a known class; it is shown as the engine printed it.",
    patterns=(),
    replayscope=("Start from the first error of the run (the root cause), not from the last line.",),
    vllm=("Look for the first exception of the log; 'Engine core initialization failed. See root "
          "cause above' is never the cause.",),
    sglang=("Look for the first exception of the log; 'Received sigquit from a child process' is "
            "never the cause.",),
)

BY_KEY: dict[str, FailureClass] = {c.key: c for c in CLASSES + (UNKNOWN,)}
# What an importer says where a log's traceback stops before its exception line.
CUT_OFF = "the exception text is cut off in the log"


def classify(*texts: str | None) -> FailureClass:
    """The class of the first matching kind over all ``texts`` together (UNKNOWN if none).
    What an importer adds after ``CUT_OFF`` (where a cut traceback stops) is not the error's
    text and names no cause: a frame called ``all_reduce`` is not an NCCL failure."""
    joined = "\n".join(t.split(CUT_OFF)[0] for t in texts if t)
    if not joined.strip():
        return UNKNOWN
    for failure_class in CLASSES:
        if failure_class.matches(joined):
            return failure_class
    return UNKNOWN


# -- how a failure shows in a log -----------------------------------------------------------
# What the importers (replayscope.collector.importers) read as a failure; the classes above say what its
# text means. Patterns come from CPython's traceback format and the lines vLLM and SGLang
# print when a process goes down (tests/importers holds real examples of each).

TRACEBACK = re.compile(r"Traceback \(most recent call last\):")
# The line between two tracebacks of one chain: the one above is the root cause.
CHAINED = re.compile(r"^(?:During handling of the above exception, another exception occurred|"
                     r"The above exception was the direct cause of the following exception):?$")
FRAME = re.compile(r'^File "(?P<path>[^"]+)", line \d+, in (?P<func>[\w<>.]+)')
# An exception line: "RuntimeError: ...", "torch.OutOfMemoryError: ...", "Exception: ...".
EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?(?:[A-Z]\w*)?(?:Error|Exception|Interrupt)(?::\s*(?P<msg>.*))?$")
# Exceptions that only point at another one ("see root cause above").
WRAPPER = re.compile(r"root cause above|check the stack trace above|stack trace for the root cause|"
                     r"Engine core initialization failed|Engine process failed to start|Executor failed\.?$|"
                     r"EngineDeadError|EngineGenerateError|Worker failed with error|"
                     r"^Exception: Capture .*graph failed|^(?:KeyboardInterrupt|SystemExit)", re.I)
# A frame in an engine's own source tree (SGLang's frames can pass through vLLM's distributed code,
# so each engine looks only for its own).
ENGINE_CODE = {"vllm": re.compile(r"/vllm/"), "sglang": re.compile(r"/sglang/")}
# The engines' own "going down" lines. A named group ``error`` holds the exception's text
# where the line carries it; otherwise the line only stands in until an exception says why.
ENGINE_FATAL = {
    "vllm": re.compile(
        # V0 workers (vllm/executor/multiproc_worker_utils.py): "...: %s, %s" (the exception and
        # its traceback) in 0.4-0.5, "... method %s." followed by the traceback later
        r"Exception in worker \S+ while processing method \w+(?::\s*(?P<error>.+?)(?:,\s*(?=Traceback \(most)|$)|\.|$)|"
        r"EngineCore failed to start|Engine core initialization failed|WorkerProc failed to start|"
        r"WorkerProc hit an exception|EngineCore encountered a fatal error|Error executing method|"
        r"AsyncLLM output_handler failed|Engine loop has died|"
        # a process the engine watches went away: "Engine core proc EngineCore_DP0 died unexpectedly,
        # shutting down client." (core_client.py), "Worker proc VllmWorker-0 died unexpectedly, shutting
        # down executor." (multiproc_executor.py), V0's "Worker VllmWorkerProcess pid 3 died, exit code: -9"
        r"\bproc \S+ died unexpectedly|Worker \S+ pid \d+ died, exit code"),
    "sglang": re.compile(
        r"Scheduler hit an exception|Received sigquit from a child|TpModelWorker hit an exception|"
        r"TokenizerManager hit an exception|"
        r"DataParallelController hit an exception|DetokenizerManager hit an exception|"
        r"Child process unexpectedly failed|scheduler is dead|"
        r"Initialization failed\. (?:warmup|detoken)_init_state|exited with code"),
}
# A process that dies outside Python's exception machinery: native code's own error lines
# (CUDA/HIP check macros, vLLM's and SGLang's custom all-reduce ``CUDACHECK``), C++'s
# ``std::terminate`` and its ``what()``, CPython's ``Fatal Python error``, PyTorch's NCCL
# watchdog. No traceback follows them: the line is the failure. ``error`` is its text;
# ``wrapper`` lines only say that the process went down (the next line says why).
CRASH_LINES = (
    (re.compile(r"terminate called after throwing an instance of '[^']*'"), True),
    (re.compile(r"^what\(\):\s*(?P<error>\S.*)$"), False),
    (re.compile(r"Fatal Python error: \w[^:]*"), True),
    (re.compile(r"^(?P<error>(?:CUDA|HIP|Cuda|cuda|hip) error \([^)]*:\d+\):\s*\S.*)$"), False),
    (re.compile(r"^(?P<error>Failed: (?:Cuda|CUDA|Hip|HIP) error \S+:\d+ '[^']*')"), False),
    (re.compile(r"^(?P<error>(?:CUDA|HIP) error: \S.*)$"), False),
    (re.compile(r"Process group watchdog thread terminated with exception: (?P<error>\S.*)$"), False),
    # the signal that ended the process, as the shell, PyTorch or absl report it
    (re.compile(r"Segmentation fault(?: \(core dumped\))?|^Aborted \(core dumped\)|Segfault encountered|"
                r"\*\*\* SIG[A-Z]+ received at time="), True),
)
_CRASH_WORDS = re.compile(r"rror|terminate|what\(\)|egmentation|egfault|Aborted|\*\*\* SIG")
# A crash line starts a run by itself only where it names the engine's graphs or its code.
CRASH_NAMES_ENGINE = re.compile(r"captur|cuda ?graph|custom_all_reduce|/vllm/|/sglang/|sgl-kernel|sgl_kernel", re.I)


def crash_line(text: str) -> tuple[str, bool] | None:
    """(error text, wrapper) when ``text`` is a native crash line (``CRASH_LINES``)."""
    if not _CRASH_WORDS.search(text):
        return None
    for pattern, wrapper in CRASH_LINES:
        m = pattern.search(text)
        if m:
            return (m.groupdict().get("error") or m.group(0)).strip(), wrapper
    return None


# Where in startup a traceback failed, from its frames (the most specific first).
PHASE_FRAMES = (
    ("capture", re.compile(r"capture_model|_capture_cudagraphs|capture_one_batch_size|cuda_graph_runner|"
                           r"init_cuda_graphs|init_device_graphs|capture_cuda_graphs|capture_decode_graph|"
                           r"torch/cuda/graphs\.py|CUDAGraphRunner|graph_runner|capture_graph|\bcapture\b")),
    ("compile", re.compile(r"torch/_dynamo|torch/_inductor|compilation/backends|torch_compile|compiler_interface")),
    ("warmup", re.compile(r"compile_or_warm_up|_warm_up_model|warm_up_model|_dummy_sampler_run|kernel_warmup")),
    ("kv_cache", re.compile(r"determine_available_memory|profile_run|profile_cudagraph_memory|initialize_kv_cache|"
                            r"init_memory_pool|determine_num_available_blocks|initialize_cache|kv_cache")),
    ("load_weights", re.compile(r"load_model|load_weights|model_loader|weight_utils|safetensors")),
)


def phase_of_frames(frames: list[str]) -> str | None:
    """The startup phase a traceback's frames ran through, if they name one."""
    joined = " | ".join(frames)
    for name, pattern in PHASE_FRAMES:
        if pattern.search(joined):
            return name
    return None


def first_line(text: str | None, limit: int = 300) -> str:
    """The error's headline, clipped: the first exception line of a traceback, else the
    first line that says something."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if lines and lines[0].startswith("Traceback"):
        lines = [line for line in lines if EXCEPTION_LINE.match(line)] or lines[1:]
    if not lines:
        return ""
    line = lines[0]
    return line if len(line) <= limit else line[:limit - 1] + "…"


__all__ = ["BY_KEY", "CHAINED", "CLASSES", "CRASH_LINES", "CRASH_NAMES_ENGINE", "CUT_OFF", "ENGINE_CODE", "ENGINE_FATAL", "EXCEPTION_LINE", "FRAME",
           "FailureClass", "PHASE_FRAMES", "crash_line", "TRACEBACK", "UNKNOWN", "WRAPPER", "classify", "first_line",
           "phase_of_frames"]
