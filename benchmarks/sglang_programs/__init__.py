"""Programs the real-SGLang harness (``benchmarks.sglang_harness``) runs, traced or not, on a GPU."""
