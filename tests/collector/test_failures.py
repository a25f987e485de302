"""Failure classes from real error texts: what PyTorch, CUDA, NCCL, vLLM and SGLang print
(the lines users paste in the engines' trackers; vLLM #12438, #4432, #17965, #39788;
SGLang #4205, #5770; PyTorch's own messages)."""

import pytest

from replayscope.collector.importers.failures import BY_KEY, CLASSES, UNKNOWN, classify, first_line

REAL_ERRORS = [
    # out of memory: torch, vLLM V0/V1, SGLang's capture wrapper, KV cache sizing
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total "
     "capacity of 79.19 GiB of which 301.00 MiB is free.", "oom"),
    ("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.00 GiB.\n"
     "Possible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)", "oom"),
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
     "when initializing the engine.", "oom"),
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "oom"),
    ("OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
     "of 139.81 GiB of which 1.10 GiB is free. Process 4242 has 2.60 GiB memory in use.')", "oom"),
    # an OOM raised inside a compile traceback is still an OOM
    ("torch._inductor.exc.InductorError: OutOfMemoryError: CUDA out of memory. Tried to allocate "
     "64.00 MiB", "oom"),
    # capture invalidated: a host sync inside capture (our runner on the H200), torch's message
    ("AcceleratorError: CUDA error: operation failed due to a previous error during capture\n"
     "Search for `cudaErrorStreamCaptureInvalidated' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
     "group__CUDART__TYPES.html for more information.\nCUDA kernel errors might be asynchronously "
     "reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging "
     "consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
     "assertions.", "capture_invalidated"),
    ("RuntimeError: CUDA error: operation not permitted when stream is capturing\n"
     "CUDA kernel errors might be asynchronously reported at some other API call", "capture_invalidated"),
    ("RuntimeError: CUDA error: operation not permitted on an event last recorded in a capturing "
     "stream", "capture_invalidated"),
    ("RuntimeError: Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture. If you "
     "need this call to be captured, please file an issue.", "capture_invalidated"),
    # collective: NCCL through a capture, the watchdog, the custom all-reduce assert
    ("RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL "
     "version 2.21.5\nncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure "
     "'operation not permitted when stream is capturing'", "collective"),
    ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
     "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600123 milliseconds before timing out.",
     "collective"),
    ("File \"vllm/distributed/device_communicators/custom_all_reduce.py\", line 224, in all_reduce\n"
     "RuntimeError: CUDA error: operation failed due to a previous error during capture", "collective"),
    # kernel assertion / illegal access
    ("../aten/src/ATen/native/cuda/Indexing.cu:1236: indexSelectSmallIndex: block: [5,0,0], thread: "
     "[6,0,0] Assertion `srcIndex < srcSelectDimSize` failed.", "kernel_assert"),
    ("RuntimeError: CUDA error: device-side assert triggered\nCompile with `TORCH_USE_CUDA_DSA` to "
     "enable device-side assertions.", "kernel_assert"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "kernel_assert"),
    # compile errors
    ("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nTypeError: 'int' object "
     "is not iterable", "compile_error"),
    ("torch._inductor.exc.InductorError: CalledProcessError: Command '['/usr/bin/gcc', '/tmp/x.c', "
     "'-O3', '-shared']' returned non-zero exit status 1.", "compile_error"),
    ("torch._dynamo.exc.Unsupported: Graph break due to unsupported builtin", "compile_error"),
    ("Exception: Capture cuda graph failed: backend='inductor' raised:", "compile_error"),
    ("triton.compiler.errors.CompilationError: at 12:4: def _fwd_kernel(", "compile_error"),
    # a graph's output read after a later replay: transformers generate with a forward the program
    # compiled itself under reduce-overhead (H200, torch 2.11, transformers 5.17, replayscope trace)
    ("RuntimeError: Error: accessing tensor output of CUDAGraphs that has been overwritten by a "
     "subsequent run. Stack trace: File \"transformers/models/llama/modeling_llama.py\", line 467, in "
     "forward. To prevent overwriting, clone the tensor outside of torch.compile() or call "
     "torch.compiler.cudagraph_mark_step_begin() before each model invocation.", "graph_output_overwritten"),
    # timeouts
    ("TimeoutError: RPC call to execute_model timed out.", "timeout"),
    ("TimeoutError: Timed out waiting for engines to send initial message on input socket.", "timeout"),
    # nothing known
    ("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
     "unknown"),
    ("AssertionError: Capture cuda graph failed", "unknown"),
]


@pytest.mark.parametrize("text,expected", REAL_ERRORS, ids=[f"{e}-{i}" for i, (_, e) in enumerate(REAL_ERRORS)])
def test_real_error_texts_get_their_class(text, expected):
    assert classify(text).key == expected


def test_the_texts_of_a_failure_are_read_together():
    # the run_end says only that the engine died; the failed capture says why
    assert classify("EngineCore failed to start.", None,
                    "torch.OutOfMemoryError: CUDA out of memory").key == "oom"


def test_no_text_is_unknown():
    assert classify(None, "", "  ") is UNKNOWN


def test_every_class_says_what_to_do_in_each_engine():
    for failure_class in CLASSES + (UNKNOWN,):
        assert failure_class.title and failure_class.what
        assert failure_class.replayscope and failure_class.vllm and failure_class.sglang
        assert BY_KEY[failure_class.key] is failure_class


def test_actions_use_the_engines_real_flags():
    assert "--gpu-memory-utilization" in " ".join(BY_KEY["oom"].vllm)
    assert "--mem-fraction-static" in " ".join(BY_KEY["oom"].sglang)
    assert "--enable-torch-compile" in " ".join(BY_KEY["compile_error"].sglang)
    assert "-O.mode=0" in " ".join(BY_KEY["compile_error"].vllm)
    assert "VLLM_ENGINE_READY_TIMEOUT_S" in " ".join(BY_KEY["timeout"].vllm)
    assert "--watchdog-timeout" in " ".join(BY_KEY["timeout"].sglang)
    assert "NCCL_DEBUG=INFO" in " ".join(BY_KEY["collective"].vllm)


def test_the_headline_of_a_traceback_is_its_exception_line():
    text = ("Traceback (most recent call last):\n  File \"x.py\", line 3, in capture\n    g.capture_end()\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert first_line(text) == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert first_line("AcceleratorError: CUDA error\nSearch for ...") == "AcceleratorError: CUDA error"
    assert first_line("x" * 500, limit=10) == "x" * 9 + "…"


def test_where_a_cut_traceback_stops_names_no_cause():
    """An importer's "cut off" note names the frame a traceback stops in; a frame called
    all_reduce is where the process stood, not an NCCL failure the log reported."""
    from replayscope.collector.importers.failures import CUT_OFF

    cut = f"WorkerProc hit an exception: {CUT_OFF} (the traceback stops in all_reduce, parallel_state.py)"
    assert classify(cut).key == "unknown"
    assert classify(f"RuntimeError: NCCL error: unhandled cuda error: {CUT_OFF}").key == "collective"

