"""A decode step compiled with torch.compile(mode="reduce-overhead") that updates its KV cache in
place, the cache passed in as a plain argument: Inductor's CUDA-graph trees cannot prove the
cache is static, so the in-place update is a mutated input and Inductor skips CUDA graphs
("due to mutated inputs (1 instances)"). It knows nothing of replayscope.

    python mutated_step.py
"""

import torch

WIDTH, SLOTS, STEPS = 64, 32, 12


@torch.compile(mode="reduce-overhead", dynamic=False)
def _compiled_step(x, cache, position, weight):
    cache.index_copy_(0, position, x)          # the KV cache updated in place
    return torch.tanh(x @ weight + cache.mean(0, keepdim=True))


def decode_step(x, cache, position, weight):
    """One decode step of the program (the function a trace names with --step)."""
    return _compiled_step(x, cache, position, weight)


def main():
    torch.manual_seed(0)
    cache = torch.zeros(SLOTS, WIDTH, device="cuda")
    weight = torch.randn(WIDTH, WIDTH, device="cuda") / WIDTH ** 0.5
    x = torch.randn(1, WIDTH, device="cuda")
    for step in range(STEPS):
        x = decode_step(x, cache, torch.tensor([step], device="cuda"), weight)
    torch.cuda.synchronize()
    print("steps", STEPS)


if __name__ == "__main__":
    main()
