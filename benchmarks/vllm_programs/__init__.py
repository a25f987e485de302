"""Programs the real-vLLM harness (``benchmarks.vllm_harness``) runs, traced or not, on a GPU."""
