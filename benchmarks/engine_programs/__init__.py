"""What the real-engine harnesses' programs (``benchmarks/vllm_programs``, ``benchmarks/sglang_programs``)
share. Standard library only: they run as plain scripts in the engine's Python."""
